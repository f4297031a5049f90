"""The injected-bug benchmark's operators on tiny sources (no torch, no corpus needed).

Each operator must inject where the change is really its bug and skip the look-alike where it
would not be; every mutant must parse; finding comparison maps lines through the edit.
"""
import ast
import textwrap

import pytest

from benchmarks.mutants import mutants_of, new_findings
from benchmarks.mutation_ops import NO_EFFECT_SUFFIX, OPERATORS, Mutation
from benchmarks.mutation_text import Edit, Source, apply_edits, line_mapper

BY_NAME = {op.name: op for op in OPERATORS}


def inject(operator: str, code: str):
    source = Source(textwrap.dedent(code), "train.py")
    found = list(mutants_of(source, [BY_NAME[operator]], seed=0))
    for _, text in found:
        ast.parse(text)
    return found


def only(operator: str, code: str):
    found = inject(operator, code)
    assert len(found) == 1, [m for m, _ in found]
    return found[0]


TRAIN = """
import torch
from torch import nn

def train(model, loader, optimizer):
    criterion = nn.CrossEntropyLoss()
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total
"""


def test_delete_zero_grad_only_reset():
    mutation, text = only("delete-zero-grad", TRAIN)
    assert mutation.code == "TPF003" and mutation.variant == "only-reset"
    assert "zero_grad" not in text


def test_delete_zero_grad_skips_accumulation_and_rebuilt_optimizer():
    gated = TRAIN.replace("        optimizer.zero_grad()\n", "        if step % 4 == 0:\n"
                          "            optimizer.zero_grad()\n")
    assert inject("delete-zero-grad", gated) == []
    rebuilt = TRAIN.replace("        optimizer.zero_grad()\n",
                            "        optimizer = torch.optim.Adam(model.parameters())\n"
                            "        optimizer.zero_grad()\n")
    assert inject("delete-zero-grad", rebuilt) == []


def test_drop_item_of_stored_loss():
    mutation, text = only("drop-item-detach", TRAIN)
    assert mutation.code == "TPF001" and "total += loss\n" in text


def test_drop_item_skips_other_breakers_and_no_grad():
    assert inject("drop-item-detach", TRAIN.replace("total += loss.item()",
                                                    "total += float(loss.item())")) == []
    no_grad = TRAIN.replace("        total += loss.item()",
                            "        with torch.no_grad():\n            total += loss.item()")
    assert inject("drop-item-detach", no_grad) == []


def test_softmax_into_cross_entropy_only_for_a_cross_entropy_object():
    mutation, text = only("softmax-into-cross-entropy", TRAIN)
    assert mutation.code == "TPF005" and "softmax(" in text
    mixed = TRAIN.replace("    criterion = nn.CrossEntropyLoss()\n",
                          "    criterion = nn.CrossEntropyLoss()\n    if regression:\n"
                          "        criterion = nn.MSELoss()\n")
    assert inject("softmax-into-cross-entropy", mixed) == []


def test_sigmoid_into_bce_with_logits():
    code = TRAIN.replace("nn.CrossEntropyLoss()", "nn.BCEWithLogitsLoss()")
    mutation, text = only("sigmoid-into-bce-with-logits", code)
    assert mutation.code == "TPF006" and "sigmoid(" in text


def test_optimizer_into_loop_needs_a_stateful_optimizer():
    code = """
    import torch
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(3):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
    """
    mutation, text = only("optimizer-into-loop", code)
    assert mutation.variant == "epoch-loop"
    assert text.count("torch.optim.Adam(") == 2
    stateless = code.replace("torch.optim.Adam(model.parameters(), lr=1e-3)",
                             "torch.optim.SGD(model.parameters(), lr=1e-3)")
    assert inject("optimizer-into-loop", stateless) == []


ACCUM = """
import torch
for step, (x, y) in enumerate(loader):
    loss = model(x).sum()
    loss = loss / accum_steps
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
"""


def test_drop_accumulation_division_when_the_step_is_counted():
    mutation, text = only("drop-accumulation-division", ACCUM)
    assert mutation.variant == "counter:reassign" and "/ accum_steps" not in text
    unrelated = ACCUM.replace("loss / accum_steps", "loss / batch_size")
    assert inject("drop-accumulation-division", unrelated) == []


def test_drop_accumulation_division_under_adamw_without_clip_has_no_effect():
    adamw = "import torch\noptimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n" + \
        ACCUM.replace("import torch\n", "")
    mutation, _ = only("drop-accumulation-division", adamw)
    assert mutation.operator.endswith(NO_EFFECT_SUFFIX)
    clipped = adamw.replace("        optimizer.step()",
                            "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
                            "        optimizer.step()")
    assert not only("drop-accumulation-division", clipped)[0].operator.endswith(NO_EFFECT_SUFFIX)
    sgd = adamw.replace("AdamW", "SGD")
    assert not only("drop-accumulation-division", sgd)[0].operator.endswith(NO_EFFECT_SUFFIX)


def test_drop_accumulation_division_in_a_micro_step_loop():
    code = """
    import torch
    while True:
        for micro in range(grad_accum):
            loss = model(next(batches)).sum()
            loss = loss / grad_accum
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    """
    mutation, _ = only("drop-accumulation-division", code)
    assert mutation.variant == "micro-step:reassign"


