"""What the libraries' runtimes keep for backward, measured on the CPU with the real libraries.

Needs torch, transformers (< 5), peft and bitsandbytes (not the project's dependencies): run it
in a throwaway venv::

    python -m venv /work/venvs/torch
    /work/venvs/torch/bin/pip install torch==2.13.0 'transformers<5' peft bitsandbytes
    PYTHONPATH=. /work/venvs/torch/bin/python calibration/measure_runtime.py

Each row is one small configuration of a real model class (``LlamaForCausalLM``,
``Gemma2ForCausalLM`` from a config, random weights), wrapped the way a user does it (PEFT
``get_peft_model`` with ``LoraConfig``, bitsandbytes NF4 through ``BitsAndBytesConfig``,
``gradient_checkpointing_enable()``), and one forward pass with labels.  What is counted: every
tensor autograd saves for backward (``torch.autograd.graph.saved_tensors_hooks``), once per
storage, parameters, buffers and the casts of parameters excluded (the ``weights`` and
``autocast copies`` terms).  What ``torch.autograd.Function`` subclasses keep on ``ctx`` outside
``save_for_backward`` is invisible to the hooks; bitsandbytes' ``MatMul4Bit`` keeps only the
packed weight there since 0.43.2 (``bitsandbytes/autograd/_functions.py``), so nothing is missed
for this build.

Three loss layouts are measured on the same hidden states: Hugging Face's ``ForCausalLMLoss``
(fp32 upcast of the logits, one cross-entropy), torchtune's ``CEWithChunkedOutputLoss`` layout
(the output projection in 8 chunks, each chunk upcast to fp32 for its cross-entropy) and
litgpt's ``chunked_cross_entropy`` layout (the head in chunks of 128 tokens, cross-entropy on
the half-precision chunks).  The chunked layouts are written here with the same torch
operations those functions use (``torchtune/modules/loss/ce_chunked_output_loss.py``,
``litgpt/utils.py``), since neither library is installed.

Writes ``calibration/runtime.json``: per row the library versions, the configuration, the
measured saved bytes and the estimator's figure for the same quantity (re-estimated by
``python calibration/common.py`` and by the tests without torch).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
import transformers as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from calibration.saved_tensors import saved_during  # noqa: E402

OUT = os.path.join(ROOT, "calibration", "runtime.json")

# two sizes: every term is pinned on both, so a term that only fits one size shows
SIZES = {
    "small": dict(h=128, ff=352, heads=4, kv=2, layers=2, vocab=1024, seq=64, batch=2),
    "wide": dict(h=256, ff=688, heads=8, kv=4, layers=3, vocab=2048, seq=96, batch=1),
}
LORA_SETS = {
    "qv": ["q_proj", "v_proj"],
    "all": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


def saved_bytes(model, run, autocast=False):
    """Bytes autograd saves during ``run()`` (once per storage; parameters, buffers and autocast
    casts of parameters excluded) and the output of ``run``."""
    return saved_during(model, run, autocast)


def llama_config(size):
    c = SIZES[size]
    return tf.LlamaConfig(
        vocab_size=c["vocab"],
        hidden_size=c["h"],
        intermediate_size=c["ff"],
        num_hidden_layers=c["layers"],
        num_attention_heads=c["heads"],
        num_key_value_heads=c["kv"],
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )


def gemma2_config(size, attention):
    c = SIZES[size]
    return tf.Gemma2Config(
        vocab_size=c["vocab"],
        hidden_size=c["h"],
        intermediate_size=c["ff"],
        num_hidden_layers=c["layers"],
        num_attention_heads=c["heads"],
        num_key_value_heads=c["kv"],
        head_dim=c["h"] // c["heads"],
        max_position_embeddings=1024,
        sliding_window=4096,
        attn_implementation=attention,
    )


def build(size, precision, quant=None, family="llama", attention="sdpa"):
    """A model of ``size``: bf16 weights (``bf16``), fp32 weights under autocast (``bf16-mixed``)
    or NF4 linears through bitsandbytes (``nf4``, loaded from a saved random checkpoint as a
    user loads one)."""
    torch.manual_seed(0)
    cfg = llama_config(size) if family == "llama" else gemma2_config(size, attention)
    cls = tf.LlamaForCausalLM if family == "llama" else tf.Gemma2ForCausalLM
    if quant == "nf4":
        with tempfile.TemporaryDirectory() as tmp:
            cls(cfg).save_pretrained(tmp)
            q = tf.BitsAndBytesConfig(
                load_in_4bit=True,
                bnb_4bit_quant_type="nf4",
                bnb_4bit_use_double_quant=True,
                bnb_4bit_compute_dtype=torch.bfloat16,
            )
            return cls.from_pretrained(
                tmp, quantization_config=q, torch_dtype=torch.bfloat16, device_map="cpu"
            )
    model = cls(cfg)
    return model.to(torch.bfloat16) if precision == "bf16" else model


def with_lora(model, targets, dropout):
    import peft

    config = peft.LoraConfig(r=8, lora_alpha=16, target_modules=LORA_SETS[targets], lora_dropout=dropout)
    return peft.get_peft_model(model, config)


def batch(size):
    c = SIZES[size]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=g)
    return ids


def measure_model(
    size, precision, lora=None, dropout=0.0, quant=None, ckpt=False, family="llama", attention="sdpa"
):
    """Saved bytes of the decoder stack (``model.model``: no head, no loss) and of the whole
    ``ForCausalLM`` forward with labels (stack + head input + loss)."""
    model = build(size, precision, quant, family, attention)
    if lora:
        model = with_lora(model, lora, dropout)
    model.train()
    if ckpt:
        model.gradient_checkpointing_enable()  # the library's default kwargs
        if lora:
            model.enable_input_require_grads()
    ids = batch(size)
    autocast = precision == "bf16-mixed"
    base = model.get_base_model() if lora else model
    stack, _ = saved_bytes(model, lambda: base.model(input_ids=ids), autocast)
    whole, _ = saved_bytes(model, lambda: model(input_ids=ids, labels=ids), autocast)
    return stack, whole


def measure_losses(size, precision):
    """Saved bytes of three loss layouts over the same (trainable) hidden states and head."""
    c = SIZES[size]
    torch.manual_seed(0)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    head = torch.nn.Linear(c["h"], c["vocab"], bias=False).to(dtype)
    hidden = torch.randn(c["batch"], c["seq"], c["h"], dtype=dtype, requires_grad=True)
    labels = batch(size)
    autocast = precision == "bf16-mixed"

    def hf():  # transformers.loss.loss_utils.ForCausalLMLoss: logits.float(), one cross-entropy
        logits = head(hidden).float()
        shift = F.pad(labels, (0, 1), value=-100)[..., 1:]
        return F.cross_entropy(logits.view(-1, c["vocab"]), shift.reshape(-1), ignore_index=-100)

    def torchtune_chunked(chunks=8):  # CEWithChunkedOutputLoss: per chunk .float() + cross-entropy
        outs = [head(part) for part in hidden.chunk(chunks, dim=1)]
        targets = labels.chunk(chunks, dim=1)
        total = sum(
            F.cross_entropy(o.float().reshape(-1, c["vocab"]), t.reshape(-1), reduction="sum")
            for o, t in zip(outs, targets)
        )
        return total / labels.numel()

    def litgpt_chunked(chunk=128):  # lm_head_chunk_size=128 + chunked_cross_entropy (no upcast)
        flat = hidden.reshape(-1, c["h"])
        outs = [head(part) for part in flat.split(chunk)]
        targets = labels.reshape(-1).split(chunk)
        losses = [F.cross_entropy(o, t, reduction="none") for o, t in zip(outs, targets)]
        return torch.cat(losses).mean()

    holder = torch.nn.Module()
    holder.head = head
    out = {}
    layouts = (("hf", hf), ("torchtune-chunked", torchtune_chunked), ("litgpt-chunked", litgpt_chunked))
    for name, fn in layouts:
        inputs, _ = saved_bytes(holder, lambda: head(hidden), autocast)  # the head's own input
        total, _ = saved_bytes(holder, fn, autocast)
        out[name] = total - inputs
    return out


def rows():
    versions = dict(torch=torch.__version__, transformers=tf.__version__)
    try:
        import peft

        versions["peft"] = peft.__version__
    except ImportError:
        pass
    try:
        import bitsandbytes

        versions["bitsandbytes"] = bitsandbytes.__version__
    except ImportError:
        pass
    out = []
    for size in SIZES:
        for precision in ("bf16", "bf16-mixed"):
            cases = [dict(), dict(ckpt=True)]
            for targets in LORA_SETS:
                for dropout in (0.0, 0.1):
                    cases.append(dict(lora=targets, dropout=dropout))
            cases.append(dict(lora="qv", dropout=0.0, ckpt=True))
            cases.append(dict(lora="qv", dropout=0.1, ckpt=True))
            if precision == "bf16":
                for dropout in (0.0, 0.1):
                    cases.append(dict(lora="all", dropout=dropout, quant="nf4"))
                for attention in ("eager", "sdpa"):
                    cases.append(dict(family="gemma2", attention=attention))
            for case in cases:
                stack, whole = measure_model(size, precision, **case)
                row = dict(kind="model", size=size, precision=precision, **case, stack=stack, whole=whole)
                out.append(row)
                print(out[-1], file=sys.stderr)
            for loss, saved in measure_losses(size, precision).items():
                out.append(dict(kind="loss", size=size, precision=precision, loss=loss, saved=saved))
                print(out[-1], file=sys.stderr)
    return dict(versions=versions, sizes=SIZES, rows=out)


def main():
    doc = rows()
    with open(OUT, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1)
    print(f"{len(doc['rows'])} rows -> {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
