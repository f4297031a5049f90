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

Keys used by `tpf`: select, extend-select, ignore, extend-ignore, per-file-ignores, exclude,
extend-exclude, filename, disable-noqa, vram-gpu, tpf-notes, tpf-cache / tpf-no-cache.
Command-line options override the file.
"""
from __future__ import annotations

import argparse
import configparser
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


def load_config(explicit: Optional[str] = None, isolated: bool = False) -> Config:
    """The configuration flake8 would use from the current directory (or `explicit`)."""
    argv: List[str] = ["--isolated"] if isolated else []
    if explicit is not None and not isolated:
        argv += ["--config", explicit]
    options = _flake8_options(argv)
    return Config(
        select=options.select,
        ignore=options.ignore,
        extend_select=list(options.extend_select or []),
        extend_ignore=list(options.extend_ignore or []),
        per_file_ignores=_per_file_ignores(options.per_file_ignores),
        exclude=list(options.exclude or []),
        extend_exclude=list(options.extend_exclude or []),
        filename=list(options.filename or ["*.py"]),
        disable_noqa=bool(options.disable_noqa),
        vram_gpu=_text_or_none(getattr(options, "vram_gpu", None)),
        notes=bool(getattr(options, "tpf_notes", False)),
        cache=_cache_wanted(options),
    )


def _flake8_options(argv: List[str]) -> argparse.Namespace:
    from flake8 import exceptions
    from flake8.options.parse_args import parse_args

    try:
        _, options = parse_args(argv)
    except exceptions.ExecutionError as exc:     # --config names a file that does not exist
        raise ConfigError(_first_line(exc)) from None
    except configparser.Error as exc:            # duplicate key or section, bad syntax
        raise ConfigError(f"cannot read the configuration: {_first_line(exc)}") from None
    except (ValueError, TypeError) as exc:       # a value of the wrong type or a bad code
        raise ConfigError(f"bad value in the configuration: {_first_line(exc)}") from None
    except SystemExit:   # argparse inside flake8 rejected a config value (choices)
        raise ConfigError("bad value in the configuration (run flake8 to see which)") from None
    except Exception as exc:    # a plugin flake8 cannot load: flake8 would stop too
        raise ConfigError(f"flake8 could not start: {_first_line(exc)}") from None
    return options


def _cache_wanted(options: argparse.Namespace) -> bool:
    from .plugin import cache_wanted
    return cache_wanted(options)


def _per_file_ignores(raw: object) -> List[Tuple[str, List[str]]]:
    if not raw:
        return []
    if isinstance(raw, list):            # flake8 versions that already split it
        raw = "\n".join(raw)
    try:
        return flake8_utils.parse_files_to_codes_mapping(raw)
    except Exception as exc:  # flake8's ExecutionError
        raise ConfigError(f"per-file-ignores: {_first_line(exc)}") from None


def _text_or_none(value: object) -> Optional[str]:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
