"""Typed records of the model side: a family's entry, its parameter breakdown, its dimensions.

A :class:`Family` is one registry entry: how to count a configuration's parameters exactly
(``count``), which transformer dimensions the memory terms use (``dims``), the kind of
activation model (``kind``: decoder, encoder, encdec, vit, clip, cnn, unet, dit), the measured
activation coefficient set (``style``), the Hugging Face ``model_type`` values it reads, and its
capabilities (gated MLP, MoE, MLA, GQA, ...).  Everything model-specific that the cost model asks
lives here or in the family modules (``vram_estimator/knowledge/families/``), never in an if-chain on a
family name.

The family modules fill :data:`FAMILIES` through :func:`register` when they are imported; the
lookups (``family``, ``all_families``) are :mod:`vram_estimator.knowledge.families`', which imports them
all first, so this module imports no family.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Optional, Tuple

# roles of a block linear, by the input autograd would save for its weight gradient
QKV, OUT, UP, DOWN, OTHER = "qkv", "o", "up", "down", "other"


@dataclass(frozen=True)
class Linear:
    """One linear layer of a block: what LoRA can target and what autograd saves for it."""

    name: str
    fan_in: int
    fan_out: int
    role: str = OTHER


@dataclass(frozen=True)
class Breakdown:
    """Exact parameter counts of one configuration, split the way the memory terms need.

    ``embed``: input embedding tables (never quantised, not cast by autocast); ``head``: an
    untied output projection or classifier; ``linear``: block linear weights (what int8/nf4
    quantise); ``cast``: weights autocast casts to half precision in a forward pass (block
    linears, the LM head matrix even when tied, convolutions); ``active``: parameters touched per
    token (less than ``total`` only for MoE); ``lora_targets``: one block's linears;
    ``default_lora``: PEFT's default target names for the family.
    """

    total: int
    embed: int = 0
    head: int = 0
    linear: int = 0
    cast: int = 0
    active: int = 0
    lora_targets: Tuple[Linear, ...] = ()
    default_lora: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.active:
            object.__setattr__(self, "active", self.total)

    def scaled(self, total: int) -> "Breakdown":
        """The same split for a model of ``total`` parameters (a ``params=`` stand-in)."""
        k = total / self.total if self.total else 1.0
        return Breakdown(
            total=int(total),
            embed=int(self.embed * k),
            head=int(self.head * k),
            linear=int(self.linear * k),
            cast=int(self.cast * k),
            active=int(total),
            lora_targets=self.lora_targets,
            default_lora=self.default_lora,
        )


@dataclass(frozen=True)
class Dims:
    """Transformer dimensions the activation, logits and KV-cache terms use (0 where none)."""

    hidden: int = 0
    heads: int = 1
    head_dim: int = 0
    kv_heads: int = 1
    ff: int = 0
    layers: int = 0
    dec_layers: int = 0
    vocab: int = 0
    experts_active: int = 1
    kv_cache_dim: int = 0  # per token per layer per K or V; MLA caches its compressed latent
    patch: int = 0
    image: int = 0
    text_tokens: int = 0

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim


@dataclass(frozen=True)
class Family:
    """One registry entry: an architecture family and everything the cost model asks of it."""

    name: str
    kind: str
    count: Callable[[Dict[str, Any]], Breakdown]
    dims: Callable[[Dict[str, Any]], Dims]
    style: Optional[str] = None  # activation coefficient set in data/coefficients.json
    hf_types: Tuple[str, ...] = ()
    hf_reader: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None
    capabilities: FrozenSet[str] = field(default_factory=frozenset)
    default_attention: str = "sdpa"
    default_seq: int = 2048
    summary: str = ""

    def capabilities_of(self, config: Dict[str, Any]) -> FrozenSet[str]:
        """The family's capabilities plus those a configuration adds (GQA, MoE, tied head)."""
        caps = set(self.capabilities)
        heads, kv = config.get("heads"), config.get("kv_heads")
        if heads and kv and kv < heads:
            caps.add("gqa" if kv > 1 else "mqa")
        if config.get("experts", 1) > 1:
            caps.add("moe")
        if config.get("kv_lora"):
            caps.add("mla")
        if config.get("tied"):
            caps.add("tied-head")
        return frozenset(caps)


# What a kind of model has, for the memory terms and the remedies: attention kernels to swap,
# adapters to train instead of the weights, bitsandbytes-quantisable linears, bf16 weights;
# a text sequence (its length can be guessed), an LM head (logits, generation with a KV cache),
# a second (decoder) stack with its own length.
_TRANSFORMER = frozenset({"attention", "lora", "half-weights"})
KIND_TRAITS: Dict[str, FrozenSet[str]] = {
    "decoder": _TRANSFORMER | {"quantisable", "text-tokens", "lm-head"},
    "encoder": _TRANSFORMER | {"quantisable", "text-tokens"},
    "encdec": _TRANSFORMER | {"quantisable", "text-tokens", "lm-head", "two-stacks"},
    "vit": _TRANSFORMER,
    "clip": _TRANSFORMER,
    "dit": _TRANSFORMER,
    "cnn": frozenset(),
    "unet": frozenset({"lora"}),
}

FAMILIES: Dict[str, Family] = {}


def register(family: Family) -> Family:
    if family.name in FAMILIES:
        raise ValueError(f"family {family.name!r} registered twice")
    FAMILIES[family.name] = family
    return family
