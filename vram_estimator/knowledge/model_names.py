"""Model names as people write them, reduced to the names the database knows.

``db.find_model`` knows each built-in architecture by its key, its aliases and its Hugging Face
ids.  People also write:

* re-uploads and quantised copies: ``unsloth/llama-3-8b-bnb-4bit``,
  ``TheBloke/Llama-2-7B-GPTQ``, ``Qwen/Qwen2.5-7B-Instruct-AWQ`` (the suffix also says how the
  weights are stored: :func:`stored_precision`);
* checkpoint folders: litgpt's ``checkpoints/<org>/<name>``, ``./models/<name>``;
* litgpt and torchtune names: ``Llama-2-7b-hf``, ``tiny-llama-1.1b``, ``llama3_1_8b``;
* lit-llama's sizes: ``LLaMAConfig.from_name("7B")`` (:data:`LIT_LLAMA_SIZES`);
* re-uploads and releases of a known architecture under a name no table lists
  (``unsloth/Mistral-7B-v0.2``, ``stabilityai/stablelm-base-alpha-3b``): :data:`NAME_RULES` map
  them to a built-in or to the published configuration of their family, and the estimate says
  the architecture was inferred from the name (an assumption, not a read config).

:func:`alternative_forms` yields the reduced names to look up, in order; the tables here are
knowledge of how those names are built, never of one file.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, Optional, Tuple, Union

# packaging suffixes of quantised re-uploads -> how the weights are stored (our precision);
# GPTQ/AWQ int4 are estimated as nf4 (see docs/vram.md, Known limits)
QUANT_SUFFIXES = (
    ("-unsloth-bnb-4bit", "nf4"),
    ("-bnb-4bit", "nf4"),
    ("-bnb-nf4", "nf4"),
    ("-bnb-8bit", "int8"),
    ("-4bit", "nf4"),
    ("-8bit", "int8"),
    ("-nf4", "nf4"),
    ("-int4", "nf4"),
    ("-int8", "int8"),
    ("-gptq", "nf4"),
    ("-awq", "nf4"),
)
# folders a checkpoint's id is kept under (litgpt downloads to checkpoints/<org>/<name>)
FOLDER_PREFIXES = ("checkpoints", "models", "model", "weights", "pretrained", "hf_models")
# names of models with a built-in's exact shape: LLaMA (1) 7B and 13B have Llama 2's
# dimensions, vocabulary and parameter count (6,738,415,616 and 13,015,864,320)
SAME_SHAPE = {
    "llama7b": "llama-2-7b",
    "llama7bhf": "llama-2-7b",
    "llama13b": "llama-2-13b",
    "llama13bhf": "llama-2-13b",
}
# lit-llama's LLaMAConfig.from_name sizes
LIT_LLAMA_SIZES = {"7b": "llama-2-7b", "13b": "llama-2-13b"}

_SEPARATORS = re.compile(r"[^a-z0-9]")

# Names whose architecture is known from the name alone: (pattern over the lower-cased tail of
# the name, the built-in it has the shape of or the Hugging Face config of its family, why).
# Mistral 7B v0.2 changed the rope base and dropped the sliding window, not a tensor
# (mistralai/Mistral-7B-v0.2 config.json); v0.3's vocabulary is 32768, another count, so it
# is not here.  StableLM-Base-Alpha is GPT-NeoX (its config.json: model_type gpt_neox).
NAME_RULES = (
    (r"^mistral-7b(-instruct)?-v0\.[12]$", "mistral-7b", "Mistral 7B v0.1/v0.2 share one shape"),
    (
        r"^stablelm-(base|tuned)-alpha-3b(-v2)?$",
        dict(model_type="gpt_neox", hidden_size=4096, num_hidden_layers=16, num_attention_heads=32,
             intermediate_size=16384, vocab_size=50688, max_position_embeddings=4096,
             tie_word_embeddings=False),
        "StableLM-Alpha 3B is GPT-NeoX (h 4096, 16 layers, vocab 50688)",
    ),
    (
        r"^stablelm-(base|tuned)-alpha-7b(-v2)?$",
        dict(model_type="gpt_neox", hidden_size=6144, num_hidden_layers=16, num_attention_heads=48,
             intermediate_size=24576, vocab_size=50432, max_position_embeddings=4096,
             tie_word_embeddings=False),
        "StableLM-Alpha 7B is GPT-NeoX (h 6144, 16 layers, vocab 50432)",
    ),
)
_COMPILED_RULES = tuple((re.compile(p), target, why) for p, target, why in NAME_RULES)


def architecture_from_name(text: str) -> Optional[Tuple[Union[str, Dict[str, Any]], str]]:
    """(built-in key or Hugging Face config, why) for a name whose architecture :data:`NAME_RULES`
    infers, or None."""
    if not text or len(text) > 300:
        return None
    tail = _without_quant_suffix(_without_folders(text)).rsplit("/", 1)[-1].lower()
    for pattern, target, why in _COMPILED_RULES:
        if pattern.match(tail):
            return target, why
    return None


def stored_precision(text: str) -> Optional[str]:
    """``nf4`` for ``unsloth/llama-3-8b-bnb-4bit``, ``int8`` for ``...-8bit``; None otherwise."""
    low = (text or "").lower().rstrip("/")
    for suffix, precision in QUANT_SUFFIXES:
        if low.endswith(suffix) or f"{suffix}-" in low:
            return precision
    return None


def _without_quant_suffix(text: str) -> str:
    low = text.lower()
    for suffix, _ in QUANT_SUFFIXES:
        at = low.find(suffix)
        if at > 0 and (at + len(suffix) == len(low) or low[at + len(suffix)] == "-"):
            return text[:at]
    return text


def _without_folders(text: str) -> str:
    """``./checkpoints/meta-llama/Llama-2-7b-hf/`` -> ``meta-llama/Llama-2-7b-hf``."""
    parts = [p for p in text.replace("\\", "/").split("/") if p not in ("", ".")]
    while len(parts) > 1 and parts[0].lower() in FOLDER_PREFIXES:
        parts = parts[1:]
    return "/".join(parts[-2:])


def alternative_forms(text: str) -> Iterator[str]:
    """Reduced names to look up when ``text`` itself is not known, most specific first."""
    if not text or len(text) > 300:
        return
    seen = {text}
    for form in (_without_folders(text), _without_quant_suffix(_without_folders(text))):
        for candidate in (form, form.rsplit("/", 1)[-1]):
            if candidate and candidate not in seen:
                seen.add(candidate)
                yield candidate
            same = SAME_SHAPE.get(_SEPARATORS.sub("", candidate.lower()))
            if same and same not in seen:
                seen.add(same)
                yield same


def lit_llama_size(text: str) -> Optional[str]:
    """lit-llama's ``LLaMAConfig.from_name("7B")`` -> the built-in with that shape."""
    return LIT_LLAMA_SIZES.get((text or "").strip().lower())


def suggestion_text(text: str) -> str:
    """What to compare with the known names for "closest built-in" hints."""
    return _without_quant_suffix(_without_folders(text or "")).rsplit("/", 1)[-1] or text
