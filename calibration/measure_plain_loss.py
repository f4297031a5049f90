"""What ``F.cross_entropy`` on logits as they come saves for backward (the ``loss=plain`` layout):
bytes per logit on the CPU under ``saved_tensors_hooks``, once per storage, with what the head's
matmul saves subtracted.  Needs torch; prints one line per precision class.

    PYTHONPATH=. /work/venv-torch/bin/python calibration/measure_plain_loss.py
"""

import torch
import torch.nn.functional as F

BATCH, TOKENS, VOCAB, HIDDEN = 2, 64, 1000, 32


def saved_bytes(step) -> int:
    seen = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        step()
    return sum(seen.values())


def per_logit(dtype: torch.dtype, autocast: bool) -> float:
    torch.manual_seed(0)
    hidden = torch.randn(BATCH, TOKENS, HIDDEN, dtype=dtype, requires_grad=True)
    head = torch.randn(VOCAB, HIDDEN, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, VOCAB, (BATCH * TOKENS,))

    def logits():
        return hidden @ head.t()

    def with_loss():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return F.cross_entropy(logits().view(-1, VOCAB), labels)

    def head_only():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return logits().sum()

    return (saved_bytes(with_loss) - saved_bytes(head_only)) / (BATCH * TOKENS * VOCAB)


if __name__ == "__main__":
    for name, dtype, autocast in (("half", torch.bfloat16, False), ("mixed", torch.float32, True),
                                  ("fp32", torch.float32, False)):
        print(f"{name}: F.cross_entropy saves {per_logit(dtype, autocast):.2f} B per logit")
