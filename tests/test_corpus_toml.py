"""`python -m benchmarks.corpus <cmd> --toml PATH` reads another set (a held-out set)."""
from benchmarks import corpus

HELDOUT = """
[[repo]]
name = "tiny"
kind = "vision classification"
repo = "someone/tiny"
commit = "0000000000000000000000000000000000000000"
folders = ["."]
"""

TRAIN = """import torch

model = torch.nn.Linear(2, 1)
for x in range(3):
    pass
"""


def test_stats_and_lint_read_the_toml_given(tmp_path, capsys):
    toml = tmp_path / "heldout.toml"
    toml.write_text(HELDOUT)
    dest = tmp_path / "dest"
    (dest / "tiny").mkdir(parents=True)
    (dest / "tiny" / "train.py").write_text(TRAIN)
    assert corpus.main(["stats", "--toml", str(toml), "--dest", str(dest)]) == 0
    assert "| tiny | 1 |" in capsys.readouterr().out
    out = tmp_path / "findings.txt"
    assert corpus.main(["lint", "--toml", str(toml), "--dest", str(dest), "--out", str(out)]) == 0
    assert out.exists()
    assert "| tiny | 1 |" in capsys.readouterr().out


def test_without_toml_the_corpus_is_read(tmp_path):
    dest = tmp_path / "empty"
    dest.mkdir()
    try:
        corpus.main(["stats", "--dest", str(dest)])
    except SystemExit as exc:  # the 51 corpus repositories are not laid out there
        assert "missing" in str(exc)
    else:
        raise AssertionError("expected the default corpus.toml to be read")
