"""Renderers shared by the `tpf` CLI and the flake8 formatters: terminal, JSON, SARIF, GitHub,
GitLab code quality, JUnit XML.

Everything renders `Item`s: one reported problem with a 1-based line and column (the way
flake8 and editors show them). A `Finding` from the engine keeps its parts (what, evidence,
fix); a flake8 `Violation` only has its text, which is enough for every format.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import quote

from . import __version__
from .findings import ERROR, NOTE, SEVERITY_ORDER, WARNING, Finding
from .ruledocs import RuleDoc, parse_sections

TOOL_NAME = "flake8-torch-preflight"
INFORMATION_URI = "https://github.com/flake8-torch-preflight/flake8-torch-preflight"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety",
            "Known limits")
# The memory codes come from a separate plugin (vram_estimator); their docs live in the spec.
VRAM_RULES = {
    "TPF100": ("vram-exceeds-gpu", ERROR, "projected peak exceeds the target GPU even at the "
               "optimistic end of its interval"),
    "TPF101": ("vram-tight-fit", WARNING, "projected peak fits the point estimate but not the "
               "error margin"),
    "TPF102": ("vram-bad-config", ERROR, "a `# vram:` comment or option is malformed or names an "
               "unknown model/GPU"),
}
_LEVEL = re.compile(r"^\[(error|warning|note)\]\s*")


@dataclass(frozen=True)
class Item:
    path: str
    line: int
    column: int          # 1-based
    code: str
    severity: str
    text: str            # the message without the code and level
    what: str = ""
    evidence: str = ""
    fix: str = ""
    fixable: bool = False
    # A notebook finding: `line`/`column` are in the .ipynb text, these in the notebook.
    cell: int = 0
    cell_line: int = 0
    cell_column: int = 0
    snippet: str = field(default="", compare=False)   # the source line, for the terminal
    fingerprint: str = ""      # set when a baseline is in use
    baseline: str = ""         # new | unchanged | absent, when a baseline is in use
    # tpf check only (a flake8 violation does not know): the rule's autofix (safe, unsafe,
    # none), why `tpf fix` will not try this one, and the fix as text edits for SARIF:
    # (start line, start column, end line, end column, inserted text), 1-based
    fix_safety: str = ""
    fix_reason: str = ""
    fix_edits: Tuple[Tuple[int, int, int, int, str], ...] = field(default=(), compare=False)

    @classmethod
    def from_finding(cls, path: str, finding: Finding, fixable: bool = False) -> "Item":
        return cls(path, finding.line, finding.col + 1, finding.code, finding.severity,
                   message_text(finding.what, finding.evidence, finding.fix),
                   finding.what, finding.evidence, finding.fix, fixable)

    @classmethod
    def from_report(cls, path: str, report, fixable: bool = False, fix_safety: str = "",
                    fix_reason: str = "") -> "Item":
        """From a placed `checking.Report` (a notebook finding carries its cell)."""
        f = report.finding
        return cls(path, report.line, report.column, f.code, f.severity,
                   message_text(f.what, f.evidence, f.fix), f.what,
                   f.evidence, f.fix, fixable, report.cell, report.cell_line,
                   report.cell_column, report.snippet, fix_safety=fix_safety,
                   fix_reason=fix_reason)

    @property
    def place(self) -> str:
        """`path:12:9`, or `nb.ipynb:cell 3:line 5:9` for a notebook."""
        if self.cell:
            return f"{self.path}:cell {self.cell}:line {self.cell_line}:{self.cell_column}"
        return f"{self.path}:{self.line}:{self.column}"

    @property
    def cell_place(self) -> str:
        return f"cell {self.cell}, line {self.cell_line}" if self.cell else ""

    @classmethod
    def from_text(cls, path: str, line: int, column: int, code: str, text: str) -> "Item":
        """From a flake8 result: `text` may start with our `[level]` tag."""
        match = _LEVEL.match(text)
        if match:
            severity, text = match.group(1), text[match.end():]
        else:
            severity = default_severity(code)
        what, evidence, fix = _split_message(text) if code.startswith("TPF") else ("", "", "")
        return cls(path, line, column, code, severity, text, what, evidence, fix)

    @property
    def message(self) -> str:
        return f"{self.code} [{self.severity}] {self.text}"


def message_text(what: str, evidence: str, fix: str) -> str:
    """`what (evidence); fix: how`, leaving out the parts a finding does not have (a memory
    finding may have no evidence: no empty `()`)."""
    text = what
    if evidence:
        text += f" ({evidence})"
    if fix:
        text += f"; fix: {fix}"
    return text


def _split_message(text: str):
    """`what (evidence); fix: how` back into its parts (best effort; else all in `what`)."""
    head, sep, fix = text.rpartition("; fix: ")
    if not sep or not head.endswith(")"):
        return text, "", ""
    depth = 0
    for index in range(len(head) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(head[index], 0)
        if depth == 0:
            return head[:index].rstrip(), head[index + 1:-1], fix
    return text, "", ""


def default_severity(code: str) -> str:
    rule = rule_docs().get(code)
    if rule is not None:
        return rule.severity
    if code.startswith(("E9", "F")):
        return ERROR          # E999 syntax errors, pyflakes
    return WARNING


# ---------------------------------------------------------------------------- rule docs

_DOCS: Optional[Dict[str, RuleDoc]] = None


def rule_docs() -> Dict[str, RuleDoc]:
    """Every rule's documentation, from the module docstrings (and the memory codes)."""
    global _DOCS
    if _DOCS is None:
        from .ruledocs import all_docs

        docs: Dict[str, RuleDoc] = {doc.code: doc for doc in all_docs()}
        for code, (name, severity, summary) in VRAM_RULES.items():
            body = (f"## What it does\nReports that {summary}.\n\n## Fix safety\nNo autofix.\n\n"
                    "## Known limits\nComes from the `vram_estimator` plugin; see its "
                    "documentation (`vram-estimate --help`).")
            docs[code] = RuleDoc(code, name, severity, None, summary, parse_sections(body), body)
        _DOCS = docs
    return _DOCS


