"""Model and GPU databases, Hugging Face ``config.json`` reading, and GPU target parsing.

The databases are package data (``data/models.json``, ``data/gpus.json``); this module loads
them and turns entries into typed :class:`Model` records.  Each built-in architecture stores its
*published configuration* (the hyperparameters of its Hugging Face / torchvision / diffusers
config, in our key names), its family, the published parameter count and aliases.  Parameter
counts are always *computed* from the configuration by the family's formula
(``vram_estimator/knowledge/families/``); the stored ``params`` is the published number a test compares
against.

Any Hugging Face model whose ``config.json`` is at hand becomes a :class:`Model` through
:func:`model_from_hf_config` (keyed by ``model_type``, or diffusers' ``_class_name``), so the
built-in list is a convenience, not a limit.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Dict, List, Optional, Tuple, Union

from .families import all_families, family
from .model_names import alternative_forms, architecture_from_name, suggestion_text
from .registry import KIND_TRAITS, Breakdown, Dims, Family

# the package data lives in vram_estimator/data, one folder above this room
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GIB = 1024**3
MIB = 1024**2


# --------------------------------------------------------------------------- loading


@lru_cache(maxsize=None)
def _load(name: str) -> Dict[str, Any]:
    path = os.path.join(_PACKAGE_DIR, "data", name)
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def normalise_name(text: str) -> str:
    """Lower-case and drop separators so that ``Llama-3-8B``, ``llama_3_8b``, ``llama3 8b`` meet."""
    return re.sub(r"[^a-z0-9.]", "", text.lower()).replace(".", "")


# --------------------------------------------------------------------------- model records


@dataclass(eq=False)
class Model:
    """One architecture: its family entry, its configuration (our key names) and what follows
    from them.  Built-in entries come from ``data/models.json``; others from a Hugging Face
    ``config.json`` (:func:`model_from_hf_config`)."""

    key: str
    family: Family
    config: Dict[str, Any]
    published_params: Optional[int] = None
    aliases: Tuple[str, ...] = ()
    max_positions: int = 2048
    source: str = "built-in"
    _breakdown: Optional[Breakdown] = field(default=None, repr=False)

    @property
    def breakdown(self) -> Breakdown:
        if self._breakdown is None:
            self._breakdown = self.family.count(self.config)
        return self._breakdown

    @property
    def params(self) -> int:
        return self.breakdown.total

    @property
    def kind(self) -> str:
        return self.family.kind

    @property
    def dims(self) -> Dims:
        return self.family.dims(self.config)

    @property
    def capabilities(self) -> frozenset:
        return self.family.capabilities_of(self.config)

    @property
    def traits(self) -> frozenset:
        """What the model's kind has (``registry.KIND_TRAITS``): an LM head, two stacks, ..."""
        return KIND_TRAITS[self.family.kind]

    @property
    def native_image(self) -> int:
        """The resolution the model was built for (0 for text models)."""
        vision = self.config.get("vision") or self.config
        return int(vision.get("image", 0) or 0)

    def default_seq(self) -> int:
        """The family's typical training length (2048 for decoders, 512 for encoders), never past
        the model's text positions; Whisper's 1500 audio frames are not text positions."""
        own = self.family.default_seq or 512
        return own if "audio-input" in self.capabilities else min(own, self.max_positions)

    def __str__(self) -> str:  # reports print the setting's value
        return self.key


def models() -> Dict[str, Dict[str, Any]]:
    """All built-in architectures as stored (raw table rows), keyed by canonical name."""
    return _load("models.json")["models"]


@lru_cache(maxsize=None)
def model(key: str) -> Model:
    """The typed record of a built-in architecture."""
    e = models()[key]
    return Model(
        key=key,
        family=family(e["family"]),
        config=e["config"],
        published_params=e.get("params"),
        aliases=tuple(e.get("aliases", ())),
        max_positions=int(e.get("max_positions", 2048)),
    )


ModelRef = Union[str, Model]


def spec(ref: ModelRef) -> Model:
    """A built-in key or a :class:`Model` (from a config.json) -> the :class:`Model`."""
    return ref if isinstance(ref, Model) else model(ref)


def model_entry(key: str) -> Dict[str, Any]:
    """The raw table row of a built-in architecture."""
    return models()[key]


@lru_cache(maxsize=None)
def _model_index() -> Dict[str, str]:
    index: Dict[str, str] = {}
    for key, entry in models().items():
        for name in [key] + list(entry.get("aliases", [])):
            index[normalise_name(name)] = key
            if "/" in name:  # a Hugging Face id also resolves by its last path part
                index.setdefault(normalise_name(name.rsplit("/", 1)[1]), key)
    return index


