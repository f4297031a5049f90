"""Rule docs are generated from the rule docstrings; stale generated files fail here."""
from __future__ import annotations

from flake8_torch_preflight import ruledocs
from flake8_torch_preflight.rules import ALL_RULES


def test_every_rule_docstring_has_all_headings():
    for doc in ruledocs.all_docs():
        missing = [h for h in ruledocs.HEADINGS if h not in doc.sections]
        assert not missing, f"{doc.code} docstring lacks {missing}"
        assert "```python" in doc.sections["Example"], doc.code
        assert "```python" in doc.sections["Use instead"], doc.code


def test_codes_unique_and_module_names_match():
    codes = [rule.code for rule in ALL_RULES]
    assert len(codes) == len(set(codes))
    for rule in ALL_RULES:
        module = rule.__module__.rsplit(".", 1)[-1]
        assert module.startswith(rule.code.lower() + "_"), module
        assert module[len(rule.code) + 1:] == rule.name.replace("-", "_"), (module, rule.name)


def test_generated_rules_page_is_fresh():
    current = (ruledocs.ROOT / "docs" / "rules.md").read_text()
    assert current == ruledocs.rules_markdown(), "run: python -m flake8_torch_preflight.ruledocs"


def test_readme_rule_table_is_fresh():
    readme = (ruledocs.ROOT / "README.md").read_text()
    assert ruledocs.TABLE_START in readme
    assert readme == ruledocs.readme_with_table(readme), "run: python -m flake8_torch_preflight.ruledocs"


def test_readme_sample_output_matches_the_example():
    from flake8_torch_preflight.engine import lint_source

    readme = (ruledocs.ROOT / "README.md").read_text()
    path = ruledocs.ROOT / "examples" / "bad_train.py"
    produced = {f"examples/bad_train.py:{f.line}:{f.col + 1}: {f.message}"
                for f in lint_source(path.read_text(), str(path))}
    samples = [line for line in readme.splitlines() if line.startswith("examples/bad_train.py:")]
    assert samples and all(line in produced for line in samples)