def find_rule(code_or_name: str) -> Optional[RuleDoc]:
    """A rule by its code (`TPF001`, any case) or its name (`retained-graph`)."""
    docs = rule_docs()
    wanted = code_or_name.strip()
    doc = docs.get(wanted.upper())
    if doc is None:
        doc = next((d for d in docs.values() if d.name == wanted.lower()), None)
    return doc


def explain(code: str) -> Optional[str]:
    doc = find_rule(code)
    if doc is None:
        return None
    safety = doc.fix_safety or "none"
    header = (f"{doc.code} {doc.name} [{doc.severity}]: {doc.summary}\n"
              f"autofix: {safety}{' (tpf fix)' if doc.fix_safety == 'safe' else ''}")
    return f"{header}\n\n{doc.markdown}\n"


def rules_table() -> str:
    rows = [("code", "name", "level", "autofix", "summary")]
    for doc in rule_docs().values():
        rows.append((doc.code, doc.name, doc.severity, doc.fix_safety or "-", doc.summary))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    out = []
    for row in rows:
        out.append("  ".join(row[i].ljust(widths[i]) for i in range(4)) + "  " + row[4])
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- terminal

_COLOURS = {ERROR: "\033[31m", WARNING: "\033[33m", NOTE: "\033[36m"}
_BOLD, _DIM, _RESET = "\033[1m", "\033[2m", "\033[0m"


