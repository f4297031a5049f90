"""`tpf`: check, fix, explain and list rules without going through flake8.

`tpf check` runs the same engine as the flake8 plugin, reads the same `[flake8]`
configuration and honours `# noqa` exactly as flake8 does, so one configuration and one set
of suppressions serve both. Exit codes: 0 clean, 1 findings at or above `--fail-on` (or a
file that could not be checked), 2 bad invocation.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import io
import os
import re
import sys
import tokenize
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from fnmatch import fnmatch
from typing import Dict, List, Optional, Sequence, Tuple

from . import __version__
from .config import DEFAULT_EXCLUDE, Config, ConfigError, load_config
from .engine import has_skip_file_comment, lint_tree
from .findings import ERROR, NOTE, WARNING, Finding
from .noqa import NoqaMap

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
_CODE = re.compile(r"^[A-Z]{1,3}[0-9]{0,3}$")


class UsageError(Exception):
    """Bad invocation: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        raise UsageError(f"{message} (see `{self.prog} --help`)")


# ---------------------------------------------------------------------------- settings

@dataclass
class Settings:
    """Everything a worker needs to check one file; plain data, so it pickles."""
    select: Optional[List[str]] = None
    ignore: Optional[List[str]] = None
    extend_select: List[str] = field(default_factory=list)
    extend_ignore: List[str] = field(default_factory=list)
    per_file_ignores: List[Tuple[str, List[str]]] = field(default_factory=list)
    disable_noqa: bool = False
    vram_gpu: Optional[str] = None
    vram: bool = True


def known_codes() -> List[str]:
    from .reporting import VRAM_RULES
    from .rules import ALL_RULES

    return [rule.code for rule in ALL_RULES] + list(VRAM_RULES)


def _validate_codes(codes: Optional[List[str]], option: str) -> None:
    if not codes:
        return
    known = known_codes()
    for code in codes:
        if not _CODE.match(code) or not any(k.startswith(code) for k in known):
            raise UsageError(f"unknown rule code {code!r} in {option} "
                             f"(known: {known[0]}..{known[-1]}; run `tpf rules`)")


class Decider:
    """flake8's select/ignore decision (its own DecisionEngine), plus per-file-ignores."""

    def __init__(self, settings: Settings) -> None:
        from flake8.style_guide import DecisionEngine

        self.settings = settings
        self._engines: Dict[Tuple[str, ...], object] = {}
        self._make = DecisionEngine
        # flake8 makes a per-file pattern with a path separator absolute from the cwd
        from flake8.utils import normalize_path
        self.per_file = [(normalize_path(pattern), codes)
                         for pattern, codes in settings.per_file_ignores]

    def _engine(self, extra: Tuple[str, ...]):
        engine = self._engines.get(extra)
        if engine is None:
            s = self.settings
            options = argparse.Namespace(
                select=s.select, ignore=s.ignore, extend_select=s.extend_select,
                extend_ignore=[*s.extend_ignore, *extra],
                extended_default_select=["TPF"], extended_default_ignore=[])
            engine = self._engines[extra] = self._make(options)
        return engine

    def for_file(self, path: str):
        matching = [(pattern, codes) for pattern, codes in self.per_file
                    if _matches(path, [pattern])]
        extra: Tuple[str, ...] = ()
        if matching:   # flake8 uses the one style guide whose pattern is longest
            extra = tuple(max(matching, key=lambda m: len(m[0]))[1])
        engine = self._engine(extra)
        from flake8.style_guide import Decision
        return lambda code: engine.decision_for(code) is Decision.Selected


def _matches(path: str, patterns: Sequence[str]) -> bool:
    """flake8's `utils.matches_filename`: the basename, then the absolute path."""
    if not patterns:
        return False
    basename = os.path.basename(path)
    if basename not in (".", "..") and any(fnmatch(basename, p) for p in patterns):
        return True
    absolute = os.path.abspath(path)
    return any(fnmatch(absolute, p) for p in patterns)


# ---------------------------------------------------------------------------- reading

class FileProblem(Exception):
    """A file we could not check: one line for the user."""