_FINE_TUNE_SUFFIXES = ("hf", "chathf", "instruct", "chat", "base", "it")


def find_model(name: str) -> Optional[str]:
    """Canonical model key for a name or Hugging Face id, or None; names as people write them
    (re-uploads, quantised copies, checkpoint folders) through ``model_names``."""
    if not name or len(name) > 300:
        return None
    for form in (name, *alternative_forms(name)):
        key = _find_model_as_written(form)
        if key:
            return key
    return None


def _find_model_as_written(name: str) -> Optional[str]:
    index = _model_index()
    norm = normalise_name(name)
    if norm in index:
        return index[norm]
    if "/" in name:
        tail = normalise_name(name.rsplit("/", 1)[1])
        if tail in index:
            return index[tail]
    for suffix in _FINE_TUNE_SUFFIXES:  # fine-tunes keep their base's shape
        if norm.endswith(suffix) and norm[: -len(suffix)] in index:
            return index[norm[: -len(suffix)]]
    return None


def param_breakdown(family_name: str, config: Dict[str, Any]) -> Breakdown:
    """Exact parameter counts (total, embed, head, linear, cast, active) from a config."""
    return family(family_name).count(config)


def count_params(key: str) -> int:
    return model(key).params


def model_names() -> List[str]:
    return sorted(models())


# --------------------------------------------------------------------------- Hugging Face configs

_MAX_CONFIG_BYTES = 4 * MIB
_MAX_INT = 2**40  # no real dimension comes near; a hostile value must not drive the arithmetic
_MAX_LAYERS = 4096
_MAX_LIST = 64


@lru_cache(maxsize=None)
def _families_by_hf_type() -> Dict[str, Family]:
    return {t: f for f in all_families().values() for t in f.hf_types}