def render_terminal(items: Sequence[Item], sources: Optional[Mapping[str, Sequence[str]]] = None,
                    colour: bool = False) -> str:
    """A readable report: location, message, the source line with a caret, evidence, fix.

    The source line is the item's `snippet`, or line `item.line` of `sources[item.path]`.
    """
    def paint(text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if colour else text

    out: List[str] = []
    for item in items:
        level = paint(item.severity, _COLOURS.get(item.severity, ""))
        head = item.what or item.text
        out.append(f"{paint(item.place + ':', _BOLD)} {paint(item.code, _BOLD)} [{level}] {head}")
        line_text = item.snippet
        if not line_text and sources:
            lines = sources.get(item.path) or ()
            line_text = lines[item.line - 1] if 1 <= item.line <= len(lines) else ""
        if line_text:
            source = line_text.rstrip("\r\n").expandtabs(4)
            gutter = str(item.cell_line if item.cell else item.line)
            column = item.cell_column if item.cell else item.column
            out.append(f"  {paint(gutter, _DIM)} | {source}")
            caret_col = _display_column(line_text, column)
            caret = paint("^", _COLOURS.get(item.severity, ""))
            out.append(f"  {' ' * len(gutter)} | {' ' * caret_col}{caret}")
        if item.evidence:
            out.append(f"  = evidence: {item.evidence}")
        if item.fix:
            command = "tpf fix --unsafe-fixes" if item.fix_safety == "unsafe" else "tpf fix"
            suffix = paint(f"  [{command}]", _DIM) if item.fixable else ""
            out.append(f"  = fix: {item.fix}{suffix}")
        out.append("")
    return "\n".join(out)


def _display_column(line: str, column: int) -> int:
    prefix = line[:max(column - 1, 0)]
    return len(prefix.expandtabs(4))


def summary_line(items: Sequence[Item], files: int, problems: int = 0) -> str:
    counts = {level: sum(1 for i in items if i.severity == level) for level in (ERROR, WARNING, NOTE)}
    plural = lambda n, word: f"{n} {word}{'' if n == 1 else 's'}"  # noqa: E731
    if not items:
        text = f"No findings in {plural(files, 'file')}."
    else:
        parts = ", ".join(plural(counts[level], level) for level in (ERROR, WARNING, NOTE)
                          if counts[level])
        text = f"Found {plural(len(items), 'finding')} ({parts}) in {plural(files, 'file')}."
        fixable = sum(1 for i in items if i.fixable and i.fix_safety != "unsafe")
        unsafe = sum(1 for i in items if i.fixable and i.fix_safety == "unsafe")
        if fixable:
            text += f" {fixable} fixable with `tpf fix`."
        if unsafe:
            text += f" {unsafe} more with `tpf fix --unsafe-fixes`."
    if problems:
        text += f" {plural(problems, 'file')} could not be checked."
    return text


# ---------------------------------------------------------------------------- json

def item_dict(item: Item) -> dict:
    data = {"path": item.path, "line": item.line, "column": item.column, "code": item.code,
            "severity": item.severity, "message": item.message}
    if item.cell:
        data.update(cell=item.cell, cell_line=item.cell_line, cell_column=item.cell_column)
    if item.what:
        data.update(what=item.what, evidence=item.evidence, fix=item.fix, fixable=item.fixable)
    if item.fix_safety:
        data["autofix"] = {"applicability": item.fix_safety, "available": item.fixable,
                           "reason": item.fix_reason or None}
    if item.baseline:
        data.update(baseline=item.baseline, fingerprint=item.fingerprint)
    return data


def render_json(items: Sequence[Item], errors: Sequence[Mapping[str, str]] = ()) -> str:
    payload = {
        "tool": TOOL_NAME, "version": __version__,
        "findings": [item_dict(item) for item in items],
        "errors": [dict(e) for e in errors],
        "summary": {level: sum(1 for i in items if i.severity == level)
                    for level in (ERROR, WARNING, NOTE)},
    }
    return json.dumps(payload, indent=2, ensure_ascii=False)


# ---------------------------------------------------------------------------- sarif

def _sarif_level(severity: str) -> str:
    return severity if severity in (ERROR, WARNING, NOTE) else WARNING


def _uri(path: str) -> str:
    """A URI relative to %SRCROOT% (the current directory) for a file under it, else an
    absolute `file:` URI; percent-encoded by urllib/pathlib (`exp #1/a.py` ->
    `exp%20%231/a.py`), so it resolves back to the same path."""
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(Path.cwd().resolve())
    except ValueError:
        try:
            relative = absolute.relative_to(Path.cwd())
        except ValueError:
            return absolute.as_uri()
    return quote(PurePath(relative).as_posix())


def _sarif_rule(code: str) -> dict:
    doc = rule_docs().get(code)
    if doc is None:
        return {"id": code, "shortDescription": {"text": code},
                "defaultConfiguration": {"level": _sarif_level(default_severity(code))}}
    help_text = "\n\n".join(f"{title}\n{doc.sections[title]}" for title in SECTIONS
                            if title in doc.sections)
    return {
        "id": doc.code,
        "name": doc.name,
        "shortDescription": {"text": doc.summary},
        "fullDescription": {"text": doc.sections.get("What it does", doc.summary)},
        "help": {"text": help_text or doc.summary, "markdown": doc.markdown or doc.summary},
        "defaultConfiguration": {"level": _sarif_level(doc.severity)},
        "properties": {"tags": ["pytorch", "correctness" if doc.severity == ERROR else "performance"],
                       "precision": "high", "fix-safety": doc.fix_safety or "none"},
    }


def sarif_log(items: Sequence[Item], errors: Sequence[Mapping[str, str]] = ()) -> dict:
    codes = list(rule_docs())
    for item in items:
        if item.code not in codes:
            codes.append(item.code)
    index = {code: i for i, code in enumerate(codes)}
    results = [_sarif_result(item, index[item.code]) for item in items]
    invocation = {"executionSuccessful": not errors}
    if errors:
        invocation["toolExecutionNotifications"] = [
            {"level": "error", "message": {"text": e["message"]},
             "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(e["path"])}}}]}
            for e in errors]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": TOOL_NAME, "version": __version__,
                                "semanticVersion": __version__,
                                "informationUri": INFORMATION_URI,
                                "rules": [_sarif_rule(code) for code in codes]}},
            "invocations": [invocation],
            "originalUriBaseIds": {"%SRCROOT%": {"uri": _srcroot()}},
            "results": results,
        }],
    }


