"""Any Hugging Face model: exact parameter counts from a ``config.json`` keyed by model_type.

The configs below are the published ``config.json`` files of each model (the keys that matter
for the count; the rest of each file is ignored), and each expected total is the published one
(model card / the Hub's safetensors total / the diffusers class on the meta device)."""

import json

import pytest

from vram_estimator.knowledge import db
from vram_estimator.knowledge.families import all_families

HF = {
    "Qwen/Qwen3-8B": (
        dict(
            model_type="qwen3",
            hidden_size=4096,
            num_hidden_layers=36,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            intermediate_size=12288,
            vocab_size=151936,
            tie_word_embeddings=False,
            max_position_embeddings=40960,
        ),
        8_190_735_360,
    ),
    "Qwen/Qwen3-30B-A3B": (
        dict(
            model_type="qwen3_moe",
            hidden_size=2048,
            num_hidden_layers=48,
            num_attention_heads=32,
            num_key_value_heads=4,
            head_dim=128,
            intermediate_size=6144,
            moe_intermediate_size=768,
            num_experts=128,
            num_experts_per_tok=8,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            vocab_size=151936,
            tie_word_embeddings=False,
        ),
        30_532_122_624,
    ),
    "meta-llama/Llama-4-Scout-17B-16E (text model)": (
        dict(
            model_type="llama4",
            text_config=dict(
                model_type="llama4_text",
                hidden_size=5120,
                num_hidden_layers=48,
                num_attention_heads=40,
                num_key_value_heads=8,
                head_dim=128,
                intermediate_size=8192,
                intermediate_size_mlp=16384,
                num_local_experts=16,
                num_experts_per_tok=1,
                interleave_moe_layer_step=1,
                vocab_size=202048,
            ),
            tie_word_embeddings=False,
        ),
        107_769_861_120,
    ),
    "deepseek-ai/DeepSeek-V3": (
        dict(
            model_type="deepseek_v3",
            hidden_size=7168,
            num_hidden_layers=61,
            num_attention_heads=128,
            num_key_value_heads=128,
            intermediate_size=18432,
            moe_intermediate_size=2048,
            n_routed_experts=256,
            n_shared_experts=1,
            num_experts_per_tok=8,
            first_k_dense_replace=3,
            moe_layer_freq=1,
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=128,
            vocab_size=129280,
            tie_word_embeddings=False,
        ),
        671_026_404_352,
    ),
    "google/gemma-3-27b-it": (
        dict(
            model_type="gemma3",
            text_config=dict(
                model_type="gemma3_text",
                hidden_size=5376,
                num_hidden_layers=62,
                num_attention_heads=32,
                num_key_value_heads=16,
                head_dim=128,
                intermediate_size=21504,
                vocab_size=262208,
            ),
            vision_config=dict(
                model_type="siglip_vision_model",
                hidden_size=1152,
                num_hidden_layers=27,
                intermediate_size=4304,
                patch_size=14,
                image_size=896,
            ),
        ),
        27_432_406_640,
    ),
    "google/gemma-3-1b-it": (
        dict(
            model_type="gemma3_text",
            hidden_size=1152,
            num_hidden_layers=26,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=256,
            intermediate_size=6912,
            vocab_size=262144,
        ),
        999_885_952,
    ),
    "mistralai/Mistral-Nemo-Base-2407": (
        dict(
            model_type="mistral",
            hidden_size=5120,
            num_hidden_layers=40,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            intermediate_size=14336,
            vocab_size=131072,
            tie_word_embeddings=False,
        ),
        12_247_782_400,
    ),
    "mistralai/Mistral-Small-24B-Base-2501": (
        dict(
            model_type="mistral",
            hidden_size=5120,
            num_hidden_layers=40,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            intermediate_size=32768,
            vocab_size=131072,
            tie_word_embeddings=False,
        ),
        23_572_403_200,
    ),
    "microsoft/phi-4": (
        dict(
            model_type="phi3",
            hidden_size=5120,
            num_hidden_layers=40,
            num_attention_heads=40,
            num_key_value_heads=10,
            intermediate_size=17920,
            vocab_size=100352,
            tie_word_embeddings=False,
        ),
        14_659_507_200,
    ),
    "HuggingFaceTB/SmolLM2-135M": (
        dict(
            model_type="llama",
            hidden_size=576,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            intermediate_size=1536,
            vocab_size=49152,
            tie_word_embeddings=True,
        ),
        134_515_008,
    ),
    "openai/gpt-oss-20b": (
        dict(
            model_type="gpt_oss",
            hidden_size=2880,
            num_hidden_layers=24,
            num_attention_heads=64,
            num_key_value_heads=8,
            head_dim=64,
            intermediate_size=2880,
            num_local_experts=32,
            num_experts_per_tok=4,
            experts_per_token=4,
            vocab_size=201088,
            attention_bias=True,
            tie_word_embeddings=False,
        ),
        20_914_757_184,
    ),
    "bigcode/octocoder": (
        dict(
            model_type="gpt_bigcode",
            n_embd=6144,
            n_layer=40,
            n_head=48,
            n_inner=24576,
            vocab_size=49152,
            n_positions=8192,
            multi_query=True,
        ),
        15_517_456_384,
    ),
    "facebook/dinov2-giant": (
        dict(
            model_type="dinov2",
            hidden_size=1536,
            num_hidden_layers=40,
            num_attention_heads=24,
            mlp_ratio=4,
            patch_size=14,
            image_size=518,
            use_swiglu_ffn=True,
        ),
        1_136_480_768,
    ),
    "facebook/dinov2-base": (
        dict(
            model_type="dinov2",
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            mlp_ratio=4,
            patch_size=14,
            image_size=518,
        ),
        86_580_480,
    ),
    "openai/whisper-large-v3": (
        dict(
            model_type="whisper",
            d_model=1280,
            encoder_layers=32,
            decoder_layers=32,
            encoder_attention_heads=20,
            encoder_ffn_dim=5120,
            vocab_size=51866,
            num_mel_bins=128,
            max_source_positions=1500,
            max_target_positions=448,
        ),
        1_543_490_560,
    ),
    "stabilityai/stable-diffusion-xl-base-1.0 (unet)": (
        dict(
            _class_name="UNet2DConditionModel",
            block_out_channels=[320, 640, 1280],
            layers_per_block=2,
            cross_attention_dim=2048,
            in_channels=4,
            out_channels=4,
            down_block_types=["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
            transformer_layers_per_block=[1, 2, 10],
            addition_embed_type="text_time",
            projection_class_embeddings_input_dim=2816,
            sample_size=128,
        ),
        2_567_463_684,
    ),
    "black-forest-labs/FLUX.1-dev (transformer)": (
        dict(
            _class_name="FluxTransformer2DModel",
            num_layers=19,
            num_single_layers=38,
            attention_head_dim=128,
            num_attention_heads=24,
            joint_attention_dim=4096,
            pooled_projection_dim=768,
            in_channels=64,
            guidance_embeds=True,
            patch_size=1,
        ),
        11_901_408_320,
    ),
    "stabilityai/stable-diffusion-3-medium-diffusers (transformer)": (
        dict(
            _class_name="SD3Transformer2DModel",
            sample_size=128,
            patch_size=2,
            in_channels=16,
            num_layers=24,
            attention_head_dim=64,
            num_attention_heads=24,
            joint_attention_dim=4096,
            caption_projection_dim=1536,
            pooled_projection_dim=2048,
            out_channels=16,
        ),
        2_028_328_000,
    ),
    "google-bert/bert-base-uncased": (
        dict(
            model_type="bert",
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            vocab_size=30522,
            max_position_embeddings=512,
            type_vocab_size=2,
        ),
        109_482_240,
    ),
    "google-t5/t5-small": (
        dict(model_type="t5", d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8, vocab_size=32128),
        60_506_624,
    ),
    "openai-community/gpt2": (
        dict(model_type="gpt2", n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024),
        124_439_808,
    ),
    "meta-llama/Llama-2-7b-hf": (
        dict(
            model_type="llama",
            hidden_size=4096,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=32,
            intermediate_size=11008,
            vocab_size=32000,
            tie_word_embeddings=False,
        ),
        6_738_415_616,
    ),
    "Qwen/Qwen2.5-7B": (
        dict(
            model_type="qwen2",
            hidden_size=3584,
            num_hidden_layers=28,
            num_attention_heads=28,
            num_key_value_heads=4,
            intermediate_size=18944,
            vocab_size=152064,
            tie_word_embeddings=False,
        ),
        7_615_616_512,
    ),
    "microsoft/resnet-50": (
        dict(
            model_type="resnet",
            depths=[3, 4, 6, 3],
            layer_type="bottleneck",
            id2label={str(i): str(i) for i in range(1000)},
        ),
        25_557_032,
    ),
}


@pytest.mark.parametrize("name", sorted(HF))
def test_exact_count_from_published_config(name):
    config, total = HF[name]
    found = db.model_from_hf_config(config, name=name)
    assert found is not None
    assert found.params == total
    assert found.key == name and found.source == "config.json"


def test_moe_active_parameters_from_config():
    qwen = db.model_from_hf_config(HF["Qwen/Qwen3-30B-A3B"][0])
    assert 3.3e9 < qwen.breakdown.active < 3.4e9  # "30.5B total, 3.3B activated"
    scout = db.model_from_hf_config(HF["meta-llama/Llama-4-Scout-17B-16E (text model)"][0])
    assert round(scout.breakdown.active / 1e9) == 17
    deepseek = db.model_from_hf_config(HF["deepseek-ai/DeepSeek-V3"][0])
    assert 37e9 < deepseek.breakdown.active < 38e9  # "37B activated" (ours includes the embedding)
    assert "mla" in deepseek.capabilities and "moe" in deepseek.capabilities


def test_capabilities_follow_the_config():
    qwen = db.model_from_hf_config(HF["Qwen/Qwen3-8B"][0])
    assert {"gated-mlp", "qk-norm", "gqa"} <= qwen.capabilities
    gpt2 = db.model_from_hf_config(HF["openai-community/gpt2"][0])
    assert "gated-mlp" not in gpt2.capabilities


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"model_type": "mamba"},
        {"model_type": "llama"},  # incomplete
        {"model_type": "llama", "hidden_size": "4096"},
        dict(HF["meta-llama/Llama-2-7b-hf"][0], num_hidden_layers=10**12),
        dict(HF["meta-llama/Llama-2-7b-hf"][0], hidden_size=10**400),
        dict(HF["meta-llama/Llama-2-7b-hf"][0], num_attention_heads=0),
        dict(HF["meta-llama/Llama-2-7b-hf"][0], hidden_size=-5),
        dict(HF["meta-llama/Llama-2-7b-hf"][0], hidden_size=float("nan")),
        "not a dict",
    ],
)
def test_unknown_or_hostile_configs_are_none(config):
    assert db.model_from_hf_config(config) is None


