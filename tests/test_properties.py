"""Invariants over generated training code: never crash, deterministic, breakers and noqa work.

Programs are built from training-loop fragments (forward, loss, backward, step, stores,
eval/no_grad blocks, accumulation gates) mixed with unrelated statements and nesting.
"""
from __future__ import annotations

import ast
import textwrap

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flake8_torch_preflight.analysis import FileAnalysis
from flake8_torch_preflight.engine import lint_source
from flake8_torch_preflight.rules import ALL_RULES

HEADER = """\
import random
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

device = torch.device("cuda")
model = nn.Linear(8, 2).cuda()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loader = DataLoader(dataset, batch_size=32)


def evaluate(model, loader):
    model.eval()
    return [model(x) for x, _ in loader]


"""

FRAGMENTS = [
    "out = model(x)",
    "out = F.softmax(model(x), dim=-1)",
    "loss = criterion(out, y)",
    "loss = F.cross_entropy(out, y) / accum",
    "loss.backward()",
    "optimizer.step()",
    "optimizer.zero_grad()",
    "losses.append(loss)",
    "history[step] = out",
    "total += loss",
    "total = total + loss.item()",
    "x = x.cuda()",
    "print(loss.item())",
    "model.eval()",
    "model.train()",
    "value = float(loss)",
    "seen.add(out.argmax(-1))",
    "self_check = out.sum() > 0",
    "np.random.shuffle(idx)",
    "random.random()",
    "torch.manual_seed(0)",
    "pass",
    "n = len(losses)",
    "grads = [p.grad for p in model.parameters()]",
    "loss = F.binary_cross_entropy_with_logits(torch.sigmoid(out), y)",
    "loss = F.nll_loss(F.softmax(out, dim=-1), y)",
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
    "scaler = torch.cuda.amp.GradScaler()",
    "scaler.scale(loss).backward()",
    "scaler.step(optimizer)",
    "model = DDP(model)",
    "sampler = DistributedSampler(dataset)",
    "loader = DataLoader(dataset, batch_size=8, sampler=sampler)",
    "sampler.set_epoch(epoch)",
    "model.to(device)",
    "x = x.to(device, non_blocking=True)",
    "torch.cuda.synchronize()",
    "evaluate(model, loader)",
]

BLOCKS = [
    "for step, (x, y) in enumerate(loader):",
    "for epoch in range(3):",
    "with torch.no_grad():",
    "if (step + 1) % accum == 0:",
    "if step % 10 == 0:",
    "while running:",
    "try:",
]


@st.composite
def bodies(draw, depth=0):
    lines = []
    for _ in range(draw(st.integers(1, 5))):
        if depth < 3 and draw(st.booleans()):
            header = draw(st.sampled_from(BLOCKS))
            inner = draw(bodies(depth + 1))
            lines.append(header)
            lines.extend("    " + line for line in inner)
            if header == "try:":
                lines.append("except Exception:")
                lines.append("    pass")
        else:
            lines.append(draw(st.sampled_from(FRAGMENTS)))
    return lines


@st.composite
def programs(draw):
    body = draw(bodies())
    wrap = draw(st.sampled_from(["function", "module", "method"]))
    code = "\n".join(body)
    if wrap == "function":
        name = draw(st.sampled_from(["train", "evaluate", "fit", "test_step", "run"]))
        code = f"def {name}(model, loader, optimizer):\n" + textwrap.indent(
            "losses = []\nhistory = {}\nseen = set()\ntotal = 0\n" + code, "    ")
    elif wrap == "method":
        code = "class Trainer:\n    def fit(self, loader):\n" + textwrap.indent(
            "losses = []\n" + code, "        ")
    else:
        code = "losses = []\nhistory = {}\nseen = set()\ntotal = 0\n" + code
    return HEADER + code + "\n"


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(programs())
def test_no_rule_ever_raises(source):
    tree = ast.parse(source)
    analysis = FileAnalysis(tree, "train.py")
    for rule in ALL_RULES:
        list(rule().check(analysis))   # no engine safety net here: a crash fails the test


@SETTINGS
@given(programs())
def test_output_is_deterministic(source):
    first = [f.message for f in lint_source(source, "train.py")]
    second = [f.message for f in lint_source(source, "train.py")]
    assert first == second


@SETTINGS
@given(programs())
def test_detach_on_stored_values_silences_tpf001(source):
    detached = (source.replace("losses.append(loss)", "losses.append(loss.detach())")
                .replace("history[step] = out", "history[step] = out.detach()")
                .replace("total += loss\n", "total += loss.detach()\n"))
    assert not [f for f in lint_source(detached, "train.py") if f.code == "TPF001"]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_unparsable_or_arbitrary_text_never_raises(text):
    lint_source("import torch\n" + text, "broken.py")


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(programs())
def test_noqa_silences_each_reported_code(tmp_path_factory, source):
    from flake8.api import legacy

    findings = lint_source(source, "train.py")
    if not findings:
        return
    lines = source.splitlines()
    codes_by_line = {}
    for finding in findings:
        codes_by_line.setdefault(finding.line, set()).add(finding.code)
    for line, codes in codes_by_line.items():
        lines[line - 1] += "  # noqa: " + ",".join(sorted(codes))
    path = tmp_path_factory.mktemp("noqa") / "train.py"
    path.write_text("\n".join(lines) + "\n")
    guide = legacy.get_style_guide(select=["TPF0"], quiet=2)
    report = guide.check_files([str(path)])
    assert report.total_errors == 0