def test_reset_every_iteration_moves_the_gated_reset_up():
    mutation, text = only("reset-every-iteration", ACCUM)
    assert mutation.code == "TPF015" and mutation.variant == "counter"
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if "zero_grad" in line)
    assert first < next(i for i, line in enumerate(lines) if "backward" in line)


EPOCHS = """
import torch

def evaluate(net, loader):
    net.eval()
    with torch.no_grad():
        for x, y in loader:
            net(x)

def main():
    for epoch in range(10):
        model.train()
        for x, y in train_loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        evaluate(model, val_loader)
"""


def test_delete_train_when_an_eval_runs_in_the_same_epoch_loop():
    mutation, text = only("delete-train", EPOCHS)
    assert mutation.code == "TPF007" and mutation.variant == "top-of-loop"
    assert "model.train()" not in text
    assert inject("delete-train", EPOCHS.replace("        evaluate(model, val_loader)\n", "")) == []


def test_remove_no_grad_from_evaluation_code():
    mutation, text = only("remove-no-grad", EPOCHS)
    assert mutation.code == "TPF002" and "no_grad" not in text
    assert "        net(x)\n" in text            # the body is dedented, not dropped


def test_drop_call_parentheses():
    found = inject("drop-call-parentheses", EPOCHS)
    assert {m.variant for m, _ in found} == {"eval", "train", "zero_grad"}
    assert all(m.code == "TPF016" for m, _ in found)


DDP = """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

model = DDP(Net())
sampler = DistributedSampler(train_set)
train_loader = DataLoader(train_set, batch_size=32, sampler=sampler)
val_loader = DataLoader(val_set, batch_size=32, shuffle=True)
for epoch in range(3):
    sampler.set_epoch(epoch)
    for x, y in train_loader:
        loss = model(x).sum()
        loss.backward()
"""


def test_drop_ddp_sampler_and_set_epoch():
    mutation, text = only("drop-ddp-sampler", DDP)
    assert mutation.variant == "torch-ddp" and "sampler=sampler" not in text
    mutation, text = only("delete-set-epoch", DDP)
    assert mutation.variant == "torch-sampler-in-file" and "set_epoch" not in text
    unshuffled = DDP.replace("DistributedSampler(train_set)",
                             "DistributedSampler(train_set, shuffle=False)")
    assert inject("delete-set-epoch", unshuffled) == []


def test_drop_shuffle_only_on_a_training_loader():
    code = DDP.replace("sampler=sampler", "shuffle=True")
    found = inject("drop-shuffle", code)
    assert [m.detail for m, _ in found] == ["train_loader"]


def test_delete_unscale_before_a_clip_with_a_threshold():
    code = """
    import torch
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    """
    mutation, text = only("delete-unscale", code)
    assert mutation.code == "TPF014" and "unscale_" not in text
    measured = code.replace("clip_grad_norm_(model.parameters(), 1.0)",
                            "clip_grad_norm_(model.parameters(), None)")
    assert inject("delete-unscale", measured) == []


def test_optimizer_before_sharding():
    code = """
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    model = Net()
    model = FSDP(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    """
    mutation, text = only("optimizer-before-sharding", code)
    assert mutation.variant == "fsdp1"
    assert text.index("AdamW") < text.index("FSDP(model")
    assert inject("optimizer-before-sharding",
                  code.replace("FSDP(model)", "FSDP(model, use_orig_params=True)")) == []


def test_transfer_into_the_step_loop():
    code = """
    import torch
    model.to(device)
    for epoch in range(2):
        for x, y in loader:
            loss = model(x.to(device)).sum()
            loss.backward()
            optimizer.step()
    """
    mutation, text = only("transfer-into-loop", code)
    assert mutation.code == "TPF013" and text.count("model.to(device)") == 2


def test_ungate_logging_sync_in_a_cuda_file():
    code = """
    import torch
    for step, x in enumerate(loader):
        loss = model(x.cuda()).sum()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(step, loss.item())
    """
    mutation, text = only("ungate-logging-sync", code)
    assert "\n    print(step, loss.item())" in text
    assert inject("ungate-logging-sync", code.replace("x.cuda()", "x")) == []


def test_line_mapper_and_new_findings():
    edits = (Edit((3, 0), (5, 0), ""), Edit((8, 0), (8, 0), "a\nb\n"))
    mapped = line_mapper(edits)
    assert [mapped(n) for n in (1, 2, 3, 4, 5, 7, 8, 9)] == [1, 2, 3, 3, 3, 5, 8, 9]
    mutation = Mutation("TPF003", "op", "v", 3, edits)
    assert new_findings([9, 2], [9, 2, 4], mutation) == [4]
    assert new_findings([7], [5], mutation) == []      # the same finding, moved up two lines
    assert apply_edits("1\n2\n3\n4\n5\n", (Edit((2, 0), (3, 0), ""),)) == "1\n3\n4\n5\n"


@pytest.mark.parametrize("operator", sorted(BY_NAME))
def test_every_operator_is_quiet_on_code_without_its_shape(operator):
    assert inject(operator, "import torch\nx = torch.zeros(3)\nprint(x.sum())\n") == []
