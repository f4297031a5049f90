"""`tpf`: check, fix, explain and list rules without going through flake8.

`tpf check` runs the same engine as the flake8 plugin, reads the same `[flake8]`
configuration and honours `# noqa` exactly as flake8 does, so one configuration and one set
of suppressions serve both. It also checks Jupyter notebooks (`.ipynb`). Exit codes: 0 clean,
1 findings at or above `--fail-on` (or a file that could not be checked or written), 2 bad
invocation, 130 interrupted, 143 terminated (SIGTERM; `-j` workers are stopped with it).
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
import time
from dataclasses import dataclass, field, replace
from typing import List, Optional, Sequence, Tuple

from . import __version__
from .checking import (Discovery, FileProblem, FileResult, Settings, UsageError, check_file,
                       decode_source, discover, keep_predicate, parse_source, read_bytes,
                       run_checks)
from .config import Config, ConfigError, load_config
from .findings import ERROR, NOTE, WARNING
from .noqa import NoqaMap
from .notebooks import split_lines

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
_CODE = re.compile(r"^[A-Z]{1,3}[0-9]{0,3}$")

__all__ = ["main", "build_parser", "check_file", "run_checks", "Settings", "UsageError"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        raise UsageError(f"{message} (see `{self.prog} --help`)")


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


def _check_config(config: Config, args) -> None:
    """Codes in the configuration file checked as the command line's are (exit 2), except
    that another installed flake8 plugin's codes (`E501`, `C90`) are fine there; warnings for
    what silently turns rules off: config files flake8 skips, a prefix that ignores several
    rules at once, a `select` with no TPF rule in it."""
    for warning in config.warnings:
        print(f"tpf: warning: {warning}", file=sys.stderr)

    def where(option: str) -> str:
        source = config.origin(option)
        return os.path.relpath(source) if source else "the configuration"

    lists = [("select", config.select), ("ignore", config.ignore),
             ("extend-select", config.extend_select), ("extend-ignore", config.extend_ignore)]
    lists += [("per-file-ignores", codes) for _, codes in config.per_file_ignores]
    for option, codes in lists:
        for code in codes or ():
            problem = _config_code_problem(code, config.plugin_codes)
            if problem:
                raise UsageError(f"{problem} rule code {code!r} in {option} ({where(option)}); "
                                 f"run `tpf rules` for ours")
    if args.quiet:
        return
    known = known_codes()
    ignores = [("extend-ignore", config.extend_ignore)]
    if args.ignore is None:   # --ignore replaces the file's ignore
        ignores.insert(0, ("ignore", config.ignore))
    for option, codes in ignores:
        for code in codes or ():
            off = [k for k in known if k.startswith(code)]
            if len(off) > 1:
                print(f"tpf: warning: {option} = {code} in {where(option)} switches off {len(off)} "
                      f"rules ({off[0]}..{off[-1]})", file=sys.stderr)
    selected = [*(config.select or []), *config.extend_select]
    if config.select is not None and args.select is None and args.extend_select is None \
            and not any(k.startswith(code) for code in selected for k in known):
        print(f"tpf: warning: select in {where('select')} selects no TPF rule; tpf checks nothing",
              file=sys.stderr)


def _config_code_problem(code: str, plugin_codes: Sequence[str]) -> str:
    """'' for a code some installed plugin reports (or a prefix of ours), else why not."""
    if not _CODE.match(code):
        return "malformed"
    if any(k.startswith(code) for k in known_codes()):
        return ""
    ours = code.startswith("TPF")
    others = any(code.startswith(p) or p.startswith(code) for p in plugin_codes
                 if not p.startswith("TPF"))
    return "" if others and not ours else "unknown"


def _validate_gpu(value: Optional[str]) -> None:
    """A bad `--vram-gpu` is a usage error here, as it is an option error under flake8."""
    if not value:
        return
    try:
        from vram_estimator.flake8_plugin import gpu_option_problem
    except ImportError:   # an older memory plugin: it reports TPF102 itself
        return
    why = gpu_option_problem(value)
    if why:
        raise UsageError(f"--vram-gpu {value[:64]}: {why}")


def _unknown_rule(text: str) -> str:
    """One line for `tpf explain` of a code or name no rule has, with the closest names."""
    from .reporting import rule_docs

    names = [doc.name for doc in rule_docs().values()]
    close = difflib.get_close_matches(text.lower(), names, n=2)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    kind = "code" if _CODE.match(text.upper()) else "name"
    return f"unknown rule {kind} {text!r}{hint} (run `tpf rules`)"


# ---------------------------------------------------------------------------- options

def _code_list(text: str) -> List[str]:
    codes = [c.strip().upper() for c in re.split(r"[,\s]+", text) if c.strip()]
    if not codes:   # `--select ,,,` is a mistake, not "select nothing"
        raise argparse.ArgumentTypeError(f"no rule codes in {text!r}")
    return codes


def _path_list(text: str) -> List[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", default=["."],
                        help="files, folders (Python files and notebooks) or - for stdin")
    parser.add_argument("--select", type=_code_list,
                        help="comma-separated codes or prefixes to report (overrides config)")
    parser.add_argument("--ignore", type=_code_list,
                        help="comma-separated codes or prefixes to skip (overrides config)")
    parser.add_argument("--extend-select", type=_code_list, default=None)
    parser.add_argument("--extend-ignore", type=_code_list, default=None)
    parser.add_argument("--exclude", type=_path_list, help="patterns to skip (overrides config)")
    parser.add_argument("--config", help="read this file's [flake8] section (a .toml file: its "
                        "[tool.flake8-torch-preflight] table) instead of discovering one")
    parser.add_argument("--isolated", action="store_true",
                        help="ignore every configuration file (setup.cfg, tox.ini, .flake8, "
                             "pyproject.toml)")
    parser.add_argument("--disable-noqa", action="store_true", help="report lines with `# noqa` too")
    parser.add_argument("--notes", action="store_true", default=None,
                        help="also report notes (tuning advice; the code is correct); "
                             "config: tpf-notes = true")
    parser.add_argument("--stdin-display-name", default="stdin",
                        help="the name of stdin in reports (a name ending in .ipynb reads a notebook)")
    parser.add_argument("-q", "--quiet", action="count", default=0,
                        help="less output: -q one line per finding and no summary, -qq nothing")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="name each file as it is checked")


def _add_check(sub) -> None:
    check = sub.add_parser("check", help="report findings",
                           epilog="Configuration: [flake8] in setup.cfg/tox.ini/.flake8, and "
                                  "[tool.flake8-torch-preflight] in pyproject.toml over it "
                                  "key by key; the command line over both. Exit codes: 0 "
                                  "nothing at or above --fail-on (or --exit-zero), 1 findings "
                                  "or a file that could not be checked, 2 bad usage or "
                                  "configuration.")
    _add_common(check)
    check.add_argument("--format", choices=("text", "json", "sarif", "github", "gitlab", "junit"),
                       default="text",
                       help="text (default), json, sarif (code scanning), github (annotations), "
                            "gitlab (code quality report), junit (JUnit XML: a testcase per "
                            "finding and per clean file)")
    check.add_argument("--fail-on", choices=(ERROR, WARNING, NOTE), default=WARNING,
                       help="lowest level that makes the exit code 1 (default: warning; "
                            "note implies --notes)")
    check.add_argument("--jobs", "-j", default="auto", help="worker processes (N or auto)")
    check.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    check.add_argument("--output-file", "-o", help="write the report here instead of stdout")
    check.add_argument("--vram-gpu", help="target GPU for the memory codes (TPF100-TPF102)")
    check.add_argument("--no-vram", action="store_true", help="do not run the memory plugin")
    check.add_argument("--baseline", metavar="FILE",
                       help="fail only on findings not recorded in FILE (recorded on first use)")
    check.add_argument("--update-baseline", action="store_true",
                       help="record today's findings in the --baseline file (only the entries "
                            "of the files checked are replaced)")
    check.add_argument("--no-create-baseline", action="store_true",
                       help="a missing --baseline file is an error, never a new file "
                            "(the default when CI is set)")
    check.add_argument("--no-cache", action="store_true",
                       help="do not read or write the cache across runs (.tpf_cache/ at the "
                            "project root); config: tpf-cache = false; env: TPF_NO_CACHE=1")
    check.add_argument("--statistics", action="store_true",
                       help="after the report, findings and # noqa suppressions per rule")
    check.add_argument("--exit-zero", action="store_true",
                       help="exit 0 even when findings are reported (a file that could not "
                            "be checked still exits 1; bad usage still 2)")
    check.add_argument("--show-source", action=argparse.BooleanOptionalAction, default=True,
                       help="show each finding's source line with a caret (the default; "
                            "--no-show-source leaves it out)")


def _add_fix(sub) -> None:
    fix = sub.add_parser("fix", help="apply the safe autofixes (TPF001, TPF002, TPF005, TPF013; "
                                     "--unsafe-fixes adds TPF007, TPF009)",
                         epilog="Each finding with an autofix that is not fixed is named on "
                                "stderr with the reason; the summary counts them by reason. "
                                "Exit codes: 0 done, 1 a file could not be fixed or written "
                                "(with --diff: 1 when there is a diff), 2 bad usage.")
    _add_common(fix)
    fix.add_argument("--jobs", "-j", default="auto", help="worker processes (N or auto)")
    fix.add_argument("--diff", action="store_true",
                     help="print a unified diff (for git apply / patch -p1); change nothing")
    fix.add_argument("--unsafe-fixes", action="store_true",
                     help="also apply the unsafe fixes (TPF007 model.train(), TPF009 "
                          "sampler.set_epoch(epoch)); review them")
    fix.add_argument("--format", choices=("text", "json"), default="text",
                     help="json: every finding with an autofix, applied or not and why, on "
                          "stdout (not with --diff)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tpf", description="Catch silent PyTorch training bugs from source.")
    parser.add_argument("--version", action="version", version=f"tpf {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    _add_check(sub)
    _add_fix(sub)

    stats = sub.add_parser("stats", help="findings and # noqa suppressions per rule, and where")
    _add_common(stats)
    stats.add_argument("--jobs", "-j", default="auto", help="worker processes (N or auto)")
    stats.add_argument("--vram-gpu", help="target GPU for the memory codes (TPF100-TPF102)")
    stats.add_argument("--no-vram", action="store_true", help="do not run the memory plugin")
    stats.add_argument("--no-cache", action="store_true",
                       help="do not read or write the cache across runs")

    explain = sub.add_parser("explain", help="show a rule's documentation")
    explain.add_argument("code", help="a rule code (TPF001) or name (retained-graph)")
    sub.add_parser("rules", help="list every rule")
    return parser


# ---------------------------------------------------------------------------- main

def main(argv: Optional[Sequence[str]] = None) -> int:
    from .baseline import BaselineError
    from .workers import Terminated
    from .writing import WriteProblem

    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except (UsageError, ConfigError, BaselineError) as exc:
        print(f"tpf: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except WriteProblem as exc:   # a report or a baseline that cannot be written
        print(f"tpf: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("tpf: interrupted", file=sys.stderr)
        return 130
    except Terminated:   # SIGTERM while worker processes ran: they are ended too
        print("tpf: terminated", file=sys.stderr)
        return 128 + 15
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
            raise UsageError(_unknown_rule(args.code))
        sys.stdout.write(text)
        return EXIT_CLEAN
    for option in ("select", "ignore", "extend_select", "extend_ignore"):
        _validate_codes(getattr(args, option), "--" + option.replace("_", "-"))
    if getattr(args, "update_baseline", False) and not args.baseline:
        raise UsageError("--update-baseline needs --baseline FILE")
    _validate_gpu(getattr(args, "vram_gpu", None))
    config = load_config(args.config, args.isolated)
    _check_config(config, args)
    settings, discovery = _settings(args, config)
    files = discover(args.paths, discovery)
    if args.verbose and not args.quiet:
        for path, why in discovery.skipped:
            print(f"tpf: skipped {path}: {why}", file=sys.stderr)
    if args.command == "fix":
        return _fix(files, settings, args)
    if args.command == "stats":
        return _stats([f for f, _ in files], settings, args)
    return _check([f for f, _ in files], settings, args)


def _settings(args, config: Config) -> Tuple[Settings, Discovery]:
    from flake8.utils import normalize_paths

    def pick(cli, configured):
        return cli if cli is not None else configured

    notes = pick(args.notes, config.notes) or getattr(args, "fail_on", None) == NOTE
    settings = Settings(
        select=pick(args.select, config.select),
        ignore=pick(args.ignore, config.ignore),
        extend_select=[*config.extend_select, *(args.extend_select or [])],
        extend_ignore=[*config.extend_ignore, *(args.extend_ignore or [])],
        per_file_ignores=config.per_file_ignores,
        disable_noqa=args.disable_noqa or config.disable_noqa,
        vram_gpu=getattr(args, "vram_gpu", None) or config.vram_gpu,
        vram=not getattr(args, "no_vram", False),
        notes=bool(notes),
        cache=config.cache and not getattr(args, "no_cache", False),
    )
    exclude = normalize_paths(args.exclude) if args.exclude is not None else list(config.exclude)
    exclude += config.extend_exclude
    return settings, Discovery(exclude, config.filename)


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


# ---------------------------------------------------------------------------- check

def _run(files: List[str], settings: Settings, args) -> List[FileResult]:
    """Check every file, with the progress line or -v's per-file lines on stderr."""
    from .progress import Progress, wanted

    verbose = args.verbose > 0 and args.quiet == 0
    progress = Progress(len(files), sys.stderr,
                        enabled=not verbose and wanted(sys.stderr, args.quiet))
    started = time.monotonic()

    def on_result(result: FileResult) -> None:
        progress.advance(len(result.reports))
        if verbose:
            state = result.problem or f"{len(result.reports)} finding(s)"
            print(f"tpf: checked {result.path}: {state}", file=sys.stderr)

    try:
        results = run_checks(files, settings, _jobs(args.jobs, len(files)),
                             args.stdin_display_name, on_result)
    finally:
        progress.close()
    if verbose:
        print(f"tpf: {len(files)} file(s) in {time.monotonic() - started:.2f} s", file=sys.stderr)
    return results


