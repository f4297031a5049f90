"""Benchmark: the cost per line must not grow with the shape of the code.

    python -m benchmarks.shapes [--sizes 11000 23000 46000 100000] [--repeat 3]

For each size, two modules of about that many lines: one training function whose loop body
repeats `loss = model(x).sum(); loss.backward(); losses.append(loss)` (the shape that once
made one long function quadratic: every join copied the lines of all graphs seen so far),
and the same statements spread over many small functions. Prints the CPU time per line of
the plugin's analysis on flake8's parsed tree, the ratio one-function / many-functions
(the budget: at most 2 at every size), and the peak memory the analysis allocated.
"""
from __future__ import annotations

import argparse
import ast
import statistics
import sys
import time
import tracemalloc

from flake8_torch_preflight.engine import lint_tree

HEADER = "import torch\nimport torch.nn as nn\n\n\n"
STEP = ("        loss = model(x).sum()\n"
        "        loss.backward()\n"
        "        losses.append(loss)\n")


def one_function(lines: int) -> str:
    repeats = max(1, (lines - 8) // 3)
    return (HEADER + "def train(model, loader):\n    losses = []\n    for x in loader:\n"
            + STEP * repeats + "    return losses\n")


def many_functions(lines: int) -> str:
    per_function, chunks = 10, []
    for i in range(max(1, lines // (per_function + 6))):
        chunks.append(f"def train_{i}(model, loader):\n    losses = []\n    for x in loader:\n"
                      + STEP * (per_function // 3) + "    return losses\n\n\n")
    return HEADER + "".join(chunks)


def measure(source: str, repeat: int):
    """(CPU seconds per line, median over `repeat`; peak MiB allocated by one analysis)."""
    tree = ast.parse(source)
    lines = source.count("\n")
    samples = []
    for _ in range(repeat):
        start = time.process_time()
        lint_tree(tree, "shape.py")
        samples.append(time.process_time() - start)
    tracemalloc.start()
    lint_tree(tree, "shape.py")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(samples) / lines, peak / 2 ** 20


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.shapes")
    parser.add_argument("--sizes", type=int, nargs="+", default=[11000, 23000, 46000, 100000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print("| lines | one function µs/line | many functions µs/line | ratio | peak MiB (one / many) |")
    print("|---:|---:|---:|---:|---:|")
    worst = 0.0
    for size in args.sizes:
        one, one_mem = measure(one_function(size), args.repeat)
        many, many_mem = measure(many_functions(size), args.repeat)
        worst = max(worst, one / many)
        print(f"| {size} | {one * 1e6:.1f} | {many * 1e6:.1f} | {one / many:.2f} | "
              f"{one_mem:.0f} / {many_mem:.0f} |")
    print(f"worst ratio {worst:.2f} (budget: <= 2.00)")
    return 0 if worst <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
