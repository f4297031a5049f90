"""The analysed code and torch are never imported, executed, or parsed from source."""
from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader
    import mylib.models as models

    raise SystemExit("the analysed file was executed")


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x)


    def train(loader):
        model = Net()
        opt = torch.optim.Adam(model.parameters())
        losses = []
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            losses.append(loss)
        return losses
    """
)

PROBE = textwrap.dedent(
    """\
    import sys, ast
    from flake8_torch_preflight.engine import lint_source
    src = open(sys.argv[1]).read()
    findings = lint_source(src, sys.argv[1])
    assert findings, "expected the leak to be reported"
    banned = [m for m in sys.modules if m == "torch" or m.startswith(("torch.", "mylib"))]
    assert not banned, banned
    try:
        from astroid import MANAGER
        parsed = [m for m in MANAGER.astroid_cache if m == "torch" or m.startswith("torch.")]
        assert not parsed, parsed
    except ImportError:
        pass
    print("ok", len(findings))
    """
)


def test_fake_torch_on_path_is_never_imported_or_parsed(tmp_path):
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise RuntimeError('torch was imported by the linter')\n")
    (fake / "nn.py").write_text("raise RuntimeError('torch.nn was imported by the linter')\n")
    mylib = tmp_path / "site" / "mylib"
    mylib.mkdir()
    (mylib / "__init__.py").write_text("raise RuntimeError('mylib was imported')\n")
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "probe.py").write_text(PROBE)
    env_path = str(tmp_path / "site")
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "probe.py"), str(tmp_path / "train.py")],
        capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": env_path + ":" + ":".join(sys.path), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok")
