"""The cost model: terms, intervals, verdicts, and the peer's known traps."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vram_estimator.api import estimate_config

GIB = 1024**3


def est(**kw):
    r = estimate_config(**kw)
    assert r.errors == []
    return r.estimate


def test_full_finetune_terms_are_exact_bytes_per_param():
    e = est(model="llama-2-7b", gpu="a100-80gb", batch=1, seq=512, precision="bf16-mixed", optimizer="adamw")
    n = 6_738_415_616
    assert e.term("weights").point == 4 * n
    assert e.term("gradients").point == 4 * n
    assert e.term("optimizer state").point == 8 * n
    assert e.term("optimizer temporaries").point == 4 * n  # foreach AdamW's sqrt(exp_avg_sq) list
    assert e.peak_phase == "optimizer step"
    backward = {t.name: t for t in e.phases["backward"]}
    from vram_estimator.knowledge import db

    assert backward["autocast copies"].point == 2 * db.model("llama-2-7b").breakdown.cast  # head included
    assert "gradients" not in backward  # written while activations are freed


def test_qlora_7b_fits_a_24gb_card():
    e = est(
        model="llama-2-7b",
        gpu="rtx4090",
        batch=4,
        seq=512,
        precision="nf4",
        lora=16,
        checkpointing="on",
        optimizer="paged-adamw-8bit",
    )
    assert e.verdict == "fits"
    assert e.upper < 12 * GIB
    assert e.term("weights").point < 4.2 * GIB  # 4-bit linears + bf16 embeddings and head


def test_full_finetune_8b_on_a100_is_oom():
    e = est(model="llama-3-8b", gpu="a100-80gb", batch=4, seq=2048, precision="bf16-mixed", optimizer="adamw")
    assert e.verdict == "oom"


def test_sharding_divides_by_world():
    base = est(
        model="llama-2-13b",
        gpu="a100-80gb",
        batch=1,
        seq=1024,
        precision="bf16",
        world=8,
        sharding="ddp",
        checkpointing="on",
    )
    z3 = est(
        model="llama-2-13b",
        gpu="a100-80gb",
        batch=1,
        seq=1024,
        precision="bf16",
        world=8,
        sharding="zero3",
        checkpointing="on",
    )
    assert z3.term("weights").point == pytest.approx(base.term("weights").point / 8)
    n = 13_015_864_320
    assert base.term("optimizer state").point == 4 * n  # plain torch AdamW keeps bf16 states for bf16 params
    assert z3.term("optimizer state").point == pytest.approx(8 * n / 8)  # DeepSpeed: fp32 states, sharded
    assert z3.term("fp32 master copy") is not None
    assert z3.point < base.point / 3


def test_zero_stages_are_ordered():
    peaks = [
        est(
            model="mistral-7b",
            gpu="h100",
            batch=1,
            seq=2048,
            precision="bf16",
            world=8,
            sharding=s,
            checkpointing="on",
        ).point
        for s in ("zero1", "zero2", "zero3")
    ]
    assert peaks[0] > peaks[1] > peaks[2]


def test_offload_removes_optimizer_state():
    e = est(
        model="mistral-7b",
        gpu="h100",
        batch=1,
        seq=2048,
        precision="bf16",
        world=8,
        sharding="zero2",
        offload="optimizer",
        checkpointing="on",
    )
    assert e.term("optimizer state").point == 0


def test_instance_gpu_count_is_default_world():
    e = est(model="llama-2-13b", gpu="p4de.24xlarge", batch=1, seq=1024, sharding="fsdp", precision="bf16")
    assert e.settings["world"].value == 8
    assert "p4de.24xlarge" in e.settings["world"].source


def test_moe_weights_use_all_experts_activations_use_active():
    mix = est(model="mixtral-8x7b", gpu="h200", mode="inference", batch=1, seq=512, precision="bf16")
    assert mix.term("weights").point == 2 * 46_702_792_704
    train_mix = est(model="mixtral-8x7b", gpu="h200", batch=1, seq=512, precision="bf16", lora=8)
    train_mis = est(model="mistral-7b", gpu="h200", batch=1, seq=512, precision="bf16", lora=8)
    ratio = train_mix.term("activations").point / train_mis.term("activations").point
    assert 1.2 < ratio < 2.0  # two experts' MLP activations per token, not eight


def decode_kv(e):
    """The KV cache at the end of decoding (the whole context)."""
    return next(t for t in e.phases["decode"] if t.name == "KV cache")


def test_generation_kv_cache_is_gqa_aware():
    e = est(model="llama-3-8b", gpu="a100-80gb", mode="generate", batch=16, context=8192)
    assert decode_kv(e).point == 2 * 32 * 8 * 128 * 8192 * 16 * 2
    e2 = est(model="llama-2-7b", gpu="a100-80gb", mode="generate", batch=16, context=8192)
    assert decode_kv(e2).point == 4 * decode_kv(e).point  # 32 kv heads vs 8
    assert e.verdict == "fits"


def test_checkpointing_and_sdpa_reduce_activations():
    kw = dict(model="gpt2", gpu="t4", batch=8, seq=1024, precision="fp16-mixed")
    eager = est(attention="eager", **kw).term("activations").point
    sdpa = est(attention="sdpa", **kw).term("activations").point
    ckpt = est(attention="sdpa", checkpointing="on", **kw).term("activations").point
    assert eager > sdpa > ckpt


def test_lora_trains_a_small_fraction():
    e = est(model="llama-2-7b", gpu="a100-80gb", batch=1, seq=512, precision="bf16", lora=16)
    assert e.params_trainable == 32 * 16 * (2 * (4096 + 4096))  # q_proj and v_proj (PEFT default)
    allin = est(
        model="llama-2-7b",
        gpu="a100-80gb",
        batch=1,
        seq=512,
        precision="bf16",
        lora=16,
        lora_targets=["all-linear"],
    )
    assert allin.params_trainable > e.params_trainable


def test_unknown_model_with_params_has_wide_interval():
    known = est(model="llama-2-7b", gpu="a100-80gb", batch=1, seq=512)
    unknown = est(params="7B", gpu="a100-80gb", batch=1, seq=512)
    assert (unknown.upper - unknown.lower) > (known.upper - known.lower)


def test_cnn_and_vit_and_encdec_and_unet_and_clip():
    for model in (
        "resnet50",
        "convnext-tiny",
        "vit-b-16",
        "t5-small",
        "whisper-small",
        "sd15-unet",
        "clip-vit-base-patch32",
        "bert-base-uncased",
        "efficientnet-b0",
    ):
        e = est(model=model, gpu="a10g", batch=8)
        assert 0 < e.lower <= e.point <= e.upper


def test_tight_verdict_between_bounds():
    e = est(model="llama-2-7b", gpu="48GiB", mode="inference", batch=1, seq=512, precision="fp32")
    assert e.point > 0
    lo, hi = e.lower, e.upper
    mid = est(
        model="llama-2-7b",
        gpu=f"{(lo + hi) / 2 / GIB + 0.5 + 0.02 * 48:.3f}GiB",
        mode="inference",
        batch=1,
        seq=512,
        precision="fp32",
    )
    assert mid.verdict in ("tight", "fits")


MODELS = ["gpt2", "llama-3-8b", "bert-base-uncased", "t5-small", "mixtral-8x7b", "vit-b-16", "resnet50"]


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    b=st.integers(1, 64),
    s=st.integers(16, 4096),
    precision=st.sampled_from(["fp32", "bf16-mixed", "bf16", "nf4"]),
    ckpt=st.sampled_from(["on", "off"]),
    attention=st.sampled_from(["eager", "sdpa"]),
    mode=st.sampled_from(["train", "inference", "generate"]),
)
def test_monotonic_in_batch_and_seq_and_interval_ordered(model, b, s, precision, ckpt, attention, mode):
    kw = dict(
        model=model, gpu="h100", precision=precision, checkpointing=ckpt, attention=attention, mode=mode
    )
    e = est(batch=b, seq=s, **kw)
    assert e.lower <= e.point <= e.upper
    assert est(batch=b + 1, seq=s, **kw).point >= e.point
    assert est(batch=b, seq=s + 64, **kw).point >= e.point