def _items(results: Sequence[FileResult]):
    from . import reporting
    from .fixes import applicability, is_fixable, not_available

    items, suppressed, errors = [], [], []
    for result in results:
        if result.problem:
            errors.append({"path": result.path, "message": f"{result.path}: {result.problem}"})
        for report in result.reports:
            finding = report.finding
            safety = applicability(finding.code)
            reason = not_available(finding) if safety != "none" else None
            items.append(reporting.Item.from_report(result.path, report, is_fixable(finding),
                                                    safety, reason or ""))
        for report in result.suppressed:
            suppressed.append(reporting.Item.from_report(result.path, report))
    return items, suppressed, errors


def _check(files: List[str], settings: Settings, args) -> int:
    from . import reporting

    output = None
    if args.output_file:
        from .writing import check_output_path
        check_output_path(args.output_file, files)
        output = args.output_file
    recorded = _load_baseline(args)
    results = _run(files, settings, args)
    items, suppressed, errors = _items(results)
    if args.format == "sarif":
        items = _with_fix_edits(items)
    for error in errors:
        print(f"tpf: error: {error['message']}", file=sys.stderr)
    absent: list = []
    if args.baseline:
        items, absent = _apply_baseline(items, results, recorded, args)
    shown = [i for i in items if i.baseline != "unchanged"]
    text = _render(args, shown, items, absent, errors, [r.path for r in results], suppressed)
    _emit(text, output)
    failing = reporting.at_or_above(shown, args.fail_on) and not args.exit_zero
    return EXIT_FINDINGS if failing or errors else EXIT_CLEAN