def test_load_from_a_file_and_from_a_snapshot_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(HF["Qwen/Qwen3-8B"][0]), encoding="utf-8")
    found = db.load_hf_config(str(tmp_path / "config.json"), name="Qwen/Qwen3-8B")
    assert found.params == 8_190_735_360 and "config.json at" in found.source
    assert db.load_hf_config(str(tmp_path)).params == 8_190_735_360
    flux = tmp_path / "flux"
    (flux / "transformer").mkdir(parents=True)
    (flux / "transformer" / "config.json").write_text(
        json.dumps(HF["black-forest-labs/FLUX.1-dev (transformer)"][0]), encoding="utf-8"
    )
    assert db.load_hf_config(str(flux)).params == 11_901_408_320
    (tmp_path / "bad.json").write_bytes(b"\xff\xfe{")
    assert db.load_hf_config(str(tmp_path / "bad.json")) is None
    assert db.load_hf_config(str(tmp_path / "missing.json")) is None


def test_a_config_model_estimates_like_the_built_in_one():
    from vram_estimator.reading.config_comments import Value
    from vram_estimator.costs.estimate import estimate

    from_config = db.model_from_hf_config(HF["meta-llama/Llama-2-7b-hf"][0], name="meta-llama/Llama-2-7b-hf")
    target = db.resolve_target("a100-80gb")
    common = dict(
        batch=Value(1, "t"),
        seq=Value(512, "t"),
        precision=Value("bf16-mixed", "t"),
        optimizer=Value("adamw", "t"),
        mode=Value("train", "t"),
    )
    a = estimate(dict(common, model=Value(from_config, "config.json")), target)
    b = estimate(dict(common, model=Value("llama-2-7b", "t")), target)
    assert a.point == pytest.approx(b.point) and a.params_total == b.params_total


def test_every_family_is_reachable_from_a_config_or_the_table():
    table_families = {e["family"] for e in db.models().values()}
    for name, fam in all_families().items():
        assert fam.hf_types or name in table_families, name