def read_source(path: str) -> Tuple[str, str]:
    """(text, encoding), honouring a BOM or PEP 263 coding cookie."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as handle:
                data = handle.read()
    except IsADirectoryError:
        raise FileProblem("is a directory") from None
    except OSError as exc:
        raise FileProblem(f"cannot read: {exc.strerror or exc}") from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise FileProblem(f"cannot decode: {exc.msg}") from None
    try:
        return data.decode(encoding), encoding
    except (UnicodeDecodeError, LookupError) as exc:
        where = f" at byte {exc.start}" if isinstance(exc, UnicodeDecodeError) else ""
        raise FileProblem(f"cannot decode as {encoding}{where}; save it as UTF-8 "
                          f"or declare its encoding") from None


def parse_source(source: str, path: str) -> ast.Module:
    try:
        return ast.parse(source, filename=path)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        raise FileProblem(f"syntax error: {exc.msg} ({where})") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise FileProblem(f"cannot parse: {exc}") from None


# ---------------------------------------------------------------------------- one file

@dataclass
class FileResult:
    path: str
    findings: List[Finding] = field(default_factory=list)
    problem: Optional[str] = None
    lines: Dict[int, str] = field(default_factory=dict)   # the reported lines, for display


_DECIDER: Dict[str, Decider] = {}


def _decider(settings: Settings) -> Decider:
    key = repr(settings)
    if key not in _DECIDER:
        _DECIDER.clear()
        _DECIDER[key] = Decider(settings)
    return _DECIDER[key]


def keep_predicate(settings: Settings, path: str, lines: Sequence[str]):
    selected = _decider(settings).for_file(path)
    noqa = NoqaMap(lines)

    def keep(finding: Finding) -> bool:
        if not selected(finding.code):
            return False
        return settings.disable_noqa or not noqa.suppressed(finding.line, finding.code)
    return keep


def check_file(path: str, settings: Settings, source: Optional[str] = None) -> FileResult:
    result = FileResult(path)
    try:
        if source is None:
            source, _ = read_source(path)
        lines = source.splitlines(True)
        if not settings.disable_noqa and NoqaMap(lines).skip_file():
            return result
        tree = parse_source(source, path)
        findings: List[Finding] = []
        if not has_skip_file_comment(lines):
            findings.extend(lint_tree(tree, path))
        if settings.vram:
            findings.extend(_vram_findings(tree, lines, path, settings))
        keep = keep_predicate(settings, path, lines)
        result.findings = sorted((f for f in findings if keep(f)),
                                 key=lambda f: (f.line, f.col, f.code, f.message))
        result.lines = {f.line: lines[f.line - 1] for f in result.findings
                        if 1 <= f.line <= len(lines)}
    except FileProblem as exc:
        result.problem = str(exc)
    except RecursionError:
        result.problem = "too deeply nested to analyse"
    return result


def _check_worker(args):
    path, settings = args
    return check_file(path, settings)


# ---------------------------------------------------------------------------- vram plugin

_VRAM_STATE: Dict[str, object] = {}


def _vram_findings(tree, lines, path, settings: Settings) -> List[Finding]:
    """TPF100-TPF102 from the optional `vram_estimator` flake8 plugin, when installed."""
    checker = _VRAM_STATE.get("class", False)
    if checker is False:
        try:
            from vram_estimator.flake8_plugin import VramChecker as checker  # type: ignore
        except Exception:
            checker = None
        _VRAM_STATE["class"] = checker
    if checker is not None and hasattr(checker, "parse_options") \
            and _VRAM_STATE.get("gpu", False) != settings.vram_gpu:
        try:
            checker.parse_options(argparse.Namespace(vram_gpu=settings.vram_gpu))
            _VRAM_STATE["gpu"] = settings.vram_gpu
        except Exception:
            pass
    if checker is None:
        return []
    from .reporting import Item
    out = []
    try:
        import inspect
        params = inspect.signature(checker.__init__).parameters
        available = {"tree": tree, "lines": list(lines), "filename": path}
        kwargs = {name: available[name] for name in params if name in available}
        if "file_tokens" in params:
            try:
                kwargs["file_tokens"] = list(tokenize.generate_tokens(io.StringIO("".join(lines)).readline))
            except (tokenize.TokenError, SyntaxError):
                kwargs["file_tokens"] = []
        for line, col, text, _ in checker(**kwargs).run():
            code, _, rest = str(text).partition(" ")
            item = Item.from_text(path, line, col + 1, code, rest)
            out.append(Finding(line, col, code, item.severity, item.text, "", ""))
    except Exception:
        return []
    return out


# ---------------------------------------------------------------------------- discovery

@dataclass
class Discovery:
    exclude: List[str]
    filename: List[str]


def discover(paths: Sequence[str], discovery: Discovery) -> List[str]:
    """flake8's file discovery: explicit files always, `*.py` under folders, minus excludes."""
    files: List[str] = []
    for path in paths:
        if path == "-":
            files.append(path)
            continue
        if not os.path.exists(path):
            raise UsageError(f"{path}: no such file or directory")
        if _matches(path, discovery.exclude):
            continue
        if not os.path.isdir(path):
            files.append(path)
            continue
        for root, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not _matches(os.path.join(root, d), discovery.exclude))
            for name in sorted(names):
                full = os.path.join(root, name)
                if _matches(full, discovery.filename) and not _matches(full, discovery.exclude):
                    files.append(full)
    seen = set()
    return [f for f in files if not (f in seen or seen.add(f))]