def _sane(value: Any, depth: int = 0) -> bool:
    """Every number of a translated config is a plain bounded int/float/bool; lists are short."""
    if depth > 4:
        return False
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, int):
        return 0 <= value <= _MAX_INT
    if isinstance(value, float):
        return math.isfinite(value) and 0 <= value <= _MAX_INT
    if isinstance(value, (list, tuple)):
        return len(value) <= _MAX_LIST and all(_sane(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_sane(v, depth + 1) for v in value.values())
    return False


def _layer_counts_bounded(c: Dict[str, Any]) -> bool:
    counts = [c.get(k, 0) for k in ("layers", "dec_layers", "double", "single")]
    counts += [c.get(t, {}).get("layers", 0) for t in ("text", "vision") if isinstance(c.get(t), dict)]
    return all(isinstance(n, int) and n <= _MAX_LAYERS for n in counts)


def model_from_hf_config(config: Dict[str, Any], name: Optional[str] = None) -> Optional[Model]:
    """A :class:`Model` from a parsed Hugging Face ``config.json`` (or a diffusers model
    config), with exact parameter counts, or None when its ``model_type`` / ``_class_name`` is
    not a family we model or the config is incomplete or out of bounds.

    ``name`` (e.g. the Hub id or the folder) becomes the model's ``key``; by default the
    config's ``_name_or_path`` or its ``model_type``.  Never raises on bad content.  The result
    can be put in a setting as ``Value(model, "config.json at ...")`` wherever a built-in key
    goes: :func:`spec` accepts both.
    """
    if not isinstance(config, dict):
        return None
    kind_key = config.get("model_type") or config.get("_class_name")
    fam = _families_by_hf_type().get(str(kind_key)) if kind_key else None
    if fam is None or fam.hf_reader is None:
        return None
    try:
        ours = fam.hf_reader(config)
        if not _sane(ours) or not _layer_counts_bounded(ours):
            return None
        result = Model(
            key=str(name or config.get("_name_or_path") or kind_key)[:200],
            family=fam,
            config=ours,
            max_positions=int(ours.pop("max_positions", 0) or config.get("max_position_embeddings") or 2048),
            source="config.json",
        )
        if result.params <= 0:
            return None
        result.dims  # noqa: B018  (a config the dims cannot be read from is incomplete)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError, AttributeError, OverflowError):
        return None
    return result


def load_hf_config(path: str, name: Optional[str] = None) -> Optional[Model]:
    """:func:`model_from_hf_config` of a ``config.json`` file, or of a folder holding one (a
    model snapshot; diffusers pipelines keep theirs in ``transformer/`` or ``unet/``).  None
    when nothing readable is there.  Reads at most 4 MiB; never downloads anything."""
    candidates = [path]
    if os.path.isdir(path):
        candidates = [os.path.join(path, sub, "config.json") for sub in ("", "transformer", "unet")]
    for candidate in candidates:
        try:
            if not os.path.isfile(candidate) or os.path.getsize(candidate) > _MAX_CONFIG_BYTES:
                continue
            with open(candidate, encoding="utf-8") as handle:
                config = json.load(handle)
        except (OSError, ValueError, RecursionError):
            continue
        found = model_from_hf_config(config, name=name or config.get("_name_or_path") or None)
        if found is not None:
            found.source = f"config.json at {candidate}"
            return found
    return None


def model_from_name(text: str) -> Optional[Model]:
    """A model whose architecture its name gives away (``model_names.NAME_RULES``), marked as
    inferred: ``unsloth/Mistral-7B-v0.2`` has Mistral 7B's shape, ``stabilityai/stablelm-base-
    alpha-3b`` is a GPT-NeoX of a published size.  None for any other name."""
    found = architecture_from_name(text)
    if found is None:
        return None
    target, why = found
    if isinstance(target, str):
        base = model(target)
        inferred = Model(key=base.key, family=base.family, config=dict(base.config),
                         published_params=base.published_params, aliases=base.aliases,
                         max_positions=base.max_positions)
    else:
        inferred = model_from_hf_config(dict(target), name=text[:120])
        if inferred is None:
            return None
    inferred.source = f"architecture inferred from the name '{text[:120]}' ({why}): an assumption"
    return inferred


def generic_decoder(params: int) -> Model:
    """A Llama-shaped stand-in for an unknown model of ``params`` parameters (``params=7B``).

    Hidden size follows the usual depth/width ratio (d ~ 128 * layers at 7B); the shape only
    drives the activation and KV-cache terms, which carry a wide interval for it.  The
    breakdown is scaled to ``params`` exactly.
    """
    params = max(1, min(int(params), _MAX_PARAMS))
    layers = max(4, int(round((params / 6.5e9) ** (1 / 3) * 32)))
    hidden = max(256, int(round(math.sqrt(params / (12.5 * layers)) / 128)) * 128)
    heads = max(1, hidden // 128)
    config = dict(
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=heads,
        ff=int(hidden * 8 / 3) // 256 * 256 or 256,
        vocab=32000,
        tied=False,
    )
    fam = family("llama")
    return Model(
        key=f"params={params}",
        family=fam,
        config=config,
        source="params",
        _breakdown=fam.count(config).scaled(params),
    )


# --------------------------------------------------------------------------- GPUs


def gpus() -> Dict[str, Dict[str, Any]]:
    return _load("gpus.json")["gpus"]


def instances() -> Dict[str, Dict[str, Any]]:
    return _load("gpus.json")["instances"]


def calibration() -> Dict[str, Any]:
    """Per-GPU CUDA-context and allocator figures with their spread (``data/gpus.json``)."""
    return _load("gpus.json")["calibration"]


def gpu_names() -> List[str]:
    return sorted(gpus())


def instance_names() -> List[str]:
    return sorted(instances())


@lru_cache(maxsize=None)
def _gpu_index() -> Dict[str, str]:
    return {normalise_name(n): k for k, e in gpus().items() for n in [k] + list(e.get("aliases", []))}


@lru_cache(maxsize=None)
def _instance_index() -> Dict[str, str]:
    return {normalise_name(n): k for k, e in instances().items() for n in [k] + list(e.get("aliases", []))}


_MAX_TARGET_TEXT = 100
_MAX_COUNT = 4096
_MAX_CAPACITY = 64 * 1024 * GIB  # 64 TiB: far past any device
_CAPACITY = re.compile(r"^\s*(\d{1,7}(?:\.\d{1,6})?)\s*(gib|gb|g|mib|mb|tib|tb)?\s*$", re.I)
_MULTI = re.compile(r"^\s*(\d+)\s*[x*]\s*(.+)$", re.I)
_SCALE = {"gib": GIB, "g": GIB, "gb": 1000**3, "mib": MIB, "mb": 1000**2, "tib": 1024 * GIB, "tb": 1000**4}


def _target(
    name: str, g: Dict[str, Any], key: Optional[str], count: int, instance: Optional[str]
) -> Dict[str, Any]:
    return dict(
        name=name,
        gpu=key,
        memory_bytes=int(g["memory_mib"]) * MIB,
        bf16=g["bf16"],
        count=count,
        instance=instance,
        vendor=g.get("vendor", "nvidia"),
    )


def parse_target(text: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """``gpu=`` text -> ``(target, None)`` or ``(None, why it is not one)``.

    Accepted: a GPU name, a cloud instance type, ``N x GPU`` with 1 <= N <= 4096 written
    without leading zeros (so ``0xa100-80gb`` is a count of zero, not hex: rejected), or a
    capacity (``48GiB``, ``24GB``) up to 64 TiB.  Counts do not nest (``2x2xa100``).  A target
    is ``{"name", "gpu" (key or None), "memory_bytes", "bf16", "count", "instance", "vendor"}``.
    """
    if not text or not text.strip():
        return None, "an empty GPU name"
    if len(text) > _MAX_TARGET_TEXT:
        return None, f"a GPU name of {len(text)} characters (at most {_MAX_TARGET_TEXT})"
    norm = normalise_name(text)
    if norm in _gpu_index():
        key = _gpu_index()[norm]
        return _target(key, gpus()[key], key, 1, None), None
    if norm in _instance_index():
        ikey = _instance_index()[norm]
        inst = instances()[ikey]
        return _target(ikey, gpus()[inst["gpu"]], inst["gpu"], int(inst["count"]), ikey), None
    multi = _MULTI.match(text)
    if multi:
        return _multi_target(multi.group(1), multi.group(2))
    cap = _CAPACITY.match(text)
    if cap:
        value = float(cap.group(1)) * _SCALE[(cap.group(2) or "gib").lower()]
        if not 0 < value <= _MAX_CAPACITY:
            return None, f"a capacity of {text.strip()} (more than 0 and at most 64 TiB)"
        return (
            dict(
                name=text.strip(),
                gpu=None,
                memory_bytes=int(value),
                bf16=True,
                count=1,
                instance=None,
                vendor="nvidia",
            ),
            None,
        )
    return None, f"unknown GPU '{text.strip()}'"


def _multi_target(count_text: str, inner_text: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    if len(count_text) > 1 and count_text.startswith("0") or count_text == "0":
        return None, f"a GPU count of '{count_text}' (1 to {_MAX_COUNT}, no leading zeros)"
    if len(count_text) > 4 or not 1 <= int(count_text) <= _MAX_COUNT:
        return (
            None,
            f"a GPU count of {count_text[:12]}{'...' if len(count_text) > 12 else ''} (1 to {_MAX_COUNT})",
        )
    if _MULTI.match(inner_text):
        return None, f"nested GPU counts in '{count_text}x{inner_text}' (write one count: 4xa100)"
    inner, why = parse_target(inner_text)
    if inner is None:
        return None, why
    if inner["instance"] is not None:
        return (
            None,
            f"a count of instances ('{count_text}x{inner['name']}'): name the GPU, e.g. 16x{inner['gpu']}",
        )
    return dict(inner, count=int(count_text), name=f"{count_text}x{inner['name']}"), None


def resolve_target(text: str) -> Optional[Dict[str, Any]]:
    """The target for ``gpu=`` text, or None (:func:`target_problem` says why)."""
    return parse_target(text)[0]


def target_problem(text: str) -> Optional[str]:
    """Why ``gpu=`` text is not a target, in words; None when it is one."""
    return parse_target(text)[1]


def suggestions(text: str, names: List[str], limit: int = 3) -> List[str]:
    """Closest known names, for error messages."""
    import difflib

    norm = {normalise_name(n): n for n in names}
    hits = difflib.get_close_matches(
        normalise_name((text or "")[:_MAX_TARGET_TEXT]), list(norm), n=limit, cutoff=0.5
    )
    return [norm[h] for h in hits]


# --------------------------------------------------------------------------- user numbers

_MAX_PARAMS = 10**15  # a quadrillion parameters: beyond any model, far inside float range
_PARAMS = re.compile(r"^\s*(\d{1,16}(?:\.\d{1,9})?)\s*([kmbt]?)\s*$", re.I)


def parse_params(text: str) -> Optional[int]:
    """``7B``, ``1.5b``, ``350M``, ``124439808`` -> an integer count, or None (also for counts
    of zero or above 10^15, and for text that is not a number)."""
    m = _PARAMS.match(text or "")
    if not m:
        return None
    scale = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}[m.group(2).lower()]
    value = int(float(m.group(1)) * scale)
    return value if 0 < value <= _MAX_PARAMS else None


def closest_models(text: str, limit: int = 3) -> list:
    """The built-ins closest to an unknown name (difflib on the reduced name), else those of the
    size the name states (``stablelm-base-alpha-3b`` -> the 3B models)."""
    reduced = suggestion_text(text)[:64]
    near = suggestions(reduced, model_names(), limit)
    if near:
        return near
    sizes = re.findall(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)b(?![a-z0-9])", reduced.lower().replace("_", "-"))
    return [k for k in model_names() if sizes and k.endswith(f"-{sizes[-1]}b")][:limit]