def _with_fix_edits(items: List) -> List:
    """Items whose fix `tpf fix` would apply, with the edit it makes (for SARIF `fixes`):
    each fix worked out alone (LibCST runs once per fixable finding, and only here).
    Notebooks and stdin are left out (their lines are not the file's)."""
    from .fixes import fix_source
    from .notebooks import is_notebook

    sources = {}
    out = []
    for item in items:
        if not item.fixable or item.path == "-" or is_notebook(item.path):
            out.append(item)
            continue
        if item.path not in sources:
            try:
                sources[item.path] = decode_source(read_bytes(item.path))[0]
            except (FileProblem, OSError):
                sources[item.path] = None
        source = sources[item.path]
        wanted = (item.line, item.column, item.code)
        result = fix_source(source, item.path, lambda f: (f.line, f.col + 1, f.code) == wanted,
                            noqa=False, unsafe=True) if source is not None else None
        edits = _line_edits(source, result.source) if result and result.fixed else ()
        out.append(replace(item, fix_edits=edits))
    return out


def _line_edits(old: str, new: str) -> Tuple[Tuple[int, int, int, int, str], ...]:
    """`new` as whole-line replacements in `old`: (start line, start column, end line, end
    column, text), 1-based, the end exclusive."""
    before, after = old.splitlines(True), new.splitlines(True)
    edits = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        start = (a0 + 1, 1) if a0 < len(before) or not before else \
            (a0, len(before[a0 - 1]) + 1)
        end = (a1 + 1, 1) if a1 < len(before) or not before else (a1, len(before[a1 - 1]) + 1)
        edits.append((*start, *end, "".join(after[b0:b1])))
    return tuple(edits)