def _sarif_result(item: Item, rule_index: int) -> dict:
    """One SARIF result. A notebook finding: the region is where the source line is stored
    in the .ipynb text (what a viewer opening the file shows), the cell is a logical location
    (`cell 3`) and the properties `cell`, `cellLine`, `cellColumn`; the message starts with
    `cell 3, line 5:` since viewers show the message, not the properties."""
    location: dict = {"physicalLocation": {
        "artifactLocation": {"uri": _uri(item.path), "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": max(item.line, 1), "startColumn": max(item.column, 1)},
    }}
    text = item.text
    result: dict = {"ruleId": item.code, "ruleIndex": rule_index,
                    "level": _sarif_level(item.severity)}
    if item.cell:
        text = f"{item.cell_place}: {text}"
        location["logicalLocations"] = [{"name": f"cell {item.cell}",
                                         "fullyQualifiedName": f"{item.path}:cell {item.cell}"}]
        result["properties"] = {"cell": item.cell, "cellLine": item.cell_line,
                                "cellColumn": item.cell_column}
    result["message"] = {"text": text}
    result["locations"] = [location]
    if item.fix_safety:
        result.setdefault("properties", {})["fixSafety"] = item.fix_safety
        if item.fix_reason:
            result["properties"]["fixNotAvailable"] = item.fix_reason
    if item.fix_edits:
        result["fixes"] = [_sarif_fix(item)]
    if item.fingerprint:
        result["partialFingerprints"] = {"tpfStatement/v1": item.fingerprint}
    if item.baseline:
        result["baselineState"] = item.baseline
    return result


def _sarif_fix(item: Item) -> dict:
    """The fix `tpf fix` would apply (with `--unsafe-fixes` for an unsafe one) as SARIF
    replacements of whole lines."""
    replacements = [{"deletedRegion": {"startLine": l0, "startColumn": c0, "endLine": l1,
                                       "endColumn": c1},
                     "insertedContent": {"text": text}}
                    for l0, c0, l1, c1, text in item.fix_edits]
    return {"description": {"text": f"{item.fix} ({item.fix_safety} fix)"},
            "artifactChanges": [{"artifactLocation": {"uri": _uri(item.path),
                                                      "uriBaseId": "%SRCROOT%"},
                                 "replacements": replacements}]}


def _srcroot() -> str:
    return Path.cwd().as_uri() + "/"


def render_sarif(items: Sequence[Item], errors: Sequence[Mapping[str, str]] = ()) -> str:
    return json.dumps(sarif_log(items, errors), indent=2, ensure_ascii=False)


# ---------------------------------------------------------------------------- github

