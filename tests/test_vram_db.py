"""Model and GPU databases: exact parameter counts, aliases, GPUs and cloud instances."""

import importlib.util

import pytest

from vram_estimator.knowledge import db

PUBLISHED = {  # a few counts quoted in the brief, independent of models.json
    "gpt2": 124_439_808,
    "llama-2-7b": 6_738_415_616,
    "llama-3-8b": 8_030_261_248,
    "bert-base-uncased": 109_482_240,
    "resnet50": 25_557_032,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
}


def test_at_least_41_architectures_across_families():
    models = db.models()
    assert len(models) >= 41
    families = {e["family"] for e in models.values()}
    assert {
        "llama",
        "gpt2",
        "bert",
        "distilbert",
        "t5",
        "bart",
        "whisper",
        "vit",
        "resnet",
        "convnext",
        "efficientnet",
        "clip",
        "unet2d",
        "phi",
        "falcon",
        "opt",
        "neox",
    } <= families
    for needed in (
        "gemma-2b",
        "gemma-2-9b",
        "phi-2",
        "phi-3-mini",
        "qwen2-7b",
        "qwen2.5-7b",
        "tinyllama-1.1b",
        "llama-3.1-8b",
        "llama-3.2-1b",
        "pythia-1b",
        "opt-125m",
        "falcon-7b",
        "roberta-base",
        "distilbert-base-uncased",
        "t5-small",
        "bart-base",
        "whisper-small",
        "sd15-unet",
    ):
        assert needed in models


@pytest.mark.parametrize("key", sorted(db.models()))
def test_count_recomputed_from_published_config(key):
    entry = db.model_entry(key)
    assert db.param_breakdown(entry["family"], entry["config"]).total == entry["params"]


@pytest.mark.parametrize("key,count", sorted(PUBLISHED.items()))
def test_brief_counts(key, count):
    assert db.count_params(key) == count


def test_mixtral_active_parameters_are_two_experts():
    entry = db.model_entry("mixtral-8x7b")
    bd = db.param_breakdown(entry["family"], entry["config"])
    mlp = 3 * 4096 * 14336
    assert bd.total - bd.active == 32 * 6 * mlp
    assert 12.8e9 < bd.active < 13.0e9


def test_tied_embeddings_count_once():
    tied = db.param_breakdown("llama", dict(db.model_entry("llama-3.2-1b")["config"]))
    untied = db.param_breakdown("llama", dict(db.model_entry("llama-3.2-1b")["config"], tied=False))
    assert untied.total - tied.total == 128256 * 2048


@pytest.mark.parametrize(
    "name,key",
    [
        ("meta-llama/Llama-2-7b-hf", "llama-2-7b"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
        ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("google/gemma-2-9b-it", "gemma-2-9b"),
        ("bert-base-uncased", "bert-base-uncased"),
        ("Llama-3-8B", "llama-3-8b"),
        ("openai/whisper-small", "whisper-small"),
        ("resnet50", "resnet50"),
        ("vit_b_16", "vit-b-16"),
        ("runwayml/stable-diffusion-v1-5", "sd15-unet"),
        ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "tinyllama-1.1b"),
    ],
)
def test_hugging_face_aliases(name, key):
    assert db.find_model(name) == key


def test_unknown_model_is_none():
    assert db.find_model("acme/secret-model-9000") is None


def test_gpu_database():
    gpus = db.gpus()
    assert len(gpus) >= 23
    for name in (
        "h100-sxm",
        "h100-pcie",
        "h100-nvl",
        "h200",
        "b200",
        "a100-40gb",
        "a100-80gb",
        "l4",
        "l40s",
        "a10g",
        "t4",
        "v100-16gb",
        "v100-32gb",
        "rtx3090",
        "rtx4090",
        "rtx5090",
        "rtx-a6000",
        "rtx6000-ada",
        "mi250x",
        "mi300x",
    ):
        assert name in gpus
        assert gpus[name]["memory_mib"] > 8000
    assert gpus["t4"]["bf16"] is False and gpus["v100-16gb"]["bf16"] is False
    assert gpus["a100-80gb"]["bf16"] is True
    assert gpus["h100-sxm"]["memory_mib"] < 81920  # as the device reports it, below the marketing 80 GB


def test_instances_give_world_size():
    inst = db.instances()
    assert len(inst) >= 34
    assert {i["cloud"] for i in inst.values()} >= {"aws", "gcp", "azure", "lambda"}
    for i in inst.values():
        assert i["gpu"] in db.gpus()
    t = db.resolve_target("p4de.24xlarge")
    assert t["gpu"] == "a100-80gb" and t["count"] == 8


