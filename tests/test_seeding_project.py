"""TPF011 across files: seeding done by a base class or a trainer class of another project file."""
from __future__ import annotations

import textwrap

from flake8_torch_preflight.engine import lint_source

DIST_UTILS = '''
import torch


def set_determinism(device, debug, seed=None):
    if seed is not None:
        torch.manual_seed(seed)
'''

ENGINE = '''
import torch
from .dist_utils import set_determinism


class Engine:
    def __init__(self, config):
        self.device = torch.device("cuda")
        set_determinism(self.device, config, seed=None if config is None else 0)
        self.model = torch.nn.Linear(8, 1).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters())
'''

NON_SEEDING_ENGINE = '''
import torch


class Engine:
    def __init__(self, config):
        self.device = torch.device("cuda")
        self.model = torch.nn.Linear(8, 1).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters())
'''

TRAIN = '''
import torch
from .engine import Engine


class Trainer(Engine):
    def train(self, batches):
        for x, y in batches:
            loss = torch.nn.functional.mse_loss(self.model(x.to(self.device)), y.to(self.device))
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()


def main(trainer_class):
    trainer = trainer_class(None)
    trainer.train([])


if __name__ == "__main__":
    main(Trainer)
'''

HF_TRAINER = '''
import torch
from transformers import Trainer


class DistillTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        outputs = model(**inputs)
        return (outputs.loss, outputs) if return_outputs else outputs.loss
'''

HF_SCRIPT = '''
from transformers import TrainingArguments
from distill import DistillTrainer


if __name__ == "__main__":
    trainer = DistillTrainer(model=None, args=TrainingArguments("out"), train_dataset=None)
    trainer.train()
'''


def _tpf011(tmp_path, files, script):
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    path = tmp_path / "train.py"
    source = textwrap.dedent(script)
    path.write_text(source)
    return [f for f in lint_source(source, str(path)) if f.code == "TPF011"]


def test_base_class_constructor_seeds_through_helper_in_third_file(tmp_path):
    pkg = tmp_path / "forge"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    found = _tpf011(pkg, {"dist_utils.py": DIST_UTILS, "engine.py": ENGINE}, TRAIN)
    assert found == []


def test_base_class_that_does_not_seed_still_reported(tmp_path):
    pkg = tmp_path / "forge"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    found = _tpf011(pkg, {"engine.py": NON_SEEDING_ENGINE}, TRAIN)
    assert [f.severity for f in found] == ["note"]


def test_hf_trainer_subclass_imported_from_project_file(tmp_path):
    assert _tpf011(tmp_path, {"distill.py": HF_TRAINER}, HF_SCRIPT) == []
