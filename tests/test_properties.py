"""Invariants over generated training code: never crash, deterministic, breakers and noqa work.

Programs are built from training-loop fragments (forward, loss, backward, step, stores,
eval/no_grad blocks, accumulation gates) mixed with unrelated statements and nesting.
"""
from __future__ import annotations

import ast
import re
import textwrap

from hypothesis import HealthCheck, example, given, settings
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
    # TPF014-TPF018 and the accumulation windows TPF004 shares with them
    "scaler.unscale_(optimizer)",
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
    "scaler.update()",
    "model.eval",
    "optimizer.zero_grad",
    "loss.backward",
    "torch.no_grad()",
    "torch.autocast('cuda', dtype=torch.float16)",
    "need_update = (step + 1) % accum == 0",
    "is_accumulating = micro < accum - 1",
    "micro += 1",
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP",
    "model = FSDP(model)",
    "loader = DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)",
]

BLOCKS = [
    "for step, (x, y) in enumerate(loader):",
    "for epoch in range(3):",
    "with torch.no_grad():",
    "if (step + 1) % accum == 0:",
    "if step % 10 == 0:",
    "while running:",
    "try:",
    "if need_update:",
    "if not is_accumulating:",
    "if micro == accum:",
    "for i in range(0, 32, 8):",
    "for chunk in x.chunk(4):",
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


# ---------------------------------------------------------------------------- TPF004, TPF014-TPF018
def _codes(source):
    return [f for f in lint_source(source, "train.py")]


@SETTINGS
@given(programs())
def test_unscaling_before_every_clip_silences_scaled_clip_findings(source):
    fixed = re.sub(r"(?m)^(\s*)torch\.nn\.utils\.clip_grad_norm_",
                   r"\1scaler.unscale_(optimizer)\n\1torch.nn.utils.clip_grad_norm_", source)
    assert not [f for f in _codes(fixed) if f.code == "TPF014" and "still scaled" in f.what]


@SETTINGS
@given(programs())
def test_parentheses_silence_tpf016(source):
    fixed = (source.replace("model.eval\n", "model.eval()\n")
             .replace("optimizer.zero_grad\n", "optimizer.zero_grad()\n")
             .replace("loss.backward\n", "loss.backward()\n")
             .replace("torch.no_grad()\n", "torch.set_grad_enabled(False)\n")
             .replace("torch.autocast('cuda', dtype=torch.float16)\n", "torch.set_grad_enabled(True)\n"))
    assert not [f for f in _codes(fixed) if f.code == "TPF016"]


# Found: a loss made under no_grad (so not known to be one), divided, then backwarded; the
# graph that backward proves flowed round the micro-batch loop and read as an undivided loss.
_PROVEN_GRAPH_ROUND_THE_LOOP = """import random
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


def train(model, loader, optimizer):
    losses = []
    history = {}
    seen = set()
    total = 0
    for i in range(0, 32, 8):
        for epoch in range(3):
            with torch.no_grad():
                loss = F.binary_cross_entropy_with_logits(torch.sigmoid(out), y)
            out = model(x)
            out = model(x)
            out = model(x)
            model = DDP(model)
        out = model(x)
        loss.backward()
    optimizer.step()
"""


@SETTINGS
@given(programs())
@example(_PROVEN_GRAPH_ROUND_THE_LOOP)
def test_dividing_every_loss_silences_tpf004(source):
    fixed = re.sub(r"(?m)^(\s*)loss = (.*)$", r"\1loss = (\2) / accum", source)
    assert not [f for f in _codes(fixed) if f.code == "TPF004"]


@SETTINGS
@given(programs())
def test_no_reset_no_accumulation_undone(source):
    fixed = re.sub(r"(?m)^(\s*)optimizer\.zero_grad(\(\))?$", r"\1pass", source)
    assert not [f for f in _codes(fixed) if f.code == "TPF015"]


@SETTINGS
@given(programs())
def test_original_parameters_or_shuffling_silence_tpf017_and_tpf018(source):
    fixed = (source.replace("model = FSDP(model)", "model = FSDP(model, use_orig_params=True)")
             .replace("batch_size=8)", "batch_size=8, shuffle=True)"))
    assert not [f for f in _codes(fixed) if f.code in ("TPF017", "TPF018")]


# An accumulation loop assembled from its parts, with what each rule must say about it.
_GATES = {
    "counter": ("", "if (step + 1) % accum == 0:", True),
    "flag": ("need_update = micro == accum", "if need_update:", True),
    "count": ("", "if micro >= accum:", True),
    "continue_counter": ("", "if (step + 1) % accum != 0:\n    continue", False),
    "continue_count": ("", "if micro < accum:\n    continue", False),
}


@st.composite
def accumulation_loops(draw):
    gate = draw(st.sampled_from(sorted(_GATES)))
    reset = draw(st.sampled_from(["top", "mid", "in", "end"]))
    divided = draw(st.booleans())
    sgd = draw(st.booleans())
    clip = draw(st.booleans())
    amp = draw(st.booleans())
    unscale = draw(st.sampled_from(["none", "before", "after", "every"])) if amp else "none"
    flag_line, test, indented = _GATES[gate]
    pad = "    " if indented else ""
    opt = ("torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)" if sgd
           else "torch.optim.AdamW(model.parameters(), lr=3e-4)")
    gated = []
    if unscale == "before":
        gated.append("scaler.unscale_(optimizer)")
    if clip:
        gated.append("torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)")
    if unscale == "after":
        gated.append("scaler.unscale_(optimizer)")
    gated += ["scaler.step(optimizer)", "scaler.update()"] if amp else ["optimizer.step()"]
    if reset == "in":
        gated.append("optimizer.zero_grad()")
    gated.append("micro = 0")
    body = ["optimizer.zero_grad()"] if reset == "top" else []
    body += ["with torch.autocast('cuda', dtype=torch.float16):",
             "    loss = F.cross_entropy(model(x), y)" + (" / accum" if divided else ""),
             "scaler.scale(loss).backward()" if amp else "loss.backward()"]
    if unscale == "every":
        body.append("scaler.unscale_(optimizer)")
    if reset == "mid":
        body.append("optimizer.zero_grad()")
    body += ["micro += 1"] + ([flag_line] if flag_line else []) + test.split("\n")
    body += [pad + line for line in gated]
    if reset == "end":
        body.append("optimizer.zero_grad()")
    source = HEADER + "def train(model, loader, accum=4, epochs=2):\n" + textwrap.indent(
        f"optimizer = {opt}\nscaler = torch.cuda.amp.GradScaler()\nmicro = 0\n"
        "for epoch in range(epochs):\n" + textwrap.indent(
            "for step, (x, y) in enumerate(loader):\n" + textwrap.indent("\n".join(body), "    "),
            "    "), "    ") + "\n"
    every_step_reset = reset in ("top", "mid") or (reset == "end" and indented)
    return source, {
        "TPF015": every_step_reset,
        "TPF004": not divided and not every_step_reset and (sgd or clip),
        "scaled clip": amp and clip and unscale in ("none", "after"),
        "unscale per micro-step": unscale == "every",
    }


@SETTINGS
@given(accumulation_loops())
def test_accumulation_rules_match_the_oracle(case):
    source, expected = case
    findings = lint_source(source, "train.py")
    found = {
        "TPF015": any(f.code == "TPF015" for f in findings),
        "TPF004": any(f.code == "TPF004" for f in findings),
        "scaled clip": any(f.code == "TPF014" and "still scaled" in f.what for f in findings),
        "unscale per micro-step": any(f.code == "TPF014" and "every micro-step" in f.what
                                      for f in findings),
    }
    assert found == expected, source