def _render(args, shown, items, absent, errors, checked, suppressed) -> str:
    from . import reporting

    file_count = len(checked)

    if args.format == "json":
        return reporting.render_json(items if args.baseline else shown, errors) + "\n"
    if args.format == "sarif":
        return reporting.render_sarif(list(items) + list(absent), errors) + "\n"
    if args.format == "github":
        return reporting.render_github(shown, errors)
    if args.format == "gitlab":
        return reporting.render_gitlab(shown, errors) + "\n"
    if args.format == "junit":
        return reporting.render_junit(shown, errors, checked) + "\n"
    if args.quiet >= 2:
        return ""
    if args.quiet == 1:
        text = "".join(f"{i.place}: {i.code} [{i.severity}] {i.what or i.text}\n" for i in shown)
    else:
        stream = sys.stdout if not args.output_file else None
        colour = args.color == "always" or (args.color == "auto" and stream is not None
                                            and stream.isatty() and "NO_COLOR" not in os.environ)
        listed = shown if args.show_source else [replace(i, snippet="") for i in shown]
        text = reporting.render_terminal(listed, None, colour)
        text += reporting.summary_line(shown, file_count, len(errors))
        if args.baseline:
            known = len(items) - len(shown)
            text += f" {known} known finding{'s' if known != 1 else ''} in the baseline not shown."
        text += "\n"
    if args.statistics:
        text += "\n" + reporting.render_statistics(items, suppressed)
    return text


