"""Shared pieces of the parameter formulas and of the Hugging Face config readers."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Mapping, Tuple

from ..registry import DOWN, OUT, QKV, UP, Dims, Linear


def conv(cin: int, cout: int, k: int, bias: bool = False, groups: int = 1) -> int:
    return cin // groups * cout * k * k + (cout if bias else 0)


def dense(fan_in: int, fan_out: int, bias: bool = True) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


def layer_norm(d: int) -> int:
    return 2 * d


def bert_layer(d: int, ff: int) -> int:
    """Post-/pre-norm encoder block: q/k/v/o with biases, 2 LayerNorms, MLP with biases."""
    return 4 * dense(d, d) + layer_norm(d) + dense(d, ff) + dense(ff, d) + layer_norm(d)


def attention_linears(
    d: int, q_dim: int, kv_dim: int, names: Tuple[str, str, str, str]
) -> Tuple[Linear, ...]:
    q, k, v, o = names
    return (
        Linear(q, d, q_dim, QKV),
        Linear(k, d, kv_dim, QKV),
        Linear(v, d, kv_dim, QKV),
        Linear(o, q_dim, d, OUT),
    )


def mlp_linears(d: int, ff: int, up: Iterable[str], down: str) -> Tuple[Linear, ...]:
    return tuple(Linear(n, d, ff, UP) for n in up) + (Linear(down, ff, d, DOWN),)


def transformer_dims(c: Mapping[str, Any], **extra: Any) -> Dims:
    """Dims of a plain transformer config in our keys (``hidden``, ``heads``, ...)."""
    d = c.get("hidden", 0)
    heads = c.get("heads", max(1, d // 64) if d else 1)
    hd = c.get("head_dim", d // heads if heads else 0)
    kv = c.get("kv_heads", heads)
    experts = c.get("experts", 1)
    values = dict(
        hidden=d,
        heads=heads,
        head_dim=hd,
        kv_heads=kv,
        ff=c.get("ff", 4 * d),
        layers=c.get("layers", 0),
        dec_layers=c.get("dec_layers", c.get("layers", 0)),
        vocab=c.get("vocab", 0),
        experts_active=c.get("experts_active", experts) if experts > 1 else 1,
        kv_cache_dim=kv * hd,
        patch=c.get("patch", 0),
        image=c.get("image", 0),
    )
    values.update(extra)
    return Dims(**values)


Reader = Callable[[Dict[str, Any]], Dict[str, Any]]


def pick(hf: Mapping[str, Any], names: Iterable[str], default: Any = None) -> Any:
    """The first of ``names`` present in an HF config (configs rename keys across families)."""
    for name in names:
        if name in hf and hf[name] is not None:
            return hf[name]
    return default


def rename(hf: Mapping[str, Any], table: Mapping[str, Tuple[Tuple[str, ...], Any]]) -> Dict[str, Any]:
    """Our config from an HF config by a table ``ours -> (their names, default)``; a required
    key (default ``...``) that is missing raises KeyError."""
    out: Dict[str, Any] = {}
    for ours, (theirs, default) in table.items():
        value = pick(hf, theirs, default)
        if value is ...:
            raise KeyError(theirs[0])
        if value is not None:
            out[ours] = value
    return out
