"""The optional runtime guard; skipped cleanly where torch is not installed."""

import pytest

torch = pytest.importorskip("torch")

from vram_estimator.guard import VramError, activation_bytes, check, measure  # noqa: E402


def mlp(width=256, depth=3):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def test_exact_parameters_gradients_and_projected_adam_state():
    model = mlp()
    opt = torch.optim.AdamW(model.parameters())
    r = measure(model, opt, (8, 256))
    n = sum(p.numel() for p in model.parameters())
    assert r.parameters == 4 * n and r.gradients == 4 * n and r.optimizer == 8 * n


def test_existing_optimizer_state_is_counted_exactly():
    model = mlp(64, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 64)).sum().backward()
    opt.step()
    assert measure(model, opt).optimizer == 4 * sum(p.numel() for p in model.parameters())


def test_meta_forward_allocates_nothing_and_counts_saved_tensors():
    model = mlp(128, 2)
    before = [p.data_ptr() for p in model.parameters()]
    acts = activation_bytes(model, (16, 128))
    assert [p.data_ptr() for p in model.parameters()] == before  # the live model is untouched
    # Linear 1 saves the input; ReLU 1's output is saved once (by ReLU 1 and by Linear 2: one
    # storage); ReLU 2 saves its output: three 16x128 fp32 storages
    assert acts == 3 * 16 * 128 * 4


def test_raises_only_when_optimistic_end_does_not_fit():
    model = mlp(512, 2)
    opt = torch.optim.AdamW(model.parameters())
    ok = check(model, opt, (4, 512), gpu="t4")
    assert ok.verdict == "fits"
    with pytest.raises(VramError):
        check(model, opt, (4, 512), gpu="0.001GiB")


def test_dict_inputs_for_hf_style_models():
    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(100, 32)
            self.out = torch.nn.Linear(32, 100)

        def forward(self, input_ids):
            return self.out(self.emb(input_ids))

    assert activation_bytes(Tiny(), {"input_ids": (2, 10)}) > 0
