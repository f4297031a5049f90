"""The registry: every family has its entry, every model a registered family, one family per
Hugging Face model_type, and nothing in the cost model switches on a family's name."""

import ast
import os

import pytest

from vram_estimator.knowledge import db
from vram_estimator.costs.activations import ACTIVATION_MODELS
from vram_estimator.knowledge.families import all_families
from vram_estimator.knowledge.registry import KIND_TRAITS, Breakdown, Dims

PKG = os.path.join(os.path.dirname(__file__), "..", "vram_estimator")


def test_every_built_in_model_has_a_registered_family():
    families = all_families()
    for key, entry in db.models().items():
        assert entry["family"] in families, key


def test_every_family_has_a_complete_entry():
    for name, fam in all_families().items():
        assert fam.kind in ACTIVATION_MODELS and fam.kind in KIND_TRAITS, name
        assert fam.summary, name
        used = [k for k, e in db.models().items() if e["family"] == name]
        assert used or fam.hf_types, f"{name}: no model and no config.json type"
        for key in used:
            m = db.model(key)
            assert isinstance(m.breakdown, Breakdown) and isinstance(m.dims, Dims)
            assert m.breakdown.active <= m.breakdown.total
            assert m.breakdown.linear <= m.breakdown.total


def test_hugging_face_model_types_map_to_one_family():
    seen = {}
    for name, fam in all_families().items():
        for t in fam.hf_types:
            assert t not in seen, f"{t} in {seen.get(t)} and {name}"
            seen[t] = name
        assert not fam.hf_types or fam.hf_reader is not None, name


@pytest.mark.parametrize("module", ["knowledge/db.py", "costs/estimate.py", "costs/remedies.py", "costs/terms.py", "costs/activations.py"])
def test_no_switch_on_family_or_kind_names(module):
    """Model knowledge lives in the registry and its tables, not in if-chains on names."""
    with open(os.path.join(PKG, module), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            names = {getattr(n, "attr", getattr(n, "id", None)) for n in [node.left] + node.comparators}
            literals = {n.value for n in node.comparators if isinstance(n, ast.Constant)}
            assert not (names & {"family", "kind", "name"} and literals), ast.unparse(node)


def test_capabilities_include_gated_mlp_moe_mla_gqa():
    assert {"gated-mlp", "gqa"} <= db.model("llama-3-8b").capabilities
    assert "moe" in db.model("mixtral-8x7b").capabilities
    assert {"mla", "moe"} <= db.model("deepseek-v3").capabilities
    assert "gated-mlp" not in db.model("gpt2").capabilities
    assert "mqa" in db.model("falcon-7b").capabilities


def test_models_and_gpus_listings_still_work():
    from vram_estimator.cli import main

    assert main(["models"]) == 0 and main(["gpus"]) == 0
    for new in ("b300", "gb200", "mi355x", "rtx-pro-6000-blackwell", "h20", "gaudi3"):
        assert new in db.gpus() and db.gpus()[new]["memory_mib"] > 90_000


def test_default_lengths_come_from_the_family():
    assert db.model("whisper-small").default_seq() == 1500  # audio frames, not text positions
    assert db.model("t5-small").default_seq() == 512
    assert db.model("llama-3-8b").default_seq() == 2048
    assert db.model("gpt2").default_seq() == 1024  # capped by its positions
