"""What torchao's NF4 keeps, measured on the CPU: the bytes alive while ``NF4Tensor`` dequantises
(``get_original_weight``, which ``LinearNF4`` runs in forward and again in backward) and what
``linear_nf4`` saves for backward.  Pins ``terms.NF4_DEQUANT_BYTES['torchtune']`` (14 B per weight)
and ``activations``' "LinearNF4 keeps no input".

    PYTHONPATH=<dir with torchao> /work/venv-torch/bin/python calibration/measure_nf4_torchao.py

torchao 0.18.0 (``torchao/quantization/quantize_/workflows/nf4/nf4_tensor.py``; the same
``get_original_weight`` as ``torchao/dtypes/nf4tensor.py`` of the releases torchtune's QLoRA
tutorial ran), torch 2.13 CPU: 14.05 B per weight at the peak, the dequantised weight 2.0, saved
for backward only the ``NF4Tensor``.
"""

import importlib
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

MODULES = ("torchao.quantization.quantize_.workflows.nf4.nf4_tensor", "torchao.dtypes.nf4tensor")


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages that ops create, alive now and at most (freed when collected)."""

    def __init__(self):
        super().__init__()
        self.live, self.now, self.peak = {}, 0, 0

    def _gone(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key, n = storage.data_ptr(), storage.nbytes()
        if type(t) is not torch.Tensor or key in self.live or not n:
            return
        self.live[key] = n
        self.now += n
        self.peak = max(self.peak, self.now)
        weakref.finalize(storage, self._gone, key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out


def _nf4():
    for name in MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise SystemExit("torchao is not importable: put it on PYTHONPATH")


def main() -> None:
    nf4 = _nf4()
    out_f, in_f = 1024, 512
    weight = nf4.to_nf4(torch.randn(out_f, in_f, dtype=torch.bfloat16))
    meter = LiveBytes()
    with meter:
        dense = weight.get_original_weight()
    n = out_f * in_f
    print(f"get_original_weight: peak {meter.peak / n:.2f} B per weight, result {dense.nbytes / n:.1f}")
    saved = []
    x = torch.randn(4, 16, in_f, dtype=torch.bfloat16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(type(t).__name__) or t, lambda t: t):
        nf4.linear_nf4(x, weight)
    print(f"linear_nf4 saves for backward: {saved}")


if __name__ == "__main__":
    main()