def _emit(text: str, output: Optional[str]) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    from .writing import atomic_write
    atomic_write(output, text.encode("utf-8"))


# ---------------------------------------------------------------------------- baseline

def _load_baseline(args):
    """The recorded entries (None: no file yet). Before any file is checked: a missing
    baseline under CI or --no-create-baseline is an error, and a baseline this run will
    write must be writable."""
    if not args.baseline:
        return None
    from .baseline import BaselineError, load
    from .progress import in_ci
    from .writing import check_writable

    recorded = load(args.baseline)
    if recorded is None and not args.update_baseline and (args.no_create_baseline or in_ci()):
        why = "--no-create-baseline" if args.no_create_baseline else "CI is set"
        raise BaselineError(f"{args.baseline}: the baseline does not exist ({why}: tpf never "
                            f"creates one; record it with --update-baseline, or fix the path)")
    if recorded is None or args.update_baseline:
        check_writable(args.baseline)
    elif not args.quiet:
        _warn_unmatched(recorded, args.baseline)
    return recorded


def _warn_unmatched(recorded, path: str) -> None:
    """One line when recorded entries name no file: they can never match (a path edited by
    hand, a file deleted or moved, a baseline moved away from the project root)."""
    from .baseline import unmatched_paths

    missing = unmatched_paths(recorded, path)
    if not missing:
        return
    unmatched = set(missing)
    count = sum(1 for entry in recorded if entry.path in unmatched)
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    print(f"tpf: warning: {path}: {count} entr{'ies' if count != 1 else 'y'} name no file "
          f"({shown}) and match nothing; `--update-baseline` over the project drops them",
          file=sys.stderr)


def _apply_baseline(items, results, recorded, args):
    """Items with their baseline state; absent entries as items; records the file when it
    does not exist yet or --update-baseline is given. Only the entries of the files this run
    checked are compared, reported absent or replaced (`baseline.Scope`)."""
    from . import baseline as bl
    from . import reporting

    reports = [r for result in results for r in result.reports]
    paths = [result.path for result in results for _ in result.reports]
    entries = bl.fingerprints((r.finding.code, bl.relative_path(p, args.baseline), r.line,
                               r.scope, r.statement) for r, p in zip(reports, paths))
    scope = bl.Scope(args.baseline, [r.path for r in results if r.checked],
                     [p for p in args.paths if p != "-" and os.path.isdir(p)])
    inside, kept = scope.split(recorded or [])
    if recorded is None or args.update_baseline:
        _record_baseline(args.baseline, entries, kept)
        inside = entries
    states, gone = bl.classify(entries, inside)
    marked = [replace(item, fingerprint=entry.fingerprint, baseline=state)
              for item, entry, state in zip(items, entries, states)]
    folder = os.path.dirname(os.path.abspath(args.baseline))
    absent = []
    for entry in gone:
        path = os.path.relpath(os.path.join(folder, entry.path))
        absent.append(reporting.Item(path, max(entry.line, 1), 1, entry.code,
                                     reporting.default_severity(entry.code),
                                     f"no longer found: `{entry.statement}` in {entry.scope}",
                                     fingerprint=entry.fingerprint, baseline=bl.ABSENT))
    return marked, absent


def _record_baseline(path: str, entries, kept) -> None:
    from . import baseline as bl
    from .writing import atomic_write

    atomic_write(path, bl.dump(list(entries) + list(kept)).encode("utf-8"))
    note = ""
    if kept:
        note = f" ({len(kept)} entr{'ies' if len(kept) != 1 else 'y'} for files not checked kept)"
    print(f"tpf: recorded {len(entries)} finding{'s' if len(entries) != 1 else ''} "
          f"in the baseline {path}{note}", file=sys.stderr)


# ---------------------------------------------------------------------------- stats

def _stats(files: List[str], settings: Settings, args) -> int:
    from . import reporting

    args.jobs = getattr(args, "jobs", "auto")
    results = _run(files, settings, args)
    items, suppressed, errors = _items(results)
    for error in errors:
        print(f"tpf: error: {error['message']}", file=sys.stderr)
    sys.stdout.write(reporting.render_statistics(items, suppressed))
    return EXIT_FINDINGS if errors else EXIT_CLEAN


# ---------------------------------------------------------------------------- fix