# ---------------------------------------------------------------------------- commands

def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", default=["."], help="files or folders (default: .); - for stdin")
    parser.add_argument("--select", type=_code_list,
                        help="comma-separated codes or prefixes to report (overrides config)")
    parser.add_argument("--ignore", type=_code_list,
                        help="comma-separated codes or prefixes to skip (overrides config)")
    parser.add_argument("--extend-select", type=_code_list, default=None)
    parser.add_argument("--extend-ignore", type=_code_list, default=None)
    parser.add_argument("--exclude", type=_path_list, help="patterns to skip (overrides config)")
    parser.add_argument("--config", help="read this file's [flake8] section instead of discovering one")
    parser.add_argument("--isolated", action="store_true", help="ignore every configuration file")
    parser.add_argument("--disable-noqa", action="store_true", help="report lines with `# noqa` too")
    parser.add_argument("--stdin-display-name", default="stdin")


def _code_list(text: str) -> List[str]:
    return [c.strip().upper() for c in re.split(r"[,\s]+", text) if c.strip()]


def _path_list(text: str) -> List[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tpf", description="Catch silent PyTorch training bugs from source.")
    parser.add_argument("--version", action="version", version=f"tpf {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    check = sub.add_parser("check", help="report findings")
    _add_common(check)
    check.add_argument("--format", choices=("text", "json", "sarif", "github"), default="text")
    check.add_argument("--fail-on", choices=(ERROR, WARNING, NOTE), default=WARNING,
                       help="lowest level that makes the exit code 1 (default: warning)")
    check.add_argument("--jobs", "-j", default="auto", help="worker processes (N or auto)")
    check.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    check.add_argument("--output-file", "-o", help="write the report here instead of stdout")
    check.add_argument("--vram-gpu", help="target GPU for the memory codes (TPF100-TPF102)")
    check.add_argument("--no-vram", action="store_true", help="do not run the memory plugin")

    fix = sub.add_parser("fix", help="apply the safe autofixes (TPF001, TPF002, TPF005, TPF013)")
    _add_common(fix)
    fix.add_argument("--diff", action="store_true", help="print a unified diff; change nothing")

    explain = sub.add_parser("explain", help="show a rule's documentation")
    explain.add_argument("code")
    sub.add_parser("rules", help="list every rule")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        print(f"tpf: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"tpf: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("tpf: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_CLEAN


def _main(argv: List[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.command == "rules":
        from .reporting import rules_table
        sys.stdout.write(rules_table())
        return EXIT_CLEAN
    if args.command == "explain":
        from .reporting import explain
        text = explain(args.code)
        if text is None:
            raise UsageError(f"unknown rule code {args.code!r} (run `tpf rules`)")
        sys.stdout.write(text)
        return EXIT_CLEAN
    for option in ("select", "ignore", "extend_select", "extend_ignore"):
        _validate_codes(getattr(args, option), "--" + option.replace("_", "-"))
    config = load_config(args.config, args.isolated)
    settings, discovery = _settings(args, config)
    files = discover(args.paths, discovery)
    if args.command == "fix":
        return _fix(files, settings, args)
    return _check(files, settings, args)


def _settings(args, config: Config) -> Tuple[Settings, Discovery]:
    def pick(cli, key):
        return cli if cli is not None else config.get_list(key)

    settings = Settings(
        select=pick(args.select, "select"),
        ignore=pick(args.ignore, "ignore"),
        extend_select=[*(config.get_list("extend-select") or []), *(args.extend_select or [])],
        extend_ignore=[*(config.get_list("extend-ignore") or []), *(args.extend_ignore or [])],
        per_file_ignores=config.per_file_ignores(),
        disable_noqa=args.disable_noqa or _truthy(config.get("disable-noqa")),
        vram_gpu=getattr(args, "vram_gpu", None) or config.get("vram-gpu"),
        vram=not getattr(args, "no_vram", False),
    )
    if args.exclude is not None:
        exclude = [os.path.abspath(p) if os.sep in p else p for p in args.exclude]
    else:
        exclude = config.paths("exclude") or list(DEFAULT_EXCLUDE)
    exclude += config.paths("extend-exclude") or []
    discovery = Discovery(exclude, config.get_list("filename") or ["*.py"])
    return settings, discovery


def _truthy(value: Optional[str]) -> bool:
    return bool(value) and value.strip().lower() in ("1", "true", "yes", "on")


def _jobs(value: str, files: int) -> int:
    if value == "auto":
        return min(os.cpu_count() or 1, max(files // 8, 1))
    try:
        jobs = int(value)
    except ValueError:
        raise UsageError(f"--jobs must be a number or 'auto', not {value!r}") from None
    if jobs < 1:
        raise UsageError("--jobs must be at least 1")
    return jobs


def run_checks(files: Sequence[str], settings: Settings, jobs: int,
               stdin_name: str = "stdin") -> List[FileResult]:
    on_disk = [f for f in files if f != "-"]
    if jobs > 1 and len(on_disk) > 1:
        with ProcessPoolExecutor(max_workers=min(jobs, len(on_disk))) as pool:
            done = dict(zip(on_disk, pool.map(_check_worker, [(f, settings) for f in on_disk],
                                              chunksize=max(1, len(on_disk) // (jobs * 4)))))
    else:
        done = {f: check_file(f, settings) for f in on_disk}
    results = []
    for f in files:
        if f == "-":
            try:
                source, _ = read_source("-")
                result = check_file(stdin_name, settings, source)
            except FileProblem as exc:
                result = FileResult(stdin_name, problem=str(exc))
            results.append(result)
        else:
            results.append(done[f])
    return results


def _check(files: List[str], settings: Settings, args) -> int:
    from . import reporting
    from .fixes import is_fixable

    results = run_checks(files, settings, _jobs(args.jobs, len(files)), args.stdin_display_name)
    items, errors, sources = [], [], {}
    for result in results:
        if result.problem:
            errors.append({"path": result.path, "message": f"{result.path}: {result.problem}"})
        for finding in result.findings:
            items.append(reporting.Item.from_finding(result.path, finding, is_fixable(finding)))
        sources[result.path] = _sparse_lines(result.lines)
    for error in errors:
        print(f"tpf: error: {error['message']}", file=sys.stderr)
    out = open(args.output_file, "w", encoding="utf-8") if args.output_file else sys.stdout
    try:
        if args.format == "json":
            out.write(reporting.render_json(items, errors) + "\n")
        elif args.format == "sarif":
            out.write(reporting.render_sarif(items, errors) + "\n")
        elif args.format == "github":
            out.write(reporting.render_github(items, errors))
        else:
            colour = args.color == "always" or (args.color == "auto" and out.isatty()
                                                and "NO_COLOR" not in os.environ)
            out.write(reporting.render_terminal(items, sources, colour))
            out.write(reporting.summary_line(items, len(results), len(errors)) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    failing = reporting.at_or_above(items, args.fail_on)
    return EXIT_FINDINGS if failing or errors else EXIT_CLEAN


def _sparse_lines(lines: Dict[int, str]) -> List[str]:
    if not lines:
        return []
    out = [""] * max(lines)
    for number, text in lines.items():
        out[number - 1] = text
    return out


def _fix(files: List[str], settings: Settings, args) -> int:
    from .fixes import fix_source

    problems = changed = fixed_total = 0
    for path in files:
        name = args.stdin_display_name if path == "-" else path
        try:
            source, encoding = read_source(path)
            parse_source(source, name)
        except FileProblem as exc:
            print(f"tpf: error: {name}: {exc}", file=sys.stderr)
            problems += 1
            continue
        lines = source.splitlines(True)
        if not settings.disable_noqa and NoqaMap(lines).skip_file():
            if path == "-":
                sys.stdout.write(source)
            continue
        result = fix_source(source, name, keep_predicate(settings, name, lines))
        if path == "-":
            sys.stdout.write(result.source)
            continue
        if not result.changed:
            continue
        changed += 1
        fixed_total += len(result.fixed)
        if args.diff:
            sys.stdout.writelines(difflib.unified_diff(
                lines, result.source.splitlines(True), f"a/{path}", f"b/{path}"))
        else:
            with open(path, "wb") as handle:
                handle.write(result.source.encode(encoding))
            for finding in result.fixed:
                print(f"{path}:{finding.line}:{finding.col + 1}: fixed {finding.code} "
                      f"({finding.fix})", file=sys.stderr)
    if args.diff:
        return EXIT_FINDINGS if changed or problems else EXIT_CLEAN
    if path_count := len(files):
        verb = "would fix" if args.diff else "fixed"
        print(f"tpf: {verb} {fixed_total} finding{'s' if fixed_total != 1 else ''} in "
              f"{changed} of {path_count} file{'s' if path_count != 1 else ''}", file=sys.stderr)
    return EXIT_FINDINGS if problems else EXIT_CLEAN
