"""Training losses of language models, as the libraries implement them: what a run's loss is
called where it is chosen, and what each implementation keeps per logit.

The bytes themselves are in :data:`..costs.terms.LOSS_LAYOUTS`; this module is the knowledge of
names: the ``loss=`` values people write (``# vram: loss=...``, ``--loss``), and the library
callees and config keys that decide the loss.  Each entry says why, from the library's source:

* ``hf`` -- transformers' ``ForCausalLMLoss`` (``loss/loss_utils.py``): ``logits.float()`` before
  ``cross_entropy``, so the half logits, their fp32 upcast and the fp32 log-softmax it saves;
* ``plain`` -- ``F.cross_entropy`` on the logits as they come (a harness that keeps fp16 logits
  and sums them): the logits and a log-softmax in their own dtype (fp32 under autocast, which
  runs ``log_softmax`` in fp32);
* ``torchtune-chunked`` -- torchtune's ``CEWithChunkedOutputLoss``: the output in 8 chunks, each
  ``.float()`` before its cross-entropy; the recipe deletes the logits before backward;
* ``torchtune-linear`` -- torchtune's ``LinearCrossEntropyLoss``: the projection done chunk by
  chunk inside the loss (the model skips its output layer), each chunk upcast like the above;
* ``litgpt-chunked`` -- litgpt's ``chunked_cross_entropy`` over ``lm_head_chunk_size=128``
  chunks of half logits;
* ``liger-fused`` -- Liger's ``LigerFusedLinearCrossEntropyLoss``
  (``ops/fused_linear_cross_entropy.py``): the head's matmul and the cross-entropy fused over
  token chunks of about ``tokens x hidden / vocab`` rows; the full logits never exist, the
  input's gradient (tokens x hidden) is computed in the forward and kept for backward.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

# loss= spellings -> the layout
LOSS_NAMES: Dict[str, str] = {
    "hf": "hf",
    "transformers": "hf",
    "fp32-upcast": "hf",
    "upcast": "hf",
    "plain": "plain",
    "half": "plain",
    "fp16": "plain",
    "bf16": "plain",
    "no-upcast": "plain",
    "torchtune-chunked": "torchtune-chunked",
    "chunked-output": "torchtune-chunked",
    "cewithchunkedoutputloss": "torchtune-chunked",
    "torchtune-linear": "torchtune-linear",
    "linear-ce": "torchtune-linear",
    "linearcrossentropyloss": "torchtune-linear",
    "litgpt-chunked": "litgpt-chunked",
    "litgpt": "litgpt-chunked",
    "chunked-cross-entropy": "litgpt-chunked",
    "liger-fused": "liger-fused",
    "liger": "liger-fused",
    "fused-linear": "liger-fused",
    "flce": "liger-fused",
}
ACCEPTED = "hf, plain, torchtune-chunked, torchtune-linear, litgpt-chunked, liger-fused"

# what each layout keeps, in the report's words
KEEPS: Dict[str, str] = {
    "hf": "half logits + fp32 upcast + fp32 log-softmax (transformers ForCausalLMLoss)",
    "plain": "logits and their log-softmax in the compute dtype (no fp32 upcast)",
    "torchtune-chunked": "fp32 log-softmax of 8 chunks; half logits freed before backward",
    "torchtune-linear": "head applied chunk by chunk in the loss; fp32 log-softmax per chunk",
    "litgpt-chunked": "half chunks of 128 tokens and their log-softmax",
    "liger-fused": "no logits: head and loss fused over token chunks (Liger)",
}

# callees that choose the loss: last name -> (module prefixes it must come from, layout, why)
_LIGER_FUSED = "Liger fused linear cross-entropy"
LOSS_CALLEES: Dict[str, Tuple[Tuple[str, ...], str, str]] = {
    "CEWithChunkedOutputLoss": (("torchtune",), "torchtune-chunked", "torchtune CEWithChunkedOutputLoss"),
    "LinearCrossEntropyLoss": (("torchtune",), "torchtune-linear", "torchtune LinearCrossEntropyLoss"),
    "chunked_cross_entropy": (("litgpt", "lit_gpt"), "litgpt-chunked", "litgpt chunked_cross_entropy"),
    "LigerFusedLinearCrossEntropyLoss": (("liger_kernel",), "liger-fused", _LIGER_FUSED),
    "LigerFusedLinearCrossEntropyFunction": (("liger_kernel",), "liger-fused", _LIGER_FUSED),
    "AutoLigerKernelForCausalLM": (("liger_kernel",), "liger-fused", "AutoLigerKernelForCausalLM"),
}
# Liger's per-model patch functions take fused_linear_cross_entropy=True by default
# (liger_kernel/transformers/monkey_patch.py, apply_liger_kernel_to_llama(..., cross_entropy=False,
# fused_linear_cross_entropy=True, ...)); cross_entropy=True alone keeps the logits (Liger's CE
# computes the gradient in place of its fp32-free input: the ``plain`` layout)
LIGER_PATCH_PREFIX = "apply_liger_kernel_to_"
# config keys that switch Liger's kernels on: TrainingArguments(use_liger_kernel=True) (the HF
# Trainer then calls _apply_liger_kernel_to_instance with its defaults), axolotl's Liger plugin
CONFIG_SWITCHES: Dict[str, str] = {
    "use_liger_kernel": "liger-fused",
    "use_liger": "liger-fused",
    "liger_fused_linear_cross_entropy": "liger-fused",
}


def loss_name(text: str) -> Optional[str]:
    """The layout a ``loss=`` value names, or None."""
    low = (text or "").strip().lower().replace("_", "-")
    return LOSS_NAMES.get(low) or LOSS_NAMES.get(low.replace("-", ""))


def callee_loss(qualified: str) -> Optional[Tuple[str, str]]:
    """(layout, why) for a call that chooses the loss (``torchtune.modules.loss.
    CEWithChunkedOutputLoss``), or None; the module must be the library's."""
    if qualified.endswith(".from_pretrained"):  # AutoLigerKernelForCausalLM.from_pretrained(...)
        qualified = qualified[: -len(".from_pretrained")]
    last = qualified.rsplit(".", 1)[-1]
    entry = LOSS_CALLEES.get(last)
    if entry is not None:
        prefixes, layout, why = entry
        return (layout, why) if qualified.startswith(prefixes) else None
    if last.startswith(LIGER_PATCH_PREFIX) and qualified.startswith("liger_kernel"):
        return "liger-fused", f"{last} (fused_linear_cross_entropy=True by default)"
    return None
