"""The `[flake8]` configuration, read the way flake8 reads it, so one file serves both.

Discovery (flake8's rules): walking up from the current directory, in each directory the
first of `setup.cfg`, `tox.ini`, `.flake8` that has a `[flake8]` section wins; files are
never merged and `pyproject.toml` is never read. `--config FILE` names one explicitly and
`--isolated` ignores all configuration. Keys may use dashes or underscores.

Keys used by `tpf`: select, extend-select, ignore, extend-ignore, per-file-ignores, exclude,
extend-exclude, filename, vram-gpu. Command-line options override the file.
"""
from __future__ import annotations

import configparser
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from flake8 import utils as flake8_utils

CANDIDATES = ("setup.cfg", "tox.ini", ".flake8")
# flake8's defaults.EXCLUDE
DEFAULT_EXCLUDE = (".svn", "CVS", ".bzr", ".hg", ".git", "__pycache__", ".tox", ".nox", ".eggs",
                   "*.egg")


class ConfigError(Exception):
    """A configuration the user must fix; the CLI prints it on one line and exits 2."""


@dataclass
class Config:
    path: Optional[str] = None                 # the file read, if any
    directory: str = field(default_factory=os.getcwd)
    values: Dict[str, str] = field(default_factory=dict)   # raw [flake8] keys, dashes

    def get_list(self, key: str) -> Optional[List[str]]:
        raw = self.values.get(key)
        if raw is None:
            return None
        return flake8_utils.parse_comma_separated_list(raw)

    def get(self, key: str) -> Optional[str]:
        value = self.values.get(key)
        return value.strip() if value is not None else None

    def paths(self, key: str) -> Optional[List[str]]:
        """A comma-separated list of path patterns, normalised against the config's folder."""
        items = self.get_list(key)
        if items is None:
            return None
        return [flake8_utils.normalize_path(item, self.directory) for item in items]

    def per_file_ignores(self) -> List[Tuple[str, List[str]]]:
        raw = self.values.get("per-file-ignores")
        if not raw:
            return []
        try:
            return flake8_utils.parse_files_to_codes_mapping(raw)
        except Exception as exc:  # flake8's ExecutionError
            first = str(exc).strip().splitlines()[0]
            raise ConfigError(f"{self.path}: per-file-ignores: {first}") from None


def find_config_file(start: str) -> Optional[str]:
    """flake8's discovery: the first candidate with a [flake8] section, walking up."""
    home = os.path.expanduser("~")
    path = os.path.abspath(start)
    while True:
        for candidate in CANDIDATES:
            cfg_path = os.path.join(path, candidate)
            if not os.path.isfile(cfg_path):
                continue
            parser = configparser.RawConfigParser()
            try:
                parser.read(cfg_path, encoding="UTF-8")
            except (UnicodeDecodeError, configparser.Error):
                continue   # flake8 ignores an unparsable candidate with a warning
            if parser.has_section("flake8") or parser.has_section("flake8:local-plugins"):
                return cfg_path
        parent = os.path.dirname(path)
        if parent == path or os.path.abspath(home) == parent:
            return None
        path = parent


def load_config(explicit: Optional[str] = None, isolated: bool = False,
                start: Optional[str] = None) -> Config:
    cwd = os.path.abspath(start or os.getcwd())
    if isolated:
        return Config(None, cwd, {})
    path = explicit if explicit is not None else find_config_file(cwd)
    if path is None:
        return Config(None, cwd, {})
    parser = configparser.RawConfigParser()
    try:
        read = parser.read(path, encoding="UTF-8")
    except (UnicodeDecodeError, configparser.Error) as exc:
        raise ConfigError(f"cannot read config {path}: {str(exc).splitlines()[0]}") from None
    if not read:
        raise ConfigError(f"the config file does not exist: {path}")
    values: Dict[str, str] = {}
    if parser.has_section("flake8"):
        for key, value in parser.items("flake8"):
            values[key.replace("_", "-")] = value
    return Config(os.path.abspath(path), os.path.dirname(os.path.abspath(path)), values)
