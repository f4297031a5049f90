"""Module summaries (issue 19): one analysis per module, plain data every importer reuses,
the same whatever was linted before."""
import pickle
import textwrap

from flake8_torch_preflight.analysis.topics import seeding
from flake8_torch_preflight.analysis.project import summaries, workspace
from flake8_torch_preflight.engine import lint_source

HELPER = textwrap.dedent('''
    import torch


    class GradHelper:
        def __init__(self, model):
            self.model = model
            self.params = list(model.parameters())

        def backward(self, loss):
            loss.backward()

        def grad_norm(self):
            total = 0.0
            for p in self.params:
                total += (p.grad ** 2).sum().item()
            return total

        def optimize(self, opt):
            self.norm = self.grad_norm()
            opt.step()
            opt.zero_grad()


    @torch.no_grad()
    def scaled(x, k):
        return x / k
''')

TRAIN = textwrap.dedent('''
    import torch
    import torch.nn.functional as F
    from helpers import GradHelper


    def train(model, loader, lr=0.1):
        model = model.cuda()
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        helper = GradHelper(model)
        for x, y in loader:
            loss = F.cross_entropy(model(x.cuda()), y.cuda())
            helper.backward(loss)
            helper.optimize(opt)
''')


def _project(tmp_path):
    (tmp_path / "helpers.py").write_text(HELPER)
    (tmp_path / "proxy.py").write_text("from helpers import GradHelper\n")
    entries = {"train_a.py": TRAIN, "train_b.py": TRAIN.replace("from helpers", "from proxy"),
               "helpers_user.py": "import torch\nimport helpers\n\nhelpers.scaled(torch.ones(2), 2)\n"}
    for name, text in entries.items():
        (tmp_path / name).write_text(text)
    return entries


def _clear():
    workspace.clear()
    summaries.clear()
    seeding._SUMMARIES.clear()
    seeding._MODULES.clear()


def test_summary_is_plain_data_keyed_by_content(tmp_path):
    _project(tmp_path)
    _clear()
    path = str(tmp_path / "helpers.py")
    summary = summaries.for_module(path)
    assert summary.key[0] == path and len(summary.key[1]) == 40
    assert pickle.loads(pickle.dumps(summary)) == summary
    optimize = summary.function("GradHelper.optimize")
    assert set(optimize.does) >= {"step", "reset"} and "backward" not in optimize.does
    assert summary.function("GradHelper.backward").does[:1] == ("backward",)
    assert summary.function("GradHelper.grad_norm").syncs_per_element == (16,)
    scaled = summary.function("scaled")
    assert scaled.grad_mode == "off" and scaled.returns.params == (0, 1)
    (cls,) = summary.classes
    assert dict(cls.attributes)["self.params"].tags == ("container", "params")
    (tmp_path / "helpers.py").write_text(HELPER + "\nX = 1\n")
    assert summaries.for_module(path).key != summary.key


def test_findings_and_summaries_do_not_depend_on_lint_order(tmp_path):
    entries = _project(tmp_path)

    def lint_in(order):
        _clear()
        out = {name: [f.message for f in lint_source(entries[name], str(tmp_path / name))]
               for name in order}
        return out, summaries.for_module(str(tmp_path / "helpers.py"))

    first, summary = lint_in(["train_a.py", "train_b.py", "helpers_user.py"])
    again, summary_again = lint_in(["helpers_user.py", "train_b.py", "train_a.py"])
    assert first == again and summary == summary_again
    assert first["train_a.py"] == first["train_b.py"] and any("TPF010" in m for m in first["train_a.py"])


def test_importers_share_one_analysis(tmp_path):
    """The second importer reads nothing again: the module's analysis and the facts the
    first importer computed are reused."""
    entries = _project(tmp_path)
    _clear()
    lint_source(entries["train_a.py"], str(tmp_path / "train_a.py"))
    helpers = workspace._CACHE[str(tmp_path / "helpers.py")][1]
    computed = dict(helpers._facts)
    lint_source(entries["train_b.py"], str(tmp_path / "train_b.py"))
    assert workspace._CACHE[str(tmp_path / "helpers.py")][1] is helpers
    assert all(helpers._facts[func] is facts for func, facts in computed.items())
