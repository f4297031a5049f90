"""The cache across runs, measured: flake8 `-j 1` over corpus repositories, stock against
plugin, with the cache off, cold and warm.

    python -m benchmarks.cache_speed --dest /work/corpus [--repos detr,timm] [--warm 2]

Each configuration runs in a fresh process (so nothing of an earlier run is remembered in
memory), in-process flake8 (`legacy.get_style_guide(isolated=True, jobs=1).check_files`) over
every `.py` file of the repositories, one call per repository; the number is that process's
CPU time for the checks (`time.process_time`, start-up excluded). `stock` filters our two
plugins out, as `python -m benchmarks` does. The cache folder lands in a temporary working
directory (corpus repositories hold no root marker), emptied before the cold run; the
user's key (`XDG_CACHE_HOME`) in a folder beside it, so the benchmark leaves nothing behind.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence

from .corpus import DEFAULT_DEST


def _repos(dest: Path, names: str) -> List[Path]:
    chosen = [n for n in names.split(",") if n]
    folders = sorted(p for p in dest.iterdir() if p.is_dir() and not p.name.startswith("."))
    return [p for p in folders if not chosen or p.name in chosen]


def one_run(dest: Path, names: str, stock: bool) -> dict:
    """CPU seconds of flake8 over the repositories, in this process."""
    from flake8.api import legacy
    from flake8.main.options import JobsArgument

    from . import __main__ as bench

    guide = bench.stock_flake8_guide() if stock else \
        legacy.get_style_guide(isolated=True, quiet=2, jobs=JobsArgument("1"))
    files = 0
    start = time.process_time()
    for repo in _repos(dest, names):
        paths = sorted(str(p) for p in repo.rglob("*.py") if p.is_file())
        files += len(paths)
        guide.check_files(paths)
    return {"cpu_s": time.process_time() - start, "files": files}


def _spawn(dest: Path, names: str, mode: str, cwd: str) -> dict:
    env = dict(os.environ)
    env.pop("TPF_NO_CACHE", None)
    if mode == "off":
        env["TPF_NO_CACHE"] = "1"
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env["XDG_CACHE_HOME"] = os.path.join(cwd, "user-cache")
    out = subprocess.run([sys.executable, "-m", "benchmarks.cache_speed", "--dest", str(dest),
                          "--repos", names, "--one", "stock" if mode == "stock" else "plugin"],
                         cwd=cwd, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cache_speed")
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    parser.add_argument("--repos", default="", help="comma-separated corpus folders (default all)")
    parser.add_argument("--warm", type=int, default=2, help="warm runs after the cold one")
    parser.add_argument("--one", choices=("stock", "plugin"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_run(args.dest, args.repos, args.one == "stock")))
        return 0
    workdir = tempfile.mkdtemp(prefix="tpf-cache-speed-")
    try:
        runs = [("stock", "stock"), ("off", "plugin, cache off")]
        results = {}
        for mode, label in runs:
            results[label] = _spawn(args.dest, args.repos, mode, workdir)
        shutil.rmtree(os.path.join(workdir, ".tpf_cache"), ignore_errors=True)
        results["plugin, cold cache"] = _spawn(args.dest, args.repos, "cache", workdir)
        for index in range(args.warm):
            results[f"plugin, warm cache #{index + 1}"] = _spawn(args.dest, args.repos, "cache",
                                                                 workdir)
        results["stock (again)"] = _spawn(args.dest, args.repos, "stock", workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    stock = min(results["stock"]["cpu_s"], results["stock (again)"]["cpu_s"])
    print(f"{results['stock']['files']} files; CPU seconds of flake8 -j1 in-process")
    for label, result in results.items():
        extra = "" if label.startswith("stock") else \
            f"   plugin work {(result['cpu_s'] - stock) / stock:6.1%} of stock"
        print(f"  {label:<24} {result['cpu_s']:8.2f} s{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
