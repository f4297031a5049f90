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


INIT_HELPERS = textwrap.dedent('''
    import torch


    def layer_init(layer, std=1.0):
        torch.nn.init.orthogonal_(layer.weight, std)
        return layer


    def wrapped(layer, wrap):
        layer = wrap(layer)
        return layer
''')

CRITIC = textwrap.dedent('''
    import torch
    import torch.nn as nn
    from inits import {helper}


    class Critic(nn.Module):
        def __init__(self, wrap):
            super().__init__()
            self.value = {helper}(nn.Linear(8, 1), wrap)

        def get_value(self, x):
            return self.value(torch.tanh(x))


    def train(observations, returns, accum_steps, wrap):
        critic = Critic(wrap)
        optimizer = torch.optim.SGD(critic.parameters(), lr=0.01)
        for i in range(len(observations)):
            loss = ((critic.get_value(observations[i]) - returns[i]) ** 2).mean()
            loss.backward()
            if (i + 1) % accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
''')


def test_identity_through_a_helper_of_another_file(tmp_path):
    """`layer_init` returns the layer it is given: the caller's head is that `nn.Linear`, in
    another file too; `wrapped` rebinds its parameter, so nothing is claimed of its result."""
    (tmp_path / "inits.py").write_text(INIT_HELPERS)
    _clear()
    summary = summaries.for_module(str(tmp_path / "inits.py"))
    assert summary.function("layer_init").returns_param == 0
    assert summary.function("wrapped").returns_param is None
    codes = {}
    for helper in ("layer_init", "wrapped"):
        path = tmp_path / f"train_{helper}.py"
        path.write_text(CRITIC.format(helper=helper))
        codes[helper] = {f.code for f in lint_source(path.read_text(), str(path))}
    assert "TPF004" in codes["layer_init"] and "TPF004" not in codes["wrapped"]
