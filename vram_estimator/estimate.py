"""The cost model: resolved settings -> a per-term breakdown, an interval, and a verdict.

::

    peak = weights + gradients + optimizer state + fp32 master copy + autocast weight cache
         + activations (+ logits buffer) + KV cache (generate) + sharding buffers
         + allocator fragmentation
    usable = device memory - CUDA/HIP context - allocator reserve (2 % of the card)

Every term is a triple ``(lower, point, upper)`` in bytes; the interval is the sum of the
triples.  A term's spread comes from what was guessed: exact for weights of a known model,
about +-10 % for a calibrated activation family, wider for unmeasured families, for an unknown
model (``params=``) and for inputs that fell back to defaults (batch, seq, optimizer).

Activations are ``bytes per token per layer`` times tokens times layers, with coefficients in
``data/coefficients.json`` fitted to saved-tensor measurements (see ``calibration/``):

    per_layer = c_h*h + c_ff*ff + c_q*q_dim + (eager: c_s*heads*s | sdpa/flash: c_sq*q_dim)

Under checkpointing only each block's input is stored (``c_ckpt*h`` per layer) and one block is
recomputed at a time (its full activations are added once).  MoE blocks route each token to
``experts_active`` experts, so their MLP term is multiplied by that.  See docs/vram.md.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Dict, List, Optional, Tuple

from . import db
from .registry import family as _family
from .config_comments import Value

GIB = 1024**3
MIB = 1024**2


@lru_cache(maxsize=None)
def coefficients() -> Dict[str, Any]:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "coefficients.json")
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


@dataclass
class Term:
    name: str
    lower: float
    point: float
    upper: float
    note: str = ""

    def scaled(self, lo: float, hi: float) -> "Term":
        return Term(self.name, self.lower * lo, self.point, self.upper * hi, self.note)


@dataclass
class Estimate:
    """One projection: its terms, interval, target capacity and verdict."""

    terms: List[Term]
    settings: Dict[str, Value]
    target: Optional[Dict[str, Any]]
    capacity: float = 0.0
    context: float = 0.0
    reserve: float = 0.0
    notes: List[str] = field(default_factory=list)
    params_total: int = 0
    params_trainable: int = 0

    @property
    def lower(self) -> float:
        return sum(t.lower for t in self.terms)

    @property
    def point(self) -> float:
        return sum(t.point for t in self.terms)

    @property
    def upper(self) -> float:
        return sum(t.upper for t in self.terms)

    @property
    def usable(self) -> float:
        return max(0.0, self.capacity - self.context - self.reserve)

    @property
    def verdict(self) -> Optional[str]:
        """``fits`` (upper within usable), ``tight`` (the interval straddles usable), ``oom``
        (even the lower bound exceeds); None without a target."""
        if not self.target:
            return None
        if self.upper <= self.usable:
            return "fits"
        if self.lower > self.usable:
            return "oom"
        return "tight"

    def term(self, name: str) -> Optional[Term]:
        for t in self.terms:
            if t.name == name:
                return t
        return None

    def get(self, key: str, default: Any = None) -> Any:
        v = self.settings.get(key)
        return v.value if v is not None else default


# --------------------------------------------------------------------------- helpers

HALF = ("bf16", "fp16", "int8", "nf4")
MIXED = ("bf16-mixed", "fp16-mixed")


def precision_class(precision: str) -> str:
    """Which activation coefficient set applies: fp32, mixed (autocast over fp32 weights), half."""
    if precision in MIXED:
        return "mixed"
    if precision in HALF:
        return "half"
    return "fp32"


def optimizer_bytes(optimizer: str, state_bytes: int, hidden: int) -> float:
    """Optimizer state bytes per trainable parameter."""
    if optimizer in ("adamw", "adam", "paged-adamw"):
        return 2.0 * state_bytes
    if optimizer in ("adamw-8bit", "paged-adamw-8bit"):
        return 2.0 + 8.0 / 2048  # two uint8 states + one fp32 absmax per 2048-value block each
    if optimizer == "lion":
        return float(state_bytes)
    if optimizer == "lion-8bit":
        return 1.0
    if optimizer == "sgd-momentum":
        return float(state_bytes)
    if optimizer == "adafactor":
        return 4.0 * 2.0 / max(hidden, 64)  # factored second moment: a row and a column per matrix
    return 0.0


def lora_trainable(bd: Dict[str, Any], layers: int, rank: int, targets: Optional[Tuple[str, ...]]) -> int:
    """LoRA adds ``r * (in + out)`` per targeted linear per block."""
    chosen = bd["lora_targets"]
    if targets and targets != ("all-linear",):
        names = {t.lower() for t in targets}
        chosen = [t for t in chosen if t[0].lower() in names or t[0].split(".")[-1].lower() in names]
    elif not targets:
        default = set(bd.get("default_lora", ()))
        chosen = [t for t in chosen if t[0] in default]
    return int(layers * sum(rank * (i + o) for _, i, o in chosen)), len(chosen)


def _shape(
    model_key: Optional[str], params: Optional[int]
) -> Tuple[str, Dict[str, Any], Dict[str, Any], bool]:
    """family, config, param breakdown, exact? for a known model or a ``params=`` stand-in."""
    m = db.spec(model_key) if model_key else db.generic_decoder(params or 1)
    b = m.breakdown
    bd = dict(total=b.total, embed=b.embed, head=b.head, linear=b.linear, active=b.active,
              lora_targets=[(t.name, t.fan_in, t.fan_out) for t in b.lora_targets], default_lora=b.default_lora)
    return m.family.name, m.config, bd, bool(model_key)


def _dims(family: str, c: Dict[str, Any]) -> Dict[str, Any]:
    """Transformer dimensions used by the activation and KV terms."""
    if family == "clip":
        c = c["vision"]
    d = c.get("hidden", 0)
    heads = c.get("heads", max(1, d // 64) if d else 1)
    hd = c.get("head_dim", d // heads if heads else 0)
    kv = c.get("kv_heads", 1 if family == "falcon" else heads)
    ff = c.get("ff", 4 * d)
    return dict(
        h=d,
        heads=heads,
        hd=hd,
        q=heads * hd,
        kv=kv * hd,
        kv_heads=kv,
        ff=ff,
        layers=c.get("layers", 0),
        dec_layers=c.get("dec_layers", c.get("layers", 0)),
        vocab=c.get("vocab", 0),
    )


def _layer_bytes(co: Dict[str, float], dims: Dict[str, Any], s: int, attention: str, moe_k: int = 1) -> float:
    """Saved bytes per token for one block."""
    per = co["h"] * dims["h"] + co["ff"] * dims["ff"] * moe_k + co.get("q", 0.0) * dims["q"]
    if attention == "eager":
        per += co["s"] * dims["heads"] * s + co.get("eq", 0.0) * dims["q"]
    else:
        per += co.get("sq", 0.0) * dims["q"]
    return per


def inference_workspace(
    family: str, config: Dict[str, Any], batch: int, seq: int, image: int, precision: str, attention: str
) -> Optional[float]:
    """Transient bytes of one block under no_grad: nothing is kept for backward, so the peak is
    the block input, q/k/v/attention output, the MLP intermediates (3 ff-wide tensors for a gated
    MLP, 2 otherwise) and, under eager attention, the score matrix in fp32 plus its half copy."""
    kind = _family(family).kind
    if kind not in ("decoder", "encoder", "encdec", "vit", "clip"):
        return None
    dims = _dims(family, config)
    if kind in ("vit", "clip"):
        vc = config["vision"] if kind == "clip" else config
        seq = (image // vc["patch"]) ** 2 + 1
    ab = 4 if precision_class(precision) == "fp32" else 2
    gated = _family(family).style == "decoder_gated"
    moe_k = config.get("experts_active", 1) if config.get("experts", 1) > 1 else 1
    per = ab * (3 * dims["h"] + (3 if gated else 2) * dims["ff"] * moe_k + 2 * dims["q"] + 2 * dims["kv"])
    if attention == "eager":
        per += (4 + ab) * dims["heads"] * seq
    return per * batch * seq


def activation_bytes(
    family: str,
    config: Dict[str, Any],
    model_key: Optional[str],
    batch: int,
    seq: int,
    image: int,
    precision: str,
    attention: str,
    checkpointing: bool,
    train: bool,
    dec_seq: Optional[int] = None,
) -> Tuple[float, float, str, bool]:
    """Stored activations and the recompute peak for one training step.

    Returns ``(stored, recompute, note, measured)`` in bytes.  For inference (no grad) callers use
    the recompute value alone: a block's activations live only while it runs.
    """
    co_all = coefficients()
    pc = precision_class(precision)
    kind = _family(family).kind
    dims = _dims(family, config)
    resid = 2 if pc == "half" else 4

    def stack(
        style: str, n_layers: int, tokens: int, s: int, extra_per_token: float = 0.0
    ) -> Tuple[float, float]:
        co = co_all["transformer"][style][pc]
        moe_k = config.get("experts_active", 1) if config.get("experts", 1) > 1 else 1
        per_layer = _layer_bytes(co, dims, s, attention, moe_k) + extra_per_token
        full = n_layers * per_layer * tokens
        if checkpointing:
            ss = co.get("ckpt_ss", 0.0) + (co.get("eager_ckpt_ss", 0.0) if attention == "eager" else 0.0)
            stored = n_layers * (co.get("ckpt", resid) * dims["h"] + ss * s) * tokens
            stored += (
                co.get("ckpt_final", co.get("final", 0.0)) * dims["h"] + co.get("ckpt_tok", 0.0)
            ) * tokens
            return stored, per_layer * tokens
        return full + (co.get("final", 0.0) * dims["h"] + co.get("tok", 0.0)) * tokens, per_layer * tokens

    if kind == "decoder":
        style = _family(family).style
        tokens = batch * seq
        stored, one = stack(style, dims["layers"], tokens, seq)
        return stored, one, f"{dims['layers']} blocks x {batch}x{seq} tokens", True
    if kind == "encoder":
        tokens = batch * seq
        stored, one = stack("encoder", dims["layers"], tokens, seq)
        return stored, one, f"{dims['layers']} blocks x {batch}x{seq} tokens", True
    if kind == "encdec":
        ds = dec_seq or max(1, min(seq, 128))
        if "encdec" in co_all:  # fitted on BART: per-token terms of each stack, score terms, ckpt
            co = co_all["encdec"][pc]
            h, ff, heads = dims["h"], dims["ff"], dims["heads"]
            Le, Ld, te, td = dims["layers"], dims["dec_layers"], batch * seq, batch * ds
            enc_layer = co["enc_h"] * h + co["enc_ff"] * ff
            dec_layer = co["dec_h"] * h + co["dec_ff"] * ff
            if attention == "eager":
                enc_layer += co.get("enc_s", 0.0) * heads * seq
                dec_layer += co.get("dec_s", 0.0) * heads * ds + co.get("x_s", 0.0) * heads * seq
            one = max(enc_layer * te, dec_layer * td)
            if checkpointing:
                stored = co["ckpt"] * h * (Le * te + Ld * td)
                stored += (co.get("ckpt_tok", 0.0) + co.get("ckpt_final", 0.0) * h) * (te + td)
                return stored, one, "encoder + decoder blocks", True
            stored = Le * te * enc_layer + Ld * td * dec_layer + (co["tok"] + co["final"] * h) * (te + td)
            return stored, one, f"{Le}+{Ld} blocks x {batch}x{seq}/{ds} tokens", True
        enc_stored, enc_one = stack("encoder", dims["layers"], batch * seq, seq)
        co = co_all["transformer"]["encdec_decoder"][pc]
        per_dec = _layer_bytes(co, dims, ds, attention)
        if attention == "eager":
            per_dec += co["s"] * dims["heads"] * seq  # cross-attention probabilities
        cross = co.get("cross", 2 * resid) * dims["h"] * batch * seq  # cross K/V of the encoder output
        dec_full = dims["dec_layers"] * (per_dec * batch * ds + cross)
        one = max(enc_one, per_dec * batch * ds + cross)
        if checkpointing:
            dec_stored = dims["dec_layers"] * co.get("ckpt", resid) * dims["h"] * batch * ds
            return enc_stored + dec_stored, one, "encoder + decoder blocks", False
        return enc_stored + dec_full, one, "encoder + decoder blocks", False
    if kind in ("vit", "clip"):
        vc = config["vision"] if kind == "clip" else config
        n = (image // vc["patch"]) ** 2 + 1
        stored, one = stack("vit", vc["layers"], batch * n, n)
        note = f"{vc['layers']} blocks x {batch}x{n} patches"
        if kind == "clip":
            t = config["text"]
            tdims = _dims("bert", t)
            co = co_all["transformer"]["encoder"][pc]
            per = _layer_bytes(co, tdims, t["positions"], attention) * batch * t["positions"]
            stored += per * (1 if checkpointing else t["layers"])
            note += f" + text {t['layers']} blocks x {batch}x{t['positions']}"
        return stored, one, note, True
    if kind == "cnn":
        table = co_all["cnn"]
        entry = table.get(model_key or "", None)
        measured = entry is not None and str(entry.get("source", "")).startswith("measured")
        if entry is None:
            entry = table["_default_per_param"]
            per_image = entry[pc] * (db.spec(model_key).params if model_key else 25e6)
        else:
            per_image = entry[pc]
        scale = (image / 224.0) ** 2
        stored = per_image * scale * batch
        if checkpointing:  # torch.utils.checkpoint over stages: keep stage inputs, recompute one stage
            return stored * 0.35, stored * 0.25, f"{batch} images at {image}px", measured
        return stored, stored * 0.25, f"{batch} images at {image}px", measured
    if kind == "unet":
        entry = co_all["unet"]
        latent = (image // config.get("latent_factor", 8)) ** 2
        stored = entry[pc] * latent * batch
        if checkpointing:
            return stored * 0.3, stored * 0.15, f"{batch} latents at {image}px", False
        return stored, stored * 0.15, f"{batch} latents at {image}px", False
    raise ValueError(kind)


# --------------------------------------------------------------------------- the model


def setting(settings: Dict[str, Value], key: str, default: Any = None) -> Any:
    v = settings.get(key)
    return v.value if v is not None else default


def is_default(settings: Dict[str, Value], key: str) -> bool:
    v = settings.get(key)
    return v is None or v.source.startswith("default")


def estimate(settings: Dict[str, Value], target: Optional[Dict[str, Any]] = None) -> Estimate:
    """Project the per-device peak for resolved ``settings`` (see :func:`api.resolve`)."""
    model_key = setting(settings, "model")
    params = setting(settings, "params")
    family, config, bd, exact = _shape(model_key, params)
    dims = _dims(family, config)
    kind = _family(family).kind
    mode = setting(settings, "mode", "train")
    train = mode == "train"
    precision = setting(settings, "precision", "fp32")
    pc = precision_class(precision)
    batch = int(setting(settings, "batch", 1))
    seq = int(setting(settings, "seq", 512))
    image = int(setting(settings, "image", config.get("image", 224)))
    world = max(1, int(setting(settings, "world", 1)))
    sharding = setting(settings, "sharding", "ddp" if world > 1 else "none")
    offload = setting(settings, "offload", "none")
    checkpointing = setting(settings, "checkpointing", "off") == "on" and train
    attention = setting(settings, "attention", "sdpa")
    lora = int(setting(settings, "lora", 0) or 0)
    optimizer = setting(settings, "optimizer", "adamw" if train else "none") if train else "none"
    notes: List[str] = []

    total = bd["total"]
    quantised = precision in ("int8", "nf4")
    if quantised and train and not lora:
        lora = 8
        notes.append("quantised weights train only through adapters: assumed LoRA r=8 (PEFT default)")
    terms: List[Term] = []

    # ---- weights
    if precision in ("fp32",) + MIXED:
        w_bytes = 4.0 * total
        wnote = "fp32"
    elif quantised:
        per = 1.0 if precision == "int8" else 0.5 + 1.0 / 64  # nf4 + double-quantised absmax
        q_params = bd["linear"]
        w_bytes = per * q_params + 2.0 * (total - q_params)
        wnote = f"{precision} linear layers, bf16 rest"
    else:
        w_bytes = 2.0 * total
        wnote = precision
    lora_params, n_targets = (0, 0)
    if lora:
        targets = setting(settings, "lora_targets")
        layers = dims["layers"] + (dims["dec_layers"] if kind == "encdec" else 0)
        lora_params, n_targets = lora_trainable(bd, layers or 1, lora, tuple(targets) if targets else None)
        adapter_bytes = 4 if (quantised or pc != "half") else 2
        w_bytes += adapter_bytes * lora_params
        wnote += f" + LoRA r={lora} ({lora_params / 1e6:.1f}M)"
    trainable = (lora_params if lora else total) if train else 0

    # ---- sharding of weights
    shard_w = sharding in ("zero3", "fsdp") and world > 1
    w_dev = w_bytes / world if shard_w else w_bytes
    if offload in ("param", "both") and sharding in ("zero3", "fsdp"):
        w_dev = 0.0
    gather = 0.0
    if shard_w or (offload in ("param", "both") and sharding in ("zero3", "fsdp")):
        block = w_bytes / max(1, dims["layers"] or 1)
        gather = 2 * block  # current + prefetched block, gathered in full
    lo_w, hi_w = (1.0, 1.0) if exact else (0.9, 1.1)
    terms.append(
        Term("weights", w_dev * lo_w, w_dev, w_dev * hi_w, wnote + (f" /{world}" if shard_w else ""))
    )
    if gather:
        terms.append(Term("gathered params", gather * 0.5, gather, gather * 1.5, "ZeRO-3/FSDP working set"))

    if train:
        # ---- gradients
        g_bytes_per = 2.0 if (pc == "half" and not lora) else 4.0
        if lora and pc == "half" and not quantised:
            g_bytes_per = 2.0
        g = g_bytes_per * trainable
        if sharding in ("zero2", "zero3", "fsdp") and world > 1:
            g /= world
        terms.append(
            Term(
                "gradients", g * lo_w, g, g * hi_w, f"{g_bytes_per:.0f} B x {trainable / 1e6:,.1f}M trainable"
            )
        )
        # ---- optimizer state (+ master)
        state_bytes = 2 if (pc == "half" and not lora and sharding not in ("zero1", "zero2", "zero3")) else 4
        o = optimizer_bytes(optimizer, state_bytes, dims["h"] or 1024) * trainable
        master = 0.0
        if pc == "half" and not lora and not quantised and sharding in ("zero1", "zero2", "zero3"):
            master = 4.0 * trainable  # DeepSpeed keeps fp32 master weights beside bf16/fp16 params
        if sharding in ("zero1", "zero2", "zero3", "fsdp") and world > 1:
            o /= world
            master /= world
        if offload in ("optimizer", "both"):
            o = 0.0
            master = 0.0
        lo_o = 0.25 if is_default(settings, "optimizer") else 1.0
        if optimizer.startswith("paged"):
            lo_o = 0.0  # paged states can be evicted to host memory under pressure
        terms.append(Term("optimizer state", o * lo_o * lo_w, o, o * hi_w, optimizer))
        if master:
            terms.append(Term("fp32 master copy", master, master, master, "mixed-precision optimizer"))
        # ---- autocast cache
        if pc == "mixed" and not lora:
            cache = 2.0 * bd["linear"] / (world if shard_w else 1)
            terms.append(
                Term("autocast cache", cache * 0.5, cache, cache, "half-precision copies of linear weights")
            )
        # ---- DDP buckets / ZeRO buffers
        if sharding == "ddp" and world > 1:
            terms.append(
                Term("ddp buckets", 0.0, g, g, "gradient bucket copy (gradient_as_bucket_view=False)")
            )
        elif sharding in ("zero2", "zero3") and world > 1:
            buf = min(g * world, 2 * 5e8 * 2)
            terms.append(Term("zero buffers", 0.0, buf, buf, "reduce/allgather buckets (5e8 elements)"))

    # ---- activations
    ctx = int(setting(settings, "context", 0) or 0)
    measured = True
    if mode == "generate":
        prompt = max(1, min(seq, ctx) if ctx else seq)
        stored, one, anote, measured = activation_bytes(
            family, config, model_key, batch, prompt, image, precision, attention, False, False
        )
        ws = inference_workspace(family, config, batch, prompt, image, precision, attention)
        act_point = one if ws is None else ws
        terms.append(
            _spread(
                Term(
                    "activations",
                    act_point,
                    act_point,
                    act_point,
                    f"prefill workspace, one block x {batch}x{prompt}",
                ),
                settings,
                measured,
                exact,
            )
        )
    else:
        stored, one, anote, measured = activation_bytes(
            family, config, model_key, batch, seq, image, precision, attention, checkpointing, train
        )
        if train:
            act_point = stored + (one if checkpointing else 0.0)
            anote = anote + (" (checkpointed: block inputs + one recompute)" if checkpointing else "")
        else:
            ws = inference_workspace(family, config, batch, seq, image, precision, attention)
            act_point = one if ws is None else ws
            anote = "one block at a time (no grad): " + anote
        terms.append(
            _spread(Term("activations", act_point, act_point, act_point, anote), settings, measured, exact)
        )

    # ---- logits buffer
    V = dims["vocab"] if kind in ("decoder", "encdec") else 0
    if V:
        co = coefficients()["logits"]
        if mode == "generate":
            lb = batch * V * 4.0 * 2
            lnote = "last-token logits (fp32)"
        else:
            toks = batch * (seq if kind == "decoder" else max(1, min(seq, 128)))
            lb = toks * V * (co["train"][pc] if train else co["inference"][pc])
            lnote = f"{toks:,} tokens x {V:,} vocab"
        terms.append(
            _spread(Term("logits buffer", lb, lb, lb, lnote), settings, True, exact, only_tokens=True)
        )

    # ---- KV cache
    if mode == "generate" and kind in ("decoder", "encdec"):
        kv_bytes = 4 if pc == "fp32" else 2
        context = ctx or seq
        layers = dims["dec_layers"] if kind == "encdec" else dims["layers"]
        kv = 2.0 * layers * dims["kv_heads"] * dims["hd"] * context * batch * kv_bytes
        if kind == "encdec":
            kv += 2.0 * layers * dims["h"] * seq * batch * kv_bytes
        terms.append(
            _spread(
                Term(
                    "KV cache",
                    kv,
                    kv,
                    kv,
                    f"2 x {layers} layers x {dims['kv_heads']} kv-heads x {dims['hd']} x {context} tokens "
                    f"x {batch}",
                ),
                settings,
                True,
                exact,
                only_tokens=True,
                kv=True,
            )
        )

    # ---- allocator fragmentation
    dynamic = sum(
        t.point for t in terms if t.name in ("activations", "logits buffer", "KV cache", "gradients")
    )
    terms.append(Term("fragmentation", 0.0, 0.05 * dynamic, 0.15 * dynamic, "caching-allocator slack"))

    est = Estimate(
        terms=terms,
        settings=settings,
        target=target,
        notes=notes,
        params_total=total,
        params_trainable=trainable,
    )
    if target:
        est.capacity = float(target["memory_bytes"])
        gpu = db.gpus().get(target.get("gpu") or "", {})
        est.context = float(gpu.get("context_mib", 500)) * MIB
        est.reserve = 0.02 * est.capacity
    return est


def _spread(
    term: Term,
    settings: Dict[str, Value],
    measured: bool,
    exact: bool,
    only_tokens: bool = False,
    kv: bool = False,
) -> Term:
    """Widen a token-proportional term for what was guessed."""
    lo, hi = (0.9, 1.1) if measured else (0.7, 1.4)
    if only_tokens:
        lo, hi = (0.95, 1.05) if kv else (0.8, 1.2)
    if not exact:
        lo, hi = lo * 0.6, hi * 1.6
    mode = setting(settings, "mode", "train")
    if is_default(settings, "batch") and mode == "train":
        lo, hi = lo * 0.5, hi * 2.0
    if is_default(settings, "seq") and is_default(settings, "context") and mode != "train":
        lo, hi = lo * 0.5, hi * 1.5
    elif is_default(settings, "seq") and mode == "train" and setting(settings, "image") is None:
        lo, hi = lo * 0.5, hi * 1.5
    return term.scaled(lo, hi)
