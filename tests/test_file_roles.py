"""Which files are pytest files: rules that judge training scripts stay out of them."""
from __future__ import annotations

import ast

import pytest

from flake8_torch_preflight.analysis import FileAnalysis

_SWA_TEST = '''
import torch


def test_swa_matches_dense_attention():
    torch.manual_seed(123)
    att = torch.nn.MultiheadAttention(64, 4)
    att.eval()
    x = torch.randn(5, 2, 64)
    out, _ = att(x, x, x)
    assert out.shape == x.shape
'''


@pytest.mark.parametrize("path, is_test", [
    ("ch04/06_swa/tests.py", True),
    ("project/tests/check_model.py", True),
    ("tests/conftest.py", True),
    ("test_model.py", True),
    ("model_test.py", True),
    ("test.py", False),          # the evaluation script of many training repositories
    ("testing/evaluate.py", False),
    ("train.py", False),
])
def test_pytest_file_names(path, is_test):
    assert FileAnalysis(ast.parse(""), path).is_test_file is is_test


def test_eval_forward_in_a_tests_py_is_a_test_not_evaluation_code(tmp_path):
    from flake8_torch_preflight.plugin import TorchPreflightChecker

    found = []
    for name in ("tests.py", "evaluate_swa.py"):
        path = tmp_path / name
        path.write_text(_SWA_TEST)
        checker = TorchPreflightChecker(ast.parse(_SWA_TEST), _SWA_TEST.splitlines(True), str(path))
        found.append([message.split()[0] for _, _, message, _ in checker.run()])
    assert found[0] == []
    assert "TPF002" in found[1]
