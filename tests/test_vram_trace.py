"""``vram-estimate --trace``: the torch-free side (refusals, the missing-torch line, the report
beside the static estimate) always; the trace itself only where torch and transformers are
installed (the main suite runs without them)."""

import importlib.util
import subprocess
import sys

import pytest

from vram_estimator import cli, tracing
from vram_estimator.api import estimate_config, run
from vram_estimator.knowledge import db
from vram_estimator.reading.config_comments import Value
from vram_estimator.report import json_report, text_report
from vram_estimator.tracing.compare import TraceOutcome, as_estimate, plan_of, traced_estimate
from vram_estimator.tracing.plan import Traced

HAS_TRACE = all(importlib.util.find_spec(n) is not None for n in ("torch", "transformers"))
HAS_PEFT = HAS_TRACE and importlib.util.find_spec("peft") is not None

# a Llama-style decoder small enough to count by hand (config.json keys, read like a local model)
TINY = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "tie_word_embeddings": False,
    "max_position_embeddings": 512,
}
# embeddings 128x64, q/k/v/o 4x64x64, gate/up/down 3x64x128, two norms 2x64, final norm 64, head 128x64
TINY_PARAMS = 128 * 64 + 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64 + 64 + 128 * 64
TINY_TENSORS = 1 + 9 + 1 + 1  # parameter tensors: one AdamW step counter (fp32 scalar) each


def tiny_static(**settings):
    model = db.model_from_hf_config(TINY, name="tiny-llama")
    values = {"model": Value(model, "test"), "gpu": Value("t4", "test")}
    values.update({k: Value(v, "test") for k, v in settings.items()})
    return run(values, with_remedies=False).estimate


def test_trace_without_torch_is_one_line_and_bad_input(monkeypatch, capsys):
    monkeypatch.setattr(tracing.importlib.util, "find_spec", lambda name: None)
    assert cli.main(["--model", "llama-2-7b", "--trace"]) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--trace needs torch and transformers" in err[0]


@pytest.mark.parametrize(
    "settings, why",
    [
        (dict(params="7B"), "the model is a parameter count"),
        (dict(model="resnet50"), "transformers cannot be built for family 'resnet'"),
        (dict(model="llama-2-7b", precision="nf4", lora=8), "nf4 weights are not traced"),
        (dict(model="llama-2-7b", mode="generate"), "generation is not traced"),
        (dict(model="llama-2-70b", world=8, sharding="zero3"), "zero3 over 8 ranks is not traced"),
        (dict(model="llama-2-7b", optimizer="adamw-8bit"), "optimizer adamw-8bit is not traced"),
    ],
)
def test_refused_before_torch_is_imported(settings, why):
    static = estimate_config(**settings).estimate
    outcome = traced_estimate(static)
    assert outcome.estimate is None and why in outcome.problem
    assert "\n" not in outcome.problem