@pytest.mark.parametrize(
    "text,count,gib",
    [
        ("8xa100-80gb", 8, 80.0),
        ("48GiB", 1, 48.0),
        ("rtx4090", 1, 23.98),
        ("Standard_ND96isr_H100_v5", 8, 79.65),
    ],
)
def test_resolve_target(text, count, gib):
    t = db.resolve_target(text)
    assert t["count"] == count
    assert abs(t["memory_bytes"] / 1024**3 - gib) < 0.05


def test_unresolvable_targets():
    for text in ("", "a100-90gb", "0GiB", "8xfoo"):
        assert db.resolve_target(text) is None


@pytest.mark.parametrize(
    "text,why",
    [
        ("0xa100-80gb", "count of '0'"),
        ("00008xa100-80gb", "no leading zeros"),
        ("2x2xa100-80gb", "nested"),
        ("2x2x2x2x2x2x2x2x2x2x2x2x2x2x2x2x2x2x2x2xa100", "nested"),
        ("9" * 400 + "xa100-80gb", "characters"),
        ("9" * 60 + "xa100-80gb", "1 to 4096"),
        ("5000xa100-80gb", "1 to 4096"),
        ("2xp4de.24xlarge", "instances"),
        ("9" * 7 + "TiB", "64 TiB"),
        ("0.0GiB", "more than 0"),
        ("h100-sxm" * 20, "characters"),
    ],
)
def test_hostile_targets_are_rejected_with_a_reason(text, why):
    target, reason = db.parse_target(text)
    assert target is None
    assert why in reason
    assert db.resolve_target(text) is None and db.target_problem(text) == reason


def test_counts_and_capacities_that_are_fine():
    assert db.resolve_target("4096xh100")["count"] == 4096
    assert db.resolve_target("1.5TiB")["memory_bytes"] == int(1.5 * 1024**4)
    assert db.target_problem("8xa100-80gb") is None


@pytest.mark.parametrize("text", ["9" * 400, "1e400", "9" * 17, "0", "-3", "7Q", "inf", "nan"])
def test_params_text_is_bounded(text):
    assert db.parse_params(text) is None


def test_params_text_parses():
    assert db.parse_params("7B") == 7 * 10**9
    assert db.parse_params("1.5b") == 1_500_000_000
    assert db.parse_params("1000T") == 10**15


HF = importlib.util.find_spec("transformers") is not None and importlib.util.find_spec("torch") is not None


