"""`[tool.flake8-torch-preflight]` in `pyproject.toml`: `tpf`'s configuration there.

flake8 itself cannot read `pyproject.toml`, so this table configures `tpf` only; a project
that also runs flake8 keeps a `[flake8]` section for it. The keys are those `tpf` reads from
`[flake8]`, spelt as there (dashes; underscores are accepted too), without our `tpf-` prefix
(the table is ours already): select, ignore, extend-select, extend-ignore (lists of codes),
per-file-ignores (a table: pattern -> list of codes), exclude, extend-exclude, filename
(lists of patterns; exclude paths are relative to the pyproject.toml's folder, as flake8
makes them relative to its config file's), disable-noqa, notes, cache (booleans), vram-gpu
(a string). A code list may also be one comma-separated string, as in `[flake8]`.

Discovery: the nearest `pyproject.toml` holding the table, walking up from the current
folder (to the file system root or the home folder, as flake8 walks). Precedence: the
command line, then this table, then `[flake8]` (setup.cfg / tox.ini / .flake8), key by key.
`--isolated` reads neither; `--config FILE.toml` reads that file's table instead (and no
`[flake8]` section).

A value of the wrong type, an unknown key (a typo would silently drop a setting) or a file
holding the table that is not valid TOML is a ConfigError: one line, exit 2. A
`pyproject.toml` without the table is none of our business, even when it does not parse.
"""
from __future__ import annotations

import difflib
import os
from typing import Any, Dict, List, Optional, Tuple

from .config import Config, ConfigError

TABLE = "flake8-torch-preflight"
_CODES = ("select", "ignore", "extend-select", "extend-ignore")
_PATHS = ("exclude", "extend-exclude", "filename")
_FLAGS = {"disable-noqa": "disable_noqa", "notes": "notes", "cache": "cache"}
KEYS = (*_CODES, *_PATHS, "per-file-ignores", *_FLAGS, "vram-gpu")


def find_pyproject(folder: str) -> Optional[str]:
    """The nearest pyproject.toml above `folder` that holds our table (None: none)."""
    home = os.path.expanduser("~")
    path = os.path.abspath(folder)
    while True:
        candidate = os.path.join(path, "pyproject.toml")
        if os.path.isfile(candidate) and _mentions_table(candidate):
            return candidate
        parent = os.path.dirname(path)
        if parent == path or _same(parent, home):
            return None
        path = parent


def _mentions_table(path: str) -> bool:
    """Cheap: the text names the table (parsed, and errors reported, only then)."""
    try:
        with open(path, "rb") as handle:
            text = handle.read()
    except OSError:
        return False
    return f"tool.{TABLE}".encode() in text or f'tool."{TABLE}"'.encode() in text


def _same(one: str, other: str) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def read_table(path: str) -> Dict[str, Any]:
    """The table, keys with dashes; a file that cannot be read or parsed is a ConfigError."""
    where = os.path.relpath(path)
    try:
        import tomllib   # Python 3.11+
    except ImportError:
        import tomli as tomllib   # a dependency below 3.11
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the configuration ({exc.strerror or exc})") \
            from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: not valid TOML ({str(exc).splitlines()[0]})") from None
    tool = data.get("tool")
    table = tool.get(TABLE) if isinstance(tool, dict) else None
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [tool.{TABLE}] must be a table")
    return {key.replace("_", "-"): value for key, value in table.items()}


def apply_table(config: Config, path: str) -> Config:
    """`config` with the table's values over it, key by key; `config.toml_source` and
    `config.toml_keys` say which values came from there."""
    where = f"{os.path.relpath(path)} [tool.{TABLE}]"
    table = read_table(path)
    folder = os.path.dirname(os.path.abspath(path))
    for key, value in table.items():
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ConfigError(f"{where}: unknown key {key!r}{hint} (keys: {', '.join(KEYS)})")
        _set(config, key, value, where, folder)
    config.toml_source, config.toml_keys = path, sorted(table)
    return config


def _set(config: Config, key: str, value: Any, where: str, folder: str) -> None:
    from flake8.utils import normalize_paths

    if key in _CODES:
        codes = _strings(value, key, where, split=True)
        setattr(config, key.replace("-", "_"), [c.upper() for c in codes])
    elif key in _PATHS:   # a pattern with a `/` is made absolute from the file's folder
        setattr(config, key.replace("-", "_"),
                normalize_paths(_strings(value, key, where, split=True), folder))
    elif key == "per-file-ignores":
        config.per_file_ignores = _per_file(value, where)
    elif key in _FLAGS:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {key} must be true or false, not {value!r}")
        setattr(config, _FLAGS[key], value)
    else:   # vram-gpu
        config.vram_gpu = _gpu(value, where)


def _strings(value: Any, key: str, where: str, split: bool = False) -> List[str]:
    if isinstance(value, str) and split:
        value = [part for part in value.replace("\n", ",").split(",")]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {key} must be a list of strings, not {value!r}")
    return [v.strip() for v in value if v.strip()]


def _per_file(value: Any, where: str) -> List[Tuple[str, List[str]]]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: per-file-ignores must be a table of pattern = [codes] "
                          f"(per-file-ignores = {{\"tests/*\" = [\"TPF001\"]}}), not {value!r}")
    return [(pattern, [c.upper() for c in _strings(codes, f"per-file-ignores.{pattern}", where,
                                                   split=True)])
            for pattern, codes in value.items()]


def _gpu(value: Any, where: str) -> Optional[str]:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: vram-gpu must be a string, not {value!r}")
    try:
        from vram_estimator.flake8_plugin import gpu_option_problem
    except ImportError:
        return value.strip() or None
    why = gpu_option_problem(value.strip())
    if why:
        raise ConfigError(f"{where}: vram-gpu {value[:64]!r}: {why}")
    return value.strip() or None
