"""Issue 20's "wrong, by shape" list: the look-alikes the fixtures do not pin."""
from __future__ import annotations

import textwrap

from flake8_torch_preflight.engine import lint_source


def _codes(source: str, code: str):
    return [f for f in lint_source(textwrap.dedent(source), "train.py") if f.code == code]


_ONE_PASS = '''
import torch
from torch.utils.data import DataLoader, TensorDataset


def fit(model, loader, optimizer):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def main():
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    features, labels = torch.load("train.pt")
    loader = DataLoader(TensorDataset(features, labels), batch_size=32)
    fit(model, loader, optimizer)
{tail}

if __name__ == "__main__":
    main()
'''


def test_a_loader_read_once_is_not_every_epoch():
    assert not _codes(_ONE_PASS.format(tail=""), "TPF018")


def test_a_helper_called_twice_reads_the_order_twice():
    assert _codes(_ONE_PASS.format(tail="    fit(model, loader, optimizer)\n"), "TPF018")


def test_a_helper_handed_on_as_a_value_may_run_per_epoch():
    assert _codes(_ONE_PASS.format(tail="    run = fit\n"), "TPF018")


_LIST_LOADER = '''
import torch
from torch.utils.data import DataLoader


def train(model, tokenizer, path, optimizer, epochs):
    model.cuda()
    texts = [line.strip() for line in open(path)]
    loader = DataLoader(texts, batch_size=16, shuffle=True{collate})
    for epoch in range(epochs):
        for batch in loader:
            inputs = tokenizer(batch, return_tensors="pt")
            inputs = inputs.to("cuda", non_blocking=True)
            loss = model(**inputs).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
'''


def test_a_list_of_texts_has_nothing_to_load_or_pin():
    assert not _codes(_LIST_LOADER.format(collate=""), "TPF013")


def test_a_collate_function_does_work_workers_can_take():
    [note] = _codes(_LIST_LOADER.format(collate=", collate_fn=encode"), "TPF013")
    assert "num_workers" in note.evidence


_LOSS = '''
import torch


class Loss:
    def __init__(self, autobalance=False):
        self.autobalance = autobalance
        self.balance = [4.0, 1.0]

    def __call__(self, outputs, targets):
        total = 0
        for i, out in enumerate(outputs):
            part = torch.nn.functional.mse_loss(out, targets[i])
            total = total + part
            if self.autobalance:
                self.balance[i] = 0.9 * self.balance[i] + 0.1 / part.detach().item()
        return total


{extra}


def train(model, loader, optimizer):
    model.cuda()
    loss_fn = {build}
    for x, y in loader:
        loss = loss_fn(model(x.cuda()), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


def test_a_flag_left_at_its_default_never_syncs():
    assert not _codes(_LOSS.format(extra="", build="Loss()"), "TPF010")


def test_a_subclass_may_turn_the_flag_on():
    extra = "class Balanced(Loss):\n    pass"
    assert _codes(_LOSS.format(extra=extra, build="Loss()"), "TPF010")