_GITHUB_COMMAND = {ERROR: "error", WARNING: "warning", NOTE: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _github_path(path: str) -> str:
    """`./src/a.py` -> `src/a.py`: annotations name files relative to the repository."""
    return PurePath(os.path.normpath(path)).as_posix()


def render_github(items: Sequence[Item], errors: Sequence[Mapping[str, str]] = ()) -> str:
    """GitHub Actions workflow commands: one annotation per finding."""
    out = []
    for item in items:
        name = rule_docs().get(item.code)
        title = f"{item.code} {name.name}" if name else item.code
        message = item.message
        if item.cell:   # the annotation sits on the .ipynb line that stores the source line
            title += f" ({item.cell_place})"
            message = f"{item.cell_place}: {message}"
        out.append(f"::{_GITHUB_COMMAND.get(item.severity, 'warning')} "
                   f"file={_escape_property(_github_path(item.path))},line={item.line},"
                   f"col={item.column},title={_escape_property(title)}::"
                   f"{_escape_data(message)}")
    for error in errors:
        out.append(f"::error file={_escape_property(_github_path(error['path']))},title=tpf::"
                   f"{_escape_data(error['message'])}")
    return "\n".join(out) + ("\n" if out else "")


# ---------------------------------------------------------------------------- gitlab

_GITLAB_SEVERITY = {ERROR: "critical", WARNING: "major", NOTE: "info"}


def render_gitlab(items: Sequence[Item], errors: Sequence[Mapping[str, str]] = ()) -> str:
    """GitLab code quality (a JSON array of issues; `artifacts: reports: codequality`).
    Required fields: description, check_name, fingerprint, severity, location.path,
    location.lines.begin. The fingerprint is the path, the code and the message with its
    numbers blanked (a finding that moves keeps it), plus its rank among equal ones."""
    issues, seen = [], Counter()
    for item in items:
        path = _github_path(item.path)
        key = (path, item.code, re.sub(r"\d+", "N", item.what or item.text))
        seen[key] += 1
        issues.append(_gitlab_issue(item.message, item.code, key, seen[key],
                                    _GITLAB_SEVERITY.get(item.severity, "major"), path,
                                    max(item.line, 1)))
    for error in errors:
        path = _github_path(error["path"])
        issues.append(_gitlab_issue(error["message"], "tpf-unchecked", (path,), 1, "blocker",
                                    path, 1))
    return json.dumps(issues, indent=2, ensure_ascii=False)


def _gitlab_issue(description: str, check: str, key: tuple, rank: int, severity: str,
                  path: str, line: int) -> dict:
    digest = hashlib.sha256(json.dumps([*key, rank]).encode("utf-8")).hexdigest()
    return {"type": "issue", "description": description, "check_name": check,
            "fingerprint": digest, "severity": severity,
            "location": {"path": path, "lines": {"begin": line}}}


# ---------------------------------------------------------------------------- junit

def render_junit(items: Sequence[Item], errors: Sequence[Mapping[str, str]] = (),
                 checked: Sequence[str] = ()) -> str:
    """JUnit XML: one testcase per finding (a failure), one per file that could not be
    checked (an error), and one passing testcase per checked file without findings, so a
    CI test view counts what was checked."""
    from xml.etree import ElementTree as ET

    suite = ET.Element("testsuite", name=TOOL_NAME)
    for item in items:
        path = _github_path(item.path)
        case = ET.SubElement(suite, "testcase", name=f"{item.code} {item.place}",
                             classname=path, file=path, line=str(item.line))
        failure = ET.SubElement(case, "failure", message=item.message, type=item.severity)
        failure.text = "\n".join(part for part in (
            f"{item.place}: {item.code} [{item.severity}] {item.what or item.text}",
            item.evidence and f"evidence: {item.evidence}",
            item.fix and f"fix: {item.fix}") if part)
    failed = {_github_path(e["path"]) for e in errors}
    for error in errors:
        path = _github_path(error["path"])
        case = ET.SubElement(suite, "testcase", name=path, classname=path, file=path)
        ET.SubElement(case, "error", message=error["message"], type="unchecked")
    with_findings = {_github_path(i.path) for i in items}
    for path in sorted({_github_path(p) for p in checked} - with_findings - failed):
        ET.SubElement(suite, "testcase", name=path, classname=path, file=path)
    suite.set("tests", str(len(suite)))
    suite.set("failures", str(len(items)))
    suite.set("errors", str(len(errors)))
    root = ET.Element("testsuites")
    root.append(suite)
    return "<?xml version='1.0' encoding='utf-8'?>\n" + ET.tostring(root, encoding="unicode")


def sort_items(items: Iterable[Item]) -> List[Item]:
    return sorted(items, key=lambda i: (i.path, i.line, i.column, i.code, i.text))


def at_or_above(items: Iterable[Item], threshold: str) -> List[Item]:
    floor = SEVERITY_ORDER[threshold]
    return [i for i in items if SEVERITY_ORDER.get(i.severity, 1) >= floor]


# ---------------------------------------------------------------------------- statistics

def render_statistics(reported: Sequence[Item], suppressed: Sequence[Item]) -> str:
    """Per rule: findings reported and findings a `# noqa` silences, then where each
    suppression is, so a team sees which rules it silences and where."""
    codes = sorted({i.code for i in reported} | {i.code for i in suppressed})
    if not codes:
        return "No findings and no # noqa suppressions.\n"
    docs = rule_docs()
    rows: List[Tuple[str, ...]] = [("code", "name", "level", "reported", "noqa", "files")]
    for code in codes:
        doc = docs.get(code)
        here = [i for i in reported if i.code == code]
        silenced = [i for i in suppressed if i.code == code]
        files = {i.path for i in here} | {i.path for i in silenced}
        rows.append((code, doc.name if doc else "", doc.severity if doc else default_severity(code),
                     str(len(here)), str(len(silenced)), str(len(files))))
    rows.append(("total", "", "", str(len(reported)), str(len(suppressed)),
                 str(len({i.path for i in reported} | {i.path for i in suppressed}))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {3, 4, 5}
    out = ["  ".join(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
                     for i, cell in enumerate(row)).rstrip() for row in rows]
    if suppressed:
        out.append("")
        out.append("# noqa suppressions:")
        for item in sort_items(suppressed):
            out.append(f"  {item.place}: {item.code} {item.what or item.text}")
    return "\n".join(out) + "\n"
