"""The `[flake8]` configuration, read by flake8's own machinery, so one file serves both.

`tpf` asks flake8 to do what `flake8` itself does at start-up (`flake8.options.parse_args`:
find the config file, load the installed plugins, register every option, parse the file's
values with each option's type) and takes the values it needs from the resulting namespace.
So discovery (walking up from the current directory, the first of `setup.cfg`, `tox.ini`,
`.flake8` with a `[flake8]` section; `pyproject.toml` never read), `--config FILE`,
`--isolated`, dashes or underscores in keys, types (`disable-noqa = maybe` is an error),
code validation (`ignore = TPF-1` is an error) and path normalisation are flake8's, not a
copy of them. A file flake8 cannot parse is an error here too, reported on one line.

flake8 has no documented API for "read the configuration"; `parse_args` is the one function
its command line, its legacy API and its worker processes all call, and it has the same
signature from flake8 6.0 (our minimum) to 7.x.

Before flake8 reads anything, `tpf` looks at the files flake8 would consider (the same walk
up from the current directory, or the `--config` file) and says what flake8 keeps quiet
about: a candidate it cannot read (no permission, a folder named `setup.cfg`), bad UTF-8 or
INI syntax (`[flake8` with no `]`) is one warning line naming the file (flake8 skips such a
file, and so does `tpf`); a named pipe or socket is an error (flake8 would wait on it
forever); an explicit `--config` file that cannot be read is an error naming why.

Keys used by `tpf`: select, extend-select, ignore, extend-ignore, per-file-ignores, exclude,
extend-exclude, filename, disable-noqa, vram-gpu, tpf-notes, tpf-cache / tpf-no-cache.
Command-line options override the file. The `[tool.flake8-torch-preflight]` table of
pyproject.toml, which flake8 cannot read, overrides `[flake8]` key by key (`pyproject.py`).
"""
from __future__ import annotations

import argparse
import configparser
import os
import stat
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from flake8 import utils as flake8_utils


class ConfigError(Exception):
    """A configuration the user must fix; the CLI prints it on one line and exits 2."""


@dataclass
class Config:
    select: Optional[List[str]] = None
    ignore: Optional[List[str]] = None
    extend_select: List[str] = field(default_factory=list)
    extend_ignore: List[str] = field(default_factory=list)
    per_file_ignores: List[Tuple[str, List[str]]] = field(default_factory=list)
    exclude: List[str] = field(default_factory=list)          # normalised like flake8's
    extend_exclude: List[str] = field(default_factory=list)
    filename: List[str] = field(default_factory=lambda: ["*.py"])
    disable_noqa: bool = False
    vram_gpu: Optional[str] = None
    notes: bool = False
    cache: bool = True         # `tpf-cache = false` or `tpf-no-cache = true` turn it off
    source: Optional[str] = None        # the file the values came from
    plugin_codes: List[str] = field(default_factory=list)   # installed checkers' prefixes
    warnings: List[str] = field(default_factory=list)       # config files flake8 skipped
    # `[tool.flake8-torch-preflight]` of pyproject.toml (`pyproject.py`): where, and its keys
    toml_source: Optional[str] = None
    toml_keys: List[str] = field(default_factory=list)

    def origin(self, key: str) -> Optional[str]:
        """The file the value of `key` (`select`, `per-file-ignores`) came from."""
        return self.toml_source if key in self.toml_keys else self.source


def load_config(explicit: Optional[str] = None, isolated: bool = False) -> Config:
    """The configuration flake8 would use from the current directory (or `explicit`), with
    the `[tool.flake8-torch-preflight]` table of pyproject.toml over it (`pyproject.py`)."""
    from .pyproject import apply_table, find_pyproject

    if isolated:
        return _load_flake8_config(None, True)
    if explicit is not None and explicit.endswith(".toml"):
        problem = _unreadable(explicit) if os.path.lexists(explicit) else "it does not exist"
        if problem:
            raise ConfigError(f"{explicit}: cannot read the configuration ({problem})")
        return apply_table(_load_flake8_config(None, True), explicit)
    config = _load_flake8_config(explicit, False)
    toml = find_pyproject(".") if explicit is None else None
    return apply_table(config, toml) if toml else config