@dataclass(frozen=True)
class _Fate:
    """What `tpf fix` did with one finding of a rule that has an autofix (plain data: it
    comes back from a worker process)."""
    place: str             # 12:5, or cell 3:line 2:5
    line: int
    column: int            # 1-based
    code: str
    message: str
    fix: str               # the fix text (what the edit does)
    applicability: str     # safe | unsafe
    applied: bool
    reason: Optional[str]  # why not, when not applied

    def autofix(self) -> dict:
        return {"applicability": self.applicability, "applied": self.applied,
                "reason": self.reason}


def _fate(place: str, finding, applied: bool, reason: Optional[str] = None,
          line: int = 0, column: int = 0) -> _Fate:
    from .fixes import applicability

    return _Fate(place, line or finding.line, column or finding.col + 1, finding.code,
                 finding.message, finding.fix, applicability(finding.code), applied, reason)


@dataclass
class _FixOutcome:
    """One file's fix, worked out (in a worker process under -j) before anything is written."""
    path: str
    root: str
    name: str
    problem: Optional[str] = None
    data: Optional[bytes] = None
    new_data: Optional[bytes] = None
    fixed: List[_Fate] = field(default_factory=list)
    not_fixed: List[_Fate] = field(default_factory=list)   # with an autofix, left, and why
    old_text: str = ""
    new_text: str = ""
    encoding: str = "utf-8"
    snapshot: Optional[object] = None      # writing.Snapshot of the file as read
    skipped: List[str] = field(default_factory=list)   # parts left out (a notebook cell)


def _fix_outcome(job) -> _FixOutcome:
    """Read, fix and render one file; never raises for bad input (a worker's entry point)."""
    from .notebooks import is_notebook
    from .writing import Snapshot

    path, root, name, settings, unsafe = job
    outcome = _FixOutcome(path, root, name)
    try:
        status = None if path == "-" else _stat(path)
        outcome.data = read_bytes(path)
        if status is not None:
            outcome.snapshot = Snapshot.of(status, outcome.data)
        fix = _fix_notebook if is_notebook(name) else _fix_python
        new_data, fixed, outcome.old_text, outcome.new_text, outcome.encoding, skipped, \
            outcome.not_fixed = fix(name, outcome.data, settings, unsafe)
        outcome.skipped = list(skipped)
    except FileProblem as exc:
        outcome.problem = str(exc)
        return outcome
    except RecursionError:
        outcome.problem = "too deeply nested to analyse"
        return outcome
    if fixed:
        outcome.new_data = new_data
        outcome.fixed = fixed
    return outcome


def _stat(path: str) -> os.stat_result:
    """The file's status before it is read (a dangling symlink: one line, as `tpf check`)."""
    try:
        return os.stat(path)
    except OSError as exc:
        raise FileProblem(f"cannot read: {exc.strerror or exc}") from None


def _fix_outcomes(files: List[Tuple[str, str]], settings: Settings, args):
    """Each file's outcome, in order; worked out by -j worker processes when asked."""
    jobs = [(path, root, args.stdin_display_name if path == "-" else path, settings,
             args.unsafe_fixes) for path, root in files]
    on_disk = [job for job in jobs if job[0] != "-"]
    workers = _jobs(args.jobs, len(on_disk))
    if workers > 1 and len(on_disk) > 1:
        from . import workers as pools

        with pools.worker_pool(min(workers, len(on_disk))) as pool:
            done = dict(zip((job[0] for job in on_disk),
                            pools.ordered_map(pool, _fix_outcome, on_disk)))
        for job in jobs:
            yield done[job[0]] if job[0] != "-" else _fix_outcome(job)
        return
    for job in jobs:
        yield _fix_outcome(job)


def _fix(files: List[Tuple[str, str]], settings: Settings, args) -> int:
    if args.format == "json" and (args.diff or any(path == "-" for path, _ in files)):
        raise UsageError("tpf fix --format json writes its report on stdout: not with --diff "
                         "or - (stdin)")
    problems = changed = 0
    fates: List[Tuple[str, _Fate]] = []
    for outcome in _fix_outcomes(files, settings, args):
        problems += _fix_problems(outcome)
        if outcome.problem is not None:
            continue
        applied, done, left = _settle(outcome, args)
        problems += bool(outcome.fixed and not applied)
        changed += bool(outcome.fixed and applied)
        fates += [(outcome.name, f) for f in done + left]
    if args.format == "json":
        sys.stdout.write(_fix_json(fates) + "\n")
    if args.diff:
        return EXIT_FINDINGS if changed or problems else EXIT_CLEAN
    if files and args.quiet == 0:
        print(f"tpf: {_fix_summary([f for _, f in fates], changed, len(files))}", file=sys.stderr)
    return EXIT_FINDINGS if problems else EXIT_CLEAN