def fabricated(static, params, grads, states, acts):
    """A trace outcome with MemTracker breakdowns given by hand (no torch needed)."""
    plan, _ = plan_of(static)
    backward = dict(Parameter=params, Gradient=grads, Activation=acts, Optstate=states)
    step = dict(Parameter=params, Gradient=grads, Optstate=states * 3 // 2)
    peaks = {k: dict(v, Total=sum(v.values())) for k, v in (("backward", backward), ("optimizer step", step))}
    traced = Traced(plan=plan, peaks=peaks, after={"optimizer step": dict(Optstate=states)})
    return TraceOutcome(estimate=as_estimate(static, traced), traced=traced, versions={"torch": "x"})


def test_traced_estimate_adds_the_cuda_side_from_the_static_model():
    static = estimate_config(model="llama-2-7b", precision="bf16", batch=1, seq=2048, gpu="h100").estimate
    p = 2 * static.params_total
    outcome = fabricated(static, p, p, 2 * p, 4 * 2**30)
    est = outcome.estimate
    assert est.peak_phase == "optimizer step"
    names = [t.name for t in est.terms]
    assert names[:3] == ["weights", "gradients", "optimizer state"]
    assert "runtime buffers" in names and "fragmentation" in names
    frag = est.term("fragmentation")
    # fragmentation of the dynamic bytes: the gradients and the step's temporaries (p)
    assert frag.point == pytest.approx(0.04 * (p + p), rel=1e-6)
    assert est.allocated()[1] == pytest.approx(p + p + 3 * p + est.term("runtime buffers").point)


def test_report_shows_both_side_by_side():
    result = estimate_config(model="llama-2-7b", precision="bf16", batch=1, seq=2048, gpu="h100")
    p = 2 * result.estimate.params_total
    result.traced = fabricated(result.estimate, p, p, 2 * p, 4 * 2**30)
    text = text_report(result)
    assert "static vs traced" in text and "activations" in text and "verdict" in text
    doc = json_report(result)
    cats = {c["category"]: c for c in doc["traced"]["categories"]}
    assert cats["params"]["traced"] == p and set(cats) >= {"gradients", "optimizer", "activations"}
    result.traced = TraceOutcome(problem="not traced: generation is not traced")
    assert "trace: not traced: generation" in text_report(result)
    assert json_report(result)["traced"] == {"problem": "not traced: generation is not traced"}


def test_static_path_does_not_import_torch():
    code = (
        "import sys, vram_estimator.cli, vram_estimator.report, vram_estimator.tracing.compare;"
        "print(any(m in sys.modules for m in ('torch', 'transformers')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


needs_trace = pytest.mark.skipif(not HAS_TRACE, reason="needs torch and transformers")


@needs_trace
def test_tiny_llama_step_against_a_hand_count():
    outcome = traced_estimate(tiny_static(precision="bf16", batch=1, seq=8, optimizer="adamw"))
    assert outcome.problem is None
    peaks, after = outcome.traced.peaks, outcome.traced.after
    step = peaks["optimizer step"]
    nbytes = 2 * TINY_PARAMS  # bf16
    assert step["Parameter"] == nbytes and step["Gradient"] == nbytes
    # two bf16 states and the foreach step's sqrt(exp_avg_sq) list, one fp32 step count each
    assert step["Optstate"] == 3 * nbytes + 4 * TINY_TENSORS
    assert after["optimizer step"]["Optstate"] == 2 * nbytes + 4 * TINY_TENSORS
    # the forward keeps at least the bf16 logits and their fp32 upcast for the loss
    assert after["forward"]["Activation"] >= 8 * 128 * (2 + 4)
    assert outcome.estimate.peak_phase == "optimizer step"


@pytest.mark.skipif(not HAS_PEFT, reason="needs torch, transformers and peft")
def test_tiny_llama_lora_through_peft():
    static = tiny_static(precision="bf16", batch=1, seq=8, lora=4, lora_targets=["q_proj", "v_proj"])
    outcome = traced_estimate(static)
    assert outcome.problem is None
    adapters = 2 * 4 * (64 + 64)  # q and v: A (4x64) and B (64x4), fp32 over bf16 weights (PEFT)
    assert outcome.traced.after["backward"]["Gradient"] == 4 * adapters
    assert outcome.traced.peaks["backward"]["Parameter"] == 2 * TINY_PARAMS + 4 * adapters


# one tiny config.json per family the issue names (and a few more), read like a local model
FAMILIES = {
    "llama": {},
    "mistral": {},
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "gemma": dict(head_dim=32),
    "gpt_neox": {},
    "opt": dict(ffn_dim=128, word_embed_proj_dim=64),
    "phi": {},
    "qwen2": {},
    "phi3": {},
}


@needs_trace
@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_family_traces_with_the_static_parameter_count(model_type):
    config = dict(TINY, model_type=model_type, **FAMILIES[model_type])
    model = db.model_from_hf_config(config, name=f"tiny-{model_type}")
    values = {"model": Value(model, "test"), "gpu": Value("t4", "test")}
    values.update({k: Value(v, "test") for k, v in dict(precision="bf16", batch=1, seq=8).items()})
    static = run(values, with_remedies=False).estimate
    outcome = traced_estimate(static)
    assert outcome.problem is None, outcome.problem
    step = outcome.traced.peaks["optimizer step"]
    assert step["Parameter"] == 2 * static.params_total  # bf16: the build table matches our formula
    assert outcome.traced.after["forward"]["Activation"] > 0


@needs_trace
def test_accumulated_gradients_are_alive_through_the_traced_forward():
    outcome = traced_estimate(tiny_static(precision="bf16", batch=1, seq=8, grad_accum=4))
    assert outcome.traced.plan.grads_persist
    assert outcome.traced.after["forward"]["Gradient"] == 2 * TINY_PARAMS
