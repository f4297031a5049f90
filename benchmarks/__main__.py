"""Benchmark: the plugin's own work per file against stock flake8 on the same files.

    python -m benchmarks [--repeat 7] [paths...]

Prints median CPU milliseconds per file for (a) our analysis on flake8's already-parsed tree,
(b) stock flake8 (pyflakes, pycodestyle, mccabe; our plugins filtered out) checking the file
in-process, and their ratio; for the fixtures, a generated 2,000-line training module, and
one 500-line function against small ones (cost per line must not grow with function size).
"""
from __future__ import annotations

import argparse
import ast
import statistics
import sys
import tempfile
import time
from pathlib import Path

from flake8_torch_preflight.engine import lint_tree

from .generate import long_function, training_module

ROOT = Path(__file__).resolve().parent.parent
OUR_PACKAGE = "flake8-torch-preflight"


def cpu_ms(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        samples.append((time.process_time() - start) * 1000)
    return statistics.median(samples)


def plugin_ms(source: str, repeat: int) -> float:
    tree = ast.parse(source)
    return cpu_ms(lambda: lint_tree(tree, "bench.py"), repeat)


def stock_flake8_guide():
    """A flake8 style guide with every installed plugin except ours."""
    from flake8.api import legacy
    from flake8.main.options import JobsArgument
    from flake8.plugins import finder

    original = finder.find_plugins

    def without_ours(cfg, opts):
        return [p for p in original(cfg, opts) if p.package != OUR_PACKAGE]

    finder.find_plugins = without_ours
    try:
        return legacy.get_style_guide(isolated=True, quiet=2, jobs=JobsArgument("1"))
    finally:
        finder.find_plugins = original


def flake8_ms(guide, path: Path, repeat: int) -> float:
    return cpu_ms(lambda: guide.check_files([str(path)]), repeat)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args(argv)
    guide = stock_flake8_guide()
    tmp = Path(tempfile.mkdtemp(prefix="tpf-bench-"))

    files = args.paths or sorted((ROOT / "fixtures").glob("TPF*/*.py"))
    ours, stock = [], []
    for path in files:
        source = path.read_text()
        ours.append(plugin_ms(source, args.repeat))
        stock.append(flake8_ms(guide, path, args.repeat))
    print(f"fixtures: {len(files)} files")
    print(f"  plugin   median {statistics.median(ours):7.2f} ms/file  total {sum(ours):8.1f} ms")
    print(f"  flake8   median {statistics.median(stock):7.2f} ms/file  total {sum(stock):8.1f} ms")
    print(f"  plugin / stock flake8 = {sum(ours) / sum(stock):.1%}")

    big = tmp / "generated_2000.py"
    big.write_text(training_module(2000))
    lines = big.read_text().count("\n")
    big_ours = plugin_ms(big.read_text(), args.repeat)
    big_stock = flake8_ms(guide, big, max(3, args.repeat // 2))
    print(f"generated module: {lines} lines")
    print(f"  plugin {big_ours:7.1f} ms   stock flake8 {big_stock:7.1f} ms   "
          f"ratio {big_ours / big_stock:.1%}   (budget: <= 150 ms and <= 25%)")

    small = long_function(50)
    large = long_function(500)
    small_per_line = plugin_ms(small, args.repeat) / small.count("\n")
    large_per_line = plugin_ms(large, args.repeat) / large.count("\n")
    print(f"one function: {small.count(chr(10))} lines {small_per_line * 1000:.1f} us/line; "
          f"{large.count(chr(10))} lines {large_per_line * 1000:.1f} us/line "
          f"(ratio {large_per_line / small_per_line:.2f}, must stay near 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