def _settle(outcome: _FixOutcome, args):
    """Write (or print) one file's fixes and say so: (written, fixed, left) with the fixes
    of a file that could not be written moved to `left`."""
    if outcome.path == "-":
        sys.stdout.buffer.write(outcome.new_data if outcome.fixed else outcome.data)
        sys.stdout.flush()
    applied = _apply_outcome(outcome, args)
    left = list(outcome.not_fixed)
    if not applied:   # written nowhere: every planned fix of the file is left
        left += [replace(f, applied=False, reason="the file could not be written")
                 for f in outcome.fixed]
    done = outcome.fixed if applied else []
    if not args.diff and args.format == "text":
        _report_fixed(outcome.name, done, left, args)
    return applied, done, left


def _fix_problems(outcome: _FixOutcome) -> int:
    """Print what kept a file (or a notebook cell) from being fixed; their count."""
    for part in outcome.skipped:   # as tpf check reports it, and the run fails as there
        print(f"tpf: error: {outcome.name}: {part}; skipped, left as it is", file=sys.stderr)
    if outcome.problem is not None:
        print(f"tpf: error: {outcome.name}: {outcome.problem}", file=sys.stderr)
        if outcome.path == "-" and outcome.data is not None:
            sys.stdout.buffer.write(outcome.data)   # stdin in, stdin out: unchanged
    return len(outcome.skipped) + (outcome.problem is not None)


def _apply_outcome(outcome: _FixOutcome, args) -> bool:
    """Print the diff or write the fixed file; False when it could not be written."""
    if not outcome.fixed:
        return True
    if args.diff:
        sys.stdout.buffer.write(unified_diff(outcome.old_text, outcome.new_text,
                                             outcome.path, outcome.encoding))
        sys.stdout.flush()
        return True
    return outcome.path == "-" or _write_fixed(outcome)


def _fix_summary(fates: Sequence[_Fate], changed: int, files: int) -> str:
    """`fixed 1 of 3 findings with an autofix in 1 of 2 files; 2 not fixed: 1 unsafe
    (apply with --unsafe-fixes), 1 not proven safe here`."""
    from collections import Counter

    from .fixes import reason_group

    plural = lambda n, word: f"{n} {word}{'' if n == 1 else 's'}"  # noqa: E731
    applied = sum(1 for f in fates if f.applied)
    text = (f"fixed {applied} of {plural(len(fates), 'finding')} with an autofix in "
            f"{changed} of {plural(files, 'file')}")
    groups = Counter(reason_group(f.reason or "") for f in fates if not f.applied)
    if groups:
        text += f"; {len(fates) - applied} not fixed: " + ", ".join(
            f"{count} {group}" for group, count in groups.most_common())
    return text


def _fix_json(fates: Sequence[Tuple[str, _Fate]]) -> str:
    import json

    from .reporting import TOOL_NAME

    findings = [{"path": name, "line": f.line, "column": f.column, "place": f.place,
                 "code": f.code, "message": f.message, "autofix": f.autofix()}
                for name, f in fates]
    applied = sum(1 for _, f in fates if f.applied)
    summary = {"fixed": applied, "with_autofix": len(fates), "not_fixed": len(fates) - applied}
    return json.dumps({"tool": TOOL_NAME, "version": __version__, "findings": findings,
                       "summary": summary}, indent=2, ensure_ascii=False)


def _write_fixed(outcome: _FixOutcome) -> bool:
    from .writing import WriteProblem, atomic_write, write_target

    try:
        target = write_target(outcome.path, outcome.root, outcome.name)
        atomic_write(target, outcome.new_data, outcome.name, expected=outcome.snapshot)
    except WriteProblem as exc:
        print(f"tpf: error: {exc}", file=sys.stderr)
        return False
    return True


def _report_fixed(name: str, fixed: Sequence[_Fate], left: Sequence[_Fate], args) -> None:
    if args.quiet:
        return
    for fate in fixed:
        print(f"{name}:{fate.place}: fixed {fate.code} ({fate.fix})", file=sys.stderr)
    for fate in left:
        print(f"{name}:{fate.place}: not fixed {fate.code} ({fate.applicability} fix): "
              f"{fate.reason}", file=sys.stderr)


def _fix_python(path: str, data: bytes, settings: Settings, unsafe: bool = False):
    """(new bytes, [fixed _Fate], old text, new text, encoding, [], [not fixed _Fate])."""
    from .fixes import fix_source

    source, encoding = decode_source(data)
    parse_source(source, path)
    lines = source.splitlines(True)
    if not settings.disable_noqa and NoqaMap(lines).skip_file():
        return data, [], source, source, encoding, [], []
    # the predicate already applies `# noqa` (and --disable-noqa): not tokenized twice
    result = fix_source(source, path, keep_predicate(settings, path, lines), noqa=False,
                        unsafe=unsafe)
    left = [_fate(f"{f.line}:{f.col + 1}", f, False, why) for f, why in result.skipped]
    if not result.changed:
        return data, [], source, source, encoding, [], left
    fixed = [_fate(f"{f.line}:{f.col + 1}", f, True) for f in result.fixed]
    # the codec named by a BOM (utf-8-sig) or coding cookie writes the file back as it was
    return result.source.encode(encoding), fixed, source, result.source, encoding, [], left


