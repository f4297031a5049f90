"""Output formats: SARIF 2.1.0 (validated against the official schema), JSON, GitHub."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from flake8_torch_preflight import reporting
from flake8_torch_preflight.findings import Finding
from flake8_torch_preflight.rules import ALL_RULES

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((Path(__file__).resolve().parent / "sarif-schema-2.1.0.json").read_text())
FOLDERS = [str(p) for p in sorted((ROOT / "fixtures").glob("TPF0*")) if p.is_dir()]


def _validate(log: dict) -> None:
    jsonschema.Draft4Validator.check_schema(SCHEMA)
    jsonschema.Draft4Validator(SCHEMA).validate(log)


def tpf(*args):
    return subprocess.run([sys.executable, "-m", "flake8_torch_preflight", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def flake8(*args):
    return subprocess.run([sys.executable, "-m", "flake8", "--isolated", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_tpf_sarif_is_valid_and_github_ready():
    log = json.loads(tpf("check", "--isolated", "--format", "sarif", *FOLDERS).stdout)
    _validate(log)
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert {r["id"] for r in rules} >= {rule.code for rule in ALL_RULES}
    for rule in rules:
        if rule["id"].startswith("TPF0"):
            assert rule["help"]["text"] and rule["help"]["markdown"]
            assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
            assert rule["defaultConfiguration"]["level"] in ("error", "warning", "note")
    assert run["results"]
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in ("error", "warning", "note")
        location = result["locations"][0]["physicalLocation"]
        assert not location["artifactLocation"]["uri"].startswith(("/", "file:"))
        assert location["region"]["startLine"] >= 1 and location["region"]["startColumn"] >= 1


def test_sarif_levels_follow_severity():
    items = [reporting.Item.from_finding("a.py", Finding(3, 4, "TPF001", level, "w", "e", "f"))
             for level in ("error", "warning", "note")]
    log = reporting.sarif_log(items, [{"path": "b.py", "message": "b.py: syntax error"}])
    _validate(log)
    assert [r["level"] for r in log["runs"][0]["results"]] == ["error", "warning", "note"]
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is False


def test_flake8_sarif_reporter_is_valid():
    result = flake8("--select", "TPF,E9", "--format", "tpf-sarif", *FOLDERS[:3])
    log = json.loads(result.stdout)
    _validate(log)
    assert log["runs"][0]["results"]
    assert all(r["ruleId"].startswith("TPF") for r in log["runs"][0]["results"])


def test_flake8_reporters_include_other_plugins_codes(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text("import os\nx=1\n")
    out = flake8("--format", "tpf-sarif", str(path)).stdout
    log = json.loads(out)
    _validate(log)
    ids = {r["ruleId"] for r in log["runs"][0]["results"]}
    assert "F401" in ids and "E225" in ids
    data = json.loads(flake8("--format", "tpf-json", str(path)).stdout)
    assert {f["code"] for f in data["findings"]} >= {"F401", "E225"}


def test_flake8_json_equals_tpf_json():
    ours = json.loads(tpf("check", "--isolated", "--format", "json", *FOLDERS[:3]).stdout)
    theirs = json.loads(flake8("--select", "TPF", "--format", "tpf-json", *FOLDERS[:3]).stdout)
    strip = lambda data: sorted(  # noqa: E731
        (Path(f["path"]).resolve(), f["line"], f["column"], f["code"], f["severity"], f["message"])
        for f in data["findings"])
    assert strip(ours) == strip(theirs)
    assert all("evidence" in f and "fix" in f for f in theirs["findings"])


def test_flake8_output_file(tmp_path):
    target = tmp_path / "out" / "report.sarif"
    flake8("--select", "TPF", "--format", "tpf-sarif", "--output-file", str(target), FOLDERS[0])
    _validate(json.loads(target.read_text()))


def test_github_annotations():
    finding = Finding(7, 4, "TPF001", "error", "100% of graphs, kept", "a\nb", "store `x.detach()`")
    text = reporting.render_github([reporting.Item.from_finding("src/my,file.py", finding)])
    line = text.strip()
    assert line.startswith("::error file=src/my%2Cfile.py,line=7,col=5,title=TPF001 retained-graph::")
    assert "100%25 of graphs" in line and "a%0Ab" in line and "\n" not in line
    note = reporting.Item.from_finding("a.py", Finding(1, 0, "TPF013", "note", "w", "e", "f"))
    assert reporting.render_github([note]).startswith("::notice ")


def test_github_format_from_cli():
    out = tpf("check", "--isolated", "--format", "github", *FOLDERS[:2])
    lines = out.stdout.splitlines()
    assert lines and all(line.startswith(("::error ", "::warning ", "::notice ")) for line in lines)
    assert out.returncode == 1


def test_json_schema_of_tpf_check():
    data = json.loads(tpf("check", "--isolated", "--format", "json", FOLDERS[0]).stdout)
    assert set(data) == {"tool", "version", "findings", "errors", "summary"}
    finding = data["findings"][0]
    assert {"path", "line", "column", "code", "severity", "message", "what", "evidence", "fix",
            "fixable"} <= set(finding)


@pytest.mark.parametrize("text, parts", [
    ("a (b (c)); fix: d", ("a", "b (c)", "d")),
    ("no evidence here", ("no evidence here", "", "")),
])
def test_message_parts_from_flake8_text(text, parts):
    item = reporting.Item.from_text("x.py", 1, 1, "TPF001", "[error] " + text)
    assert (item.what, item.evidence, item.fix) == parts and item.severity == "error"


@pytest.mark.parametrize("folder", ["exp #1", "50% done", "a b", "ünï"])
def test_sarif_uris_round_trip(tmp_path, monkeypatch, folder):
    from urllib.parse import unquote, urljoin, urlparse
    from urllib.request import url2pathname

    monkeypatch.chdir(tmp_path)
    (tmp_path / folder).mkdir()
    path = tmp_path / folder / "train.py"
    path.write_text("x = 1\n")
    item = reporting.Item.from_finding(str(Path(folder) / "train.py"),
                                       Finding(1, 0, "TPF001", "warning", "w", "e", "f"))
    log = reporting.sarif_log([item])
    _validate(log)
    run = log["runs"][0]
    uri = run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert "#" not in uri and " " not in uri
    assert unquote(uri) == f"{folder}/train.py"
    base = run["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    absolute = urljoin(base, uri)
    assert Path(url2pathname(urlparse(absolute).path)) == path
    outside = reporting.Item.from_finding(str(tmp_path.parent / "x #2.py"),
                                          Finding(1, 0, "TPF001", "warning", "w", "e", "f"))
    far = reporting.sarif_log([outside])["runs"][0]["results"][0]["locations"][0]
    far_uri = far["physicalLocation"]["artifactLocation"]["uri"]
    assert far_uri.startswith("file://") and url2pathname(urlparse(far_uri).path) \
        == str(tmp_path.parent / "x #2.py")