def hf_model(key):
    """Build the real Hugging Face class for ``key`` on the meta device from our stored config."""
    import torch
    import transformers as tf

    e = db.model_entry(key)
    c, fam, cls = e["config"], e["family"], e.get("hf_class")
    if fam in ("llama", "mistral", "mixtral", "qwen2", "gemma", "gemma2", "phi3"):
        name = cls.replace("ForCausalLM", "Config")
        kw = dict(
            vocab_size=c["vocab"],
            hidden_size=c["hidden"],
            intermediate_size=c["ff"],
            num_hidden_layers=c["layers"],
            num_attention_heads=c["heads"],
            num_key_value_heads=c.get("kv_heads", c["heads"]),
            tie_word_embeddings=c.get("tied", False),
        )
        if "head_dim" in c:
            kw["head_dim"] = c["head_dim"]
        if c.get("experts"):
            kw.update(num_local_experts=c["experts"], num_experts_per_tok=c["experts_active"])
        config = getattr(tf, name)(**kw)
    elif fam == "gpt2":
        config = tf.GPT2Config(
            n_embd=c["hidden"],
            n_layer=c["layers"],
            n_head=c["heads"],
            vocab_size=c["vocab"],
            n_positions=c["positions"],
        )
    elif fam == "neox":
        config = tf.GPTNeoXConfig(
            hidden_size=c["hidden"],
            num_hidden_layers=c["layers"],
            num_attention_heads=c["heads"],
            intermediate_size=4 * c["hidden"],
            vocab_size=c["vocab"],
            tie_word_embeddings=False,
        )
    elif fam == "opt":
        config = tf.OPTConfig(
            hidden_size=c["hidden"],
            num_hidden_layers=c["layers"],
            ffn_dim=c["ff"],
            num_attention_heads=c["heads"],
            vocab_size=c["vocab"],
            max_position_embeddings=c["positions"],
            word_embed_proj_dim=c["hidden"],
        )
    elif fam == "phi":
        config = tf.PhiConfig(
            hidden_size=c["hidden"],
            intermediate_size=c["ff"],
            num_hidden_layers=c["layers"],
            num_attention_heads=c["heads"],
            vocab_size=c["vocab"],
        )
    elif fam == "falcon":
        config = tf.FalconConfig(
            hidden_size=c["hidden"],
            num_hidden_layers=c["layers"],
            num_attention_heads=c["heads"],
            vocab_size=c["vocab"],
            multi_query=True,
            parallel_attn=True,
            new_decoder_architecture=False,
            bias=False,
        )
    elif fam == "bert":
        klass = tf.RobertaConfig if "Roberta" in cls else tf.BertConfig
        config = klass(
            hidden_size=c["hidden"],
            num_hidden_layers=c["layers"],
            num_attention_heads=c["heads"],
            intermediate_size=c["ff"],
            vocab_size=c["vocab"],
            max_position_embeddings=c["positions"],
            type_vocab_size=c["type_vocab"],
        )
    elif fam == "distilbert":
        config = tf.DistilBertConfig(
            dim=c["hidden"],
            n_layers=c["layers"],
            n_heads=c["heads"],
            hidden_dim=c["ff"],
            vocab_size=c["vocab"],
            max_position_embeddings=c["positions"],
        )
    elif fam == "t5":
        config = tf.T5Config(
            d_model=c["hidden"],
            d_kv=c["d_kv"],
            d_ff=c["ff"],
            num_layers=c["layers"],
            num_decoder_layers=c["dec_layers"],
            num_heads=c["heads"],
            vocab_size=c["vocab"],
            feed_forward_proj="relu",
            tie_word_embeddings=True,
        )
    elif fam in ("bart", "whisper"):
        kw = dict(
            d_model=c["hidden"],
            encoder_layers=c["layers"],
            decoder_layers=c["dec_layers"],
            encoder_ffn_dim=c["ff"],
            decoder_ffn_dim=c["ff"],
            encoder_attention_heads=c["heads"],
            decoder_attention_heads=c["heads"],
            vocab_size=c["vocab"],
        )
        if fam == "bart":
            config = tf.BartConfig(max_position_embeddings=c["positions"], **kw)
        else:
            config = tf.WhisperConfig(
                num_mel_bins=c["mels"],
                max_source_positions=c["source_positions"],
                max_target_positions=c["target_positions"],
                **kw,
            )
    elif fam == "clip":
        t, v = c["text"], c["vision"]
        config = tf.CLIPConfig(
            text_config=dict(
                hidden_size=t["hidden"],
                num_hidden_layers=t["layers"],
                num_attention_heads=t["heads"],
                intermediate_size=t["ff"],
                vocab_size=t["vocab"],
                max_position_embeddings=t["positions"],
            ),
            vision_config=dict(
                hidden_size=v["hidden"],
                num_hidden_layers=v["layers"],
                num_attention_heads=v["heads"],
                intermediate_size=v["ff"],
                patch_size=v["patch"],
                image_size=v["image"],
            ),
            projection_dim=c["projection_dim"],
        )
    elif fam == "vit":
        config = tf.ViTConfig(
            hidden_size=c["hidden"],
            num_hidden_layers=c["layers"],
            num_attention_heads=c["heads"],
            intermediate_size=c["ff"],
            patch_size=c["patch"],
            image_size=c["image"],
            num_labels=c["classes"],
        )
        cls = "ViTForImageClassification"
    elif fam == "resnet":
        depths = c["stages"]
        bottleneck = c["block"] == "bottleneck"
        config = tf.ResNetConfig(
            depths=depths,
            layer_type="bottleneck" if bottleneck else "basic",
            hidden_sizes=[256, 512, 1024, 2048] if bottleneck else [64, 128, 256, 512],
            num_labels=c["classes"],
            downsample_in_bottleneck=False,
        )
        cls = "ResNetForImageClassification"
    elif fam == "convnext":
        config = tf.ConvNextConfig(hidden_sizes=c["dims"], depths=c["depths"], num_labels=c["classes"])
        cls = "ConvNextForImageClassification"
    else:
        raise NotImplementedError(fam)
    with torch.device("meta"):
        return getattr(tf, cls)(config)


@pytest.mark.skipif(not HF, reason="needs transformers and torch")
@pytest.mark.parametrize(
    "key",
    [
        k
        for k, e in sorted(db.models().items())
        if e.get("hf_class") and e["family"] not in ("efficientnet", "unet2d")
    ],
)
def test_real_class_on_meta_device(key):
    model = hf_model(key)
    assert sum(p.numel() for p in model.parameters()) == db.count_params(key)