def _fix_notebook(path: str, data: bytes, settings: Settings, unsafe: bool = False):
    from .fixes import fix_source
    from .notebooks import NotebookProblem, read_notebook, rewrite_sources, split_fixed_module

    try:
        notebook = read_notebook(path, data)
        if not notebook.cells:
            return data, [], "", "", "utf-8", [], []
        if not notebook.writable:
            raise NotebookProblem("tpf fix writes nbformat 4 notebooks only; convert it first")
        lines = notebook.module.splitlines(True)
        if not settings.disable_noqa and NoqaMap(lines).skip_file():
            return data, [], "", "", "utf-8", [], []
        keep = keep_predicate(settings, path, lines)
        broken = {c.number for c in notebook.cells if not c.parses}

        def keep_fixable(finding) -> bool:
            place = notebook.place(finding.line)
            return keep(finding) and place is not None and place[0] not in broken

        result = fix_source(notebook.module, path, keep_fixable, noqa=False,   # keep has it
                            unsafe=unsafe)
        left = [_cell_fate(notebook, f, False, why) for f, why in result.skipped]
        if not result.changed:
            return data, [], "", "", "utf-8", notebook.problems, left
        new_text = rewrite_sources(notebook, split_fixed_module(notebook, result.source))
    except NotebookProblem as exc:
        raise FileProblem(str(exc)) from None
    fixed = [_cell_fate(notebook, finding, True) for finding in result.fixed]
    bom = data.startswith(b"\xef\xbb\xbf")
    encoding = "utf-8-sig" if bom else "utf-8"
    return new_text.encode(encoding), fixed, notebook.text, new_text, encoding, \
        notebook.problems, left


def _cell_fate(notebook, finding, applied: bool, reason: Optional[str] = None) -> _Fate:
    """A notebook finding's fate, placed in its cell (line and column: in the cell)."""
    cell, line = notebook.place(finding.line) or (0, 0)
    return _fate(f"cell {cell}:line {line}:{finding.col + 1}", finding, applied, reason,
                 line=line or finding.line)


def unified_diff(old: str, new: str, path: str, encoding: str = "utf-8") -> bytes:
    """A diff `git apply` and `patch -p1` accept: `a/<path>` `b/<path>` relative to the
    current directory, `\\ No newline at end of file` where a side ends without one, and
    the file's own encoding (a latin-1 file's diff applies to the latin-1 file)."""
    name = _diff_name(path)
    if encoding.replace("_", "-") == "utf-8-sig":   # the BOM is part of the file's first line
        old, new, encoding = "\ufeff" + old, "\ufeff" + new, "utf-8"
    old_lines, new_lines = split_lines(old), split_lines(new)
    before, after = quoted_diff_name(f"a/{name}"), quoted_diff_name(f"b/{name}")
    out: List[str] = []
    for line in difflib.unified_diff(old_lines, new_lines, before, after):
        if line.startswith(("---", "+++")):
            # as git does: a name with a space ends with a tab, so `patch` reads all of it
            tab = "\t" if " " in name and not before.startswith('"') else ""
            out.append(line.rstrip("\n") + tab + "\n")
        elif line.endswith(("\n", "\r")):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out).encode(encoding)


_GIT_ESCAPES = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r",
                34: '\\"', 92: "\\\\"}


def quoted_diff_name(name: str) -> str:
    """`name` as git writes it in a patch header: as it is, or, when it holds a control
    character (a tab, a newline), `"` or `\\` or a byte above 127, C-style quoted with its
    file-system bytes in octal (`"a/tab\\there.py"`, `"a/\\303\\251.py"`), which `git apply`
    and GNU patch read back. Unquoted, a tab or newline in one name broke the whole patch."""
    raw = os.fsencode(name)
    if not any(byte < 32 or byte > 126 or byte in (34, 92) for byte in raw):
        return name
    return '"' + "".join(_GIT_ESCAPES.get(byte) or (chr(byte) if 32 <= byte <= 126
                                                    else f"\\{byte:03o}")
                         for byte in raw) + '"'


def _diff_name(path: str) -> str:
    relative = os.path.relpath(os.path.abspath(path))
    return relative.replace(os.sep, "/")
