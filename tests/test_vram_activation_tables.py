"""The traced activation tables (``vram_estimator/data/activation_tables.json``, written by
``calibration/trace_activations.py``): every listed family has one or is named hand-priced, the
static path uses them and says so, and -- where torch and transformers are installed -- a sample
regenerated from the library's code matches the committed table."""

import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from vram_estimator.api import run  # noqa: E402
from vram_estimator.costs.activations import HAND_PRICED, traced_table, traced_tables  # noqa: E402
from vram_estimator.knowledge.families import all_families  # noqa: E402
from vram_estimator.reading.config_comments import Value  # noqa: E402

TABLES = traced_tables()


def _activations_note(**settings):
    values = {k: Value(v, "test") for k, v in settings.items()}
    report = run(values, with_remedies=False)
    return next(t for phase in report.estimate.phases.values() for t in phase if t.name == "activations")


def test_provenance_names_library_torch_command_and_date():
    prov = TABLES["_provenance"]
    for key in ("library", "library_version", "torch_version", "command", "date"):
        assert prov.get(key), key
    assert "calibration/trace_activations.py" in prov["command"]


@pytest.mark.parametrize("family", sorted(all_families()))
def test_every_family_is_traced_or_named_hand_priced(family):
    traced = family in TABLES["families"]
    assert traced != (family in HAND_PRICED), family
    if traced:
        entry = TABLES["families"][family]
        assert entry["implementation"].startswith("transformers ")
        assert entry["default_attention"] in ("eager", "sdpa")
        for precision, tables in entry["tables"].items():
            for attention, table in tables.items():
                assert abs(table["check"]["error_pct"]) < 3.0, (precision, attention)


def test_hand_priced_families_are_listed_in_the_docs():
    with open(os.path.join(ROOT, "docs", "vram.md"), encoding="utf-8") as handle:
        docs = handle.read()
    for family in HAND_PRICED:
        assert f"`{family}`" in docs, family


def test_flash_without_an_fp32_kernel_falls_back_to_sdpa():
    table, source = traced_table("llama", "fp32", "flash")
    assert "sdpa" in source and "not run" in source


def test_eager_keeps_the_probabilities_sdpa_does_not():
    eager, _ = traced_table("opt", "half", "eager")
    sdpa, _ = traced_table("opt", "half", "sdpa")
    assert eager["layer"].get("hs", 0) >= 6 - 0.01  # fp32 softmax output + its half copy
    assert abs(sdpa["layer"].get("hs", 0)) < 0.01


def test_the_report_names_where_activation_bytes_come_from():
    traced = _activations_note(model="llama-2-7b", batch=1, seq=512, precision="bf16", gpu="a100-80gb")
    assert "traced from transformers" in traced.note and "LlamaForCausalLM" in traced.note
    hand = _activations_note(model="bart-base", batch=1, seq=512, precision="bf16", gpu="a100-80gb")
    assert "hand-priced" in hand.note


def test_default_attention_is_the_libraries():
    report = run({"model": Value("llama-2-7b", "test"), "gpu": Value("a100-80gb", "test")}, with_remedies=False)
    attention = report.estimate.settings["attention"]
    assert attention.value == "sdpa" and "transformers" in attention.source


# --------------------------------------------------------------------------- regenerate a sample

SAMPLES = [("llama", "fp32", "sdpa"), ("opt", "half", "eager"), ("neox", "mixed", "sdpa"),
           ("gemma2", "half", "flash"), ("bert", "fp32", "eager")]


@pytest.mark.parametrize("family,precision,attention", SAMPLES)
def test_a_regenerated_sample_matches_the_table(family, precision, attention):
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if transformers.__version__ != TABLES["_provenance"]["library_version"]:
        pytest.skip("the tables were traced with another transformers release")
    from calibration import trace_activations as TA

    table = TABLES["families"][family]["tables"][precision][attention]
    size = dict(table["check"]["config"])
    TA.cuda_layouts(True)
    try:
        measured, feats = TA.trace(family, size, precision, attention)
    finally:
        TA.cuda_layouts(False)
    coef = {f"{part}.{k}": v for part in ("layer", "outside") for k, v in table[part].items()}
    assert measured == table["check"]["measured"]
    assert TA.predict(coef, feats) == pytest.approx(measured, rel=0.03)