def _load_flake8_config(explicit: Optional[str], isolated: bool) -> Config:
    """The `[flake8]` configuration flake8 would use (none when `isolated`)."""
    argv: List[str] = ["--isolated"] if isolated else []
    source, warnings = None, []
    if explicit is not None and not isolated:
        argv += ["--config", explicit]
        source = explicit
        problem = _unreadable(explicit) if os.path.lexists(explicit) else ""
        if problem:
            raise ConfigError(f"{explicit}: cannot read the configuration ({problem})")
    elif not isolated:
        source, warnings = discover_config(os.path.abspath("."))
    plugins, options = _flake8_options(argv, source)
    checkers = plugins.checkers
    config = Config(
        select=options.select,
        ignore=options.ignore,
        extend_select=list(options.extend_select or []),
        extend_ignore=list(options.extend_ignore or []),
        per_file_ignores=_per_file_ignores(options.per_file_ignores, source),
        exclude=list(options.exclude or []),
        extend_exclude=list(options.extend_exclude or []),
        filename=list(options.filename or ["*.py"]),
        disable_noqa=bool(options.disable_noqa),
        vram_gpu=_text_or_none(getattr(options, "vram_gpu", None)),
        notes=_notes_wanted(options),
        cache=_cache_wanted(options),
    )
    config.source, config.warnings = source, warnings
    config.plugin_codes = sorted({p.entry_name for p in checkers.tree + checkers.logical_line
                                  + checkers.physical_line})
    return config


def discover_config(folder: str) -> Tuple[Optional[str], List[str]]:
    """flake8's discovery walk (`options.config._find_config_file`: from `folder` up to the
    file system root or the home folder, the first of setup.cfg, tox.ini, .flake8 with a
    `[flake8]` section), done first to say what flake8 skips in silence: (the file found,
    one warning per candidate skipped). A FIFO or socket is a ConfigError."""
    home = os.path.expanduser("~")
    warnings: List[str] = []
    path = folder
    while True:
        for candidate in ("setup.cfg", "tox.ini", ".flake8"):
            found, warning = _candidate(os.path.join(path, candidate))
            if warning:
                warnings.append(warning)
            if found:
                return found, warnings
        parent = os.path.dirname(path)
        if parent == path or _same(parent, home):
            return None, warnings
        path = parent


def _candidate(path: str) -> Tuple[Optional[str], str]:
    """(path when it holds a [flake8] section, a warning when flake8 will skip it)."""
    if not os.path.lexists(path):
        return None, ""
    relative = os.path.relpath(path)
    problem = _unreadable(path)
    if problem.startswith("not a regular file"):
        raise ConfigError(f"{relative}: {problem}; flake8 would wait on it forever")
    if not problem:
        problem = _unparsable(path)
    if problem:
        return None, f"{relative}: {problem}; flake8 skips it, so does tpf"
    parser = configparser.RawConfigParser()
    parser.read(path, encoding="UTF-8")
    return (path if "flake8" in parser or "flake8:local-plugins" in parser else None), ""


def _unreadable(path: str) -> str:
    """Why `path` cannot be read as a configuration file ('' when it can)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISDIR(mode):
        return "is a directory"
    if not stat.S_ISREG(mode):
        kind = "a named pipe" if stat.S_ISFIFO(mode) else \
            "a socket" if stat.S_ISSOCK(mode) else "a device"
        return f"not a regular file ({kind})"
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    return ""


def _unparsable(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
        configparser.RawConfigParser().read_string(text, path)
    except UnicodeDecodeError as exc:
        return f"not UTF-8 (byte {exc.start})"
    except configparser.Error as exc:
        return f"cannot parse it ({_first_line(exc)})"
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    return ""


def _same(one: str, other: str) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def _flake8_options(argv: List[str], source: Optional[str]):
    from flake8 import exceptions
    from flake8.options.parse_args import parse_args

    where = f" ({os.path.relpath(source)})" if source else ""
    try:
        return parse_args(argv)
    except exceptions.ExecutionError as exc:     # --config names a file that does not exist
        raise ConfigError(_first_line(exc)) from None
    except configparser.Error as exc:            # duplicate key or section, bad syntax
        raise ConfigError(f"cannot read the configuration{where}: {_first_line(exc)}") from None
    except (ValueError, TypeError) as exc:       # a value of the wrong type or a bad code
        raise ConfigError(f"bad value in the configuration{where}: {_first_line(exc)}") \
            from None
    except SystemExit:   # argparse inside flake8 rejected a config value (choices)
        raise ConfigError(f"bad value in the configuration{where} (run flake8 to see which)") \
            from None
    except Exception as exc:    # a plugin flake8 cannot load: flake8 would stop too
        raise ConfigError(f"flake8 could not start: {_first_line(exc)}") from None


def _cache_wanted(options: argparse.Namespace) -> bool:
    from .plugin import cache_wanted
    return cache_wanted(options)


def _notes_wanted(options: argparse.Namespace) -> bool:
    from .plugin import notes_wanted
    return notes_wanted(options)


def _per_file_ignores(raw: object, source: Optional[str]) -> List[Tuple[str, List[str]]]:
    if not raw:
        return []
    if isinstance(raw, list):            # flake8 versions that already split it
        raw = "\n".join(raw)
    try:
        return flake8_utils.parse_files_to_codes_mapping(raw)
    except Exception as exc:  # flake8's ExecutionError
        where = f" ({os.path.relpath(source)})" if source else ""
        raise ConfigError(f"per-file-ignores{where}: {_first_line(exc)}") from None


def _text_or_none(value: object) -> Optional[str]:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
