"""Questions answered across the project's files: helpers, methods and instances of classes
defined in another file (never imported: each file is parsed with `ast`)."""
from __future__ import annotations

import textwrap

from flake8_torch_preflight.engine import lint_source


def lint(tmp_path, files: dict, main: str):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    source = textwrap.dedent(files[main])
    return lint_source(source, str(tmp_path / main))


UTILS = """
    import torch


    def log_grad_norms(model, writer, step):
        for name, p in model.named_parameters():
            if p.grad is not None:
                writer.add_scalar(name, p.grad.norm().item(), step)


    class MetricLogger:
        def log_every(self, iterable, print_freq):
            import time
            start = time.time()
            for i, obj in enumerate(iterable):
                yield obj
                if i % print_freq == 0:
                    print(i, time.time() - start)
    """

TRAIN = """
    import torch
    from utils import MetricLogger, log_grad_norms


    def train(model, loader, optimizer, writer):
        model.cuda()
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            {call}
    """


def test_helper_of_another_file_syncing_per_parameter_every_step(tmp_path):
    files = {"utils.py": UTILS, "train.py": TRAIN.format(call="log_grad_norms(model, writer, step)")}
    found = [f for f in lint(tmp_path, files, "train.py") if f.code == "TPF010"]
    assert len(found) == 1 and "log_grad_norms()" in found[0].message
    assert "of utils.py" in found[0].message


def test_the_same_helper_under_a_logging_interval_is_quiet(tmp_path):
    call = "if step % 100 == 0:\n                log_grad_norms(model, writer, step)"
    files = {"utils.py": UTILS, "train.py": TRAIN.format(call=call)}
    assert not [f for f in lint(tmp_path, files, "train.py") if f.code == "TPF010"]


SYNC_TRAIN = """
    import torch
    from utils import MetricLogger


    def train(model, loader, optimizer):
        model.cuda()
        metric_logger = MetricLogger()
        for x, y in metric_logger.log_every(loader, 10):
            loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            torch.cuda.synchronize()
    """


def test_synchronize_serves_a_metric_logger_that_times_every_step(tmp_path):
    files = {"utils.py": UTILS, "train.py": SYNC_TRAIN}
    assert not [f for f in lint(tmp_path, files, "train.py") if f.code == "TPF010"]


def test_synchronize_with_no_timing_anywhere_is_reported(tmp_path):
    files = {"utils.py": UTILS.replace("time.time()", "0"), "train.py": SYNC_TRAIN}
    assert [f for f in lint(tmp_path, files, "train.py") if f.code == "TPF010"]
