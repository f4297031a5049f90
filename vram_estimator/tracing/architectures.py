"""Which transformers classes a traced estimate builds for each family, and how our stored
configuration (``db.Model.config``, our key names) becomes that class's config.

Torch-free: a table, read by :mod:`.runner` (which imports transformers) and by the static side
to say in one line that a family cannot be traced before anything is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

# our key -> the transformers config keyword, for the decoders that share Llama's config names
_GATED = {
    "vocab": "vocab_size",
    "hidden": "hidden_size",
    "ff": "intermediate_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "tied": "tie_word_embeddings",
    "head_dim": "head_dim",
    "experts": "num_local_experts",
    "experts_active": "num_experts_per_tok",
}
_QWEN3_MOE = dict(
    _GATED, experts="num_experts", moe_ff="moe_intermediate_size", ff="intermediate_size"
)
_NEOX = {
    "hidden": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "vocab": "vocab_size",
    "ff": "intermediate_size",
}
_OPT = {
    "hidden": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "ff": "ffn_dim",
    "vocab": "vocab_size",
    "positions": "max_position_embeddings",
}
_PHI = {
    "hidden": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "ff": "intermediate_size",
    "vocab": "vocab_size",
}
_GPT2 = {
    "hidden": "n_embd",
    "layers": "n_layer",
    "heads": "n_head",
    "vocab": "vocab_size",
    "positions": "n_positions",
}
_FALCON = {k: v for k, v in _NEOX.items() if k != "ff"}
_BERT = dict(_NEOX, positions="max_position_embeddings", type_vocab="type_vocab_size")


@dataclass(frozen=True)
class Build:
    """A family's transformers classes and config keywords."""

    config_class: str
    model_class: str
    keys: Dict[str, str]
    fixed: Dict[str, Any] = field(default_factory=dict)  # keywords the family's published configs set
    # (keyword, our key, factor): keyword = factor x key, where the config does not set it
    derived: Tuple[Tuple[str, str, float], ...] = ()
    labels: str = "tokens"  # what the step's loss takes: "tokens" (a language model), "class"

    def kwargs(self, config: Dict[str, Any]) -> Dict[str, Any]:
        """The config class's keywords for one of our stored configurations."""
        out = {self.keys[k]: v for k, v in config.items() if k in self.keys}
        if "num_key_value_heads" in self.keys.values() and "kv_heads" not in config and "heads" in config:
            out["num_key_value_heads"] = config["heads"]
        for keyword, key, factor in self.derived:
            if key in config and keyword not in out:
                out[keyword] = int(factor * config[key])
        out.update(self.fixed)
        return out


def _gated(name: str, **fixed: Any) -> Build:
    return Build(f"{name}Config", f"{name}ForCausalLM", _GATED, fixed)


# family (vram_estimator/knowledge/families) -> how transformers builds it.  Dropout and layer
# drop are the config classes' own defaults unless a family's published configs differ.
BUILDS: Dict[str, Build] = {
    "llama": _gated("Llama"),
    "mistral": _gated("Mistral"),
    "mixtral": _gated("Mixtral"),
    "qwen2": _gated("Qwen2"),
    "qwen3": _gated("Qwen3"),
    "qwen3_moe": Build("Qwen3MoeConfig", "Qwen3MoeForCausalLM", _QWEN3_MOE, {"mlp_only_layers": []}),
    "gemma": _gated("Gemma"),
    "gemma2": _gated("Gemma2"),
    "phi3": _gated("Phi3"),
    "smollm3": _gated("SmolLM3"),
    "neox": Build(
        "GPTNeoXConfig", "GPTNeoXForCausalLM", _NEOX, {"tie_word_embeddings": False},
        (("intermediate_size", "hidden", 4.0),),
    ),
    "opt": Build(
        "OPTConfig", "OPTForCausalLM", _OPT, {"layerdrop": 0.0}, (("word_embed_proj_dim", "hidden", 1.0),)
    ),
    "phi": Build("PhiConfig", "PhiForCausalLM", _PHI, {"partial_rotary_factor": 0.4, "resid_pdrop": 0.1}),
    "gpt2": Build("GPT2Config", "GPT2LMHeadModel", _GPT2),
    "falcon": Build(
        "FalconConfig",
        "FalconForCausalLM",
        _FALCON,
        {"multi_query": True, "parallel_attn": True, "new_decoder_architecture": False, "bias": False},
    ),
    # encoders train with a task head: sequence classification, the Hugging Face fine-tuning default
    "bert": Build("BertConfig", "BertForSequenceClassification", _BERT, labels="class"),
}


def build_for(family_name: str) -> Optional[Build]:
    return BUILDS.get(family_name)


def traceable_families() -> Tuple[str, ...]:
    return tuple(sorted(BUILDS))
