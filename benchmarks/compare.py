"""Speed side by side with the closest peer, on the real-world corpus, in one run (issue 6).

    python benchmarks/compare.py --dest /work/corpus [--out /tmp/compare.json]
                                 [--peer-timeout 600] [--repos nanoGPT detr ...]

Not part of CI. It makes (or reuses) virtual environments under /tmp:

    /tmp/tpfcmp-peer   torch-preflight==0.5.0 from the package registry
    /tmp/tpfcmp-stock  flake8 only (the same flake8 version as ours)
    /tmp/tpfcmp-ours   flake8 + this project (`pip install <repo root>`)
    /tmp/tpfcmp-torch  flake8 + this project + torch==2.13.0 (CPU wheel)

(the names carry a `tpfcmp-` prefix so that they never collide with anyone's /tmp/venv-*),
and times, per corpus repository, each tool as a subprocess, single process:

    peer   torch-preflight check --jobs 1 -q <repo>
    stock  flake8 --isolated -j 1 <repo>                     (pyflakes, pycodestyle, mccabe)
    ours   flake8 --isolated -j 1 --extend-select TPF <repo> (the same checks + our plugins)
    tpf    flake8 --isolated -j 1 --select TPF <repo>         (what users run for our codes;
                                                              flake8 still runs every check)

Wall time by perf_counter; CPU (user+sys) and peak RSS of that child from os.wait4's rusage.
"Plugin work" is ours − stock (flake8 runs the stock checks either way), and, measured
directly, the CPU our engine spends per file in-process (run inside /tmp/tpfcmp-ours), which
also gives the ms/line distribution. Finally the TPF findings from /tmp/tpfcmp-torch are
compared with those from /tmp/tpfcmp-ours: they must be identical.

A peer run that uses more than --peer-timeout seconds of CPU on one repository (CPU, not wall,
so that a busy machine does not cut it short) is killed; its CPU up to then is a lower bound
and is marked with ">".
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
VENVS = {
    "peer": ["torch-preflight==0.5.0"],
    "stock": ["flake8==7.5.0"],
    "ours": ["flake8==7.5.0", str(ROOT)],
    "torch": ["flake8==7.5.0", str(ROOT), "torch==2.13.0"],
}
FRESH_INSTALL = ("ours", "torch")  # reinstalled every run: they carry the working tree


def venv(name: str) -> Path:
    return Path(f"/tmp/tpfcmp-{name}")


def ensure_venvs(names: Sequence[str], rebuild: bool) -> None:
    for name in names:
        path = venv(name)
        marker = path / ".made-by-tpf-compare"
        if path.exists() and not marker.exists():
            raise SystemExit(f"{path} exists but was not made by this script; not touching it")
        if not (path / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
            marker.write_text("made by benchmarks/compare.py\n")
        elif not rebuild and name not in FRESH_INSTALL:
            continue
        args = [str(path / "bin" / "pip"), "install", "-q"]
        if name in FRESH_INSTALL and (path / "bin" / "flake8").exists():
            args += ["--force-reinstall", "--no-deps", str(ROOT)]
        else:
            args += VENVS[name]
        print("+", " ".join(args), file=sys.stderr)
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def _cpu_so_far(pid: int) -> float:
    """user+sys seconds a running process has used (Linux /proc), 0 if unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def timed(cmd: List[str], cwd: Path, timeout: Optional[float] = None) -> Dict:
    """Run cmd; wall seconds, CPU seconds and peak RSS (MiB) of that child alone."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if timeout is not None and _cpu_so_far(proc.pid) > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                timed_out = True
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
            "rss_mib": usage.ru_maxrss / 1024, "rc": proc.returncode,
            "timed_out": timed_out, "output": text}


def tool_commands(name: str, repo: str) -> List[str]:
    bin_ = lambda v, exe: str(venv(v) / "bin" / exe)  # noqa: E731
    return {
        "peer": [bin_("peer", "torch-preflight"), "check", "--jobs", "1", "-q", "--no-color", repo],
        "stock": [bin_("stock", "flake8"), "--isolated", "-j", "1", "--exit-zero", repo],
        "ours": [bin_("ours", "flake8"), "--isolated", "-j", "1", "--exit-zero",
                 "--extend-select", "TPF", repo],
        "tpf": [bin_("ours", "flake8"), "--isolated", "-j", "1", "--exit-zero",
                "--select", "TPF", repo],
        "tpf-torch": [bin_("torch", "flake8"), "--isolated", "-j", "1", "--exit-zero",
                      "--select", "TPF", repo],
    }[name]


PERFILE = r"""
import ast, json, sys, time, tokenize
from pathlib import Path
from flake8_torch_preflight.engine import lint_tree
rows = []
for line in sys.stdin:
    path = Path(line.strip())
    try:
        with tokenize.open(path) as h:
            src = h.read()
        tree = ast.parse(src)
    except Exception:
        continue
    best = None
    for _ in range(3):
        t = time.process_time(); lint_tree(tree, str(path)); t = time.process_time() - t
        best = t if best is None else min(best, t)
    rows.append([str(path), len(src.splitlines()), best * 1000, sum(1 for _ in ast.walk(tree))])
json.dump(rows, sys.stdout)
"""


def per_file(dest: Path, files: List[Path]) -> List[list]:
    proc = subprocess.run([str(venv("ours") / "bin" / "python"), "-c", PERFILE],
                          input="\n".join(map(str, files)), text=True, stdout=subprocess.PIPE,
                          check=True, cwd="/tmp")
    return json.loads(proc.stdout)


def tpf_lines(output: str) -> List[str]:
    return sorted(line for line in output.splitlines() if ": TPF" in line)


def fmt_cpu(row: Dict) -> str:
    return (">" if row["timed_out"] else "") + f"{row['cpu']:.1f}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    sys.path.insert(0, str(ROOT))
    from benchmarks.corpus import corpus_files, load_corpus  # noqa: E402

    parser = argparse.ArgumentParser(prog="benchmarks/compare.py")
    parser.add_argument("--dest", type=Path, default=Path("/work/corpus"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/compare.json"))
    parser.add_argument("--peer-timeout", type=float, default=600.0)
    parser.add_argument("--repos", nargs="*", help="only these corpus repositories")
    parser.add_argument("--tools", nargs="*", default=["peer", "stock", "ours", "tpf", "tpf-torch"])
    parser.add_argument("--rebuild-venvs", action="store_true")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each tool this many times per repository; keep the run with "
                             "the least CPU (best of N; the machine may be shared)")
    args = parser.parse_args(argv)

    repos = [r for r in load_corpus() if not args.repos or r.name in args.repos]
    files = corpus_files(args.dest, repos)
    needed = sorted({"peer" if t == "peer" else "stock" if t == "stock" else
                     "torch" if t == "tpf-torch" else "ours" for t in args.tools} | {"ours"})
    ensure_venvs(needed, args.rebuild_venvs)
    version = subprocess.run([str(venv("peer") / "bin" / "torch-preflight"), "--version"],
                             stdout=subprocess.PIPE, text=True).stdout.strip() if "peer" in needed else ""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], stdout=subprocess.PIPE,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--",
                                 "flake8_torch_preflight", "vram_estimator"],
                                stdout=subprocess.PIPE, text=True).stdout.strip())

    results: Dict[str, Dict[str, Dict]] = {}
    for repo in repos:
        n_files = len(files[repo.name])
        n_lines = sum(len(p.read_bytes().splitlines()) for p in files[repo.name])
        results[repo.name] = {"files": n_files, "lines": n_lines}
        for tool in args.tools:
            runs = [timed(tool_commands(tool, repo.name), args.dest,
                          args.peer_timeout if tool == "peer" else None)
                    for _ in range(1 if tool == "peer" else max(1, args.repeat))]
            row = min(runs, key=lambda r: r["cpu"])
            if tool.startswith("tpf"):
                row["findings"] = tpf_lines(row["output"])
            row.pop("output")
            results[repo.name][tool] = row
            print(f"{repo.name:18} {tool:9} wall {row['wall']:7.1f} s  cpu {fmt_cpu(row):>7} s  "
                  f"rss {row['rss_mib']:6.0f} MiB  rc {row['rc']}", file=sys.stderr, flush=True)

    all_files = [p for name in files for p in files[name]]
    perfile = per_file(args.dest, all_files)

    # ------------------------------------------------------------------ summary
    def total(tool: str, key: str) -> float:
        return sum(r[tool][key] for r in results.values() if tool in r)

    tot_files = sum(r["files"] for r in results.values())
    tot_lines = sum(r["lines"] for r in results.values())
    lines = [f"corpus: {len(repos)} repositories, {tot_files} files, {tot_lines} lines; "
             f"ours at {commit[:12]}{' + uncommitted work tree' if dirty else ''}; {version}",
             "",
             "| tool | wall s | CPU s | peak RSS MiB | CPU ms / 1k lines |",
             "|---|---:|---:|---:|---:|"]
    for tool in args.tools:
        timeouts = sum(1 for r in results.values() if r[tool]["timed_out"])
        mark = ">" if timeouts else ""
        lines.append(f"| {tool} | {mark}{total(tool, 'wall'):.1f} | {mark}{total(tool, 'cpu'):.1f} | "
                     f"{max(r[tool]['rss_mib'] for r in results.values()):.0f} | "
                     f"{mark}{total(tool, 'cpu') / tot_lines * 1e6:.1f} |")
    summary = {}
    if {"peer", "tpf"} <= set(args.tools):
        summary["peer_over_tpf_cpu"] = total("peer", "cpu") / total("tpf", "cpu")
        summary["peer_over_tpf_wall"] = total("peer", "wall") / total("tpf", "wall")
        # apples to apples on the repositories where the peer finished
        done = [n for n, r in results.items() if not r["peer"]["timed_out"]]
        summary["peer_over_tpf_cpu_finished_repos"] = (
            sum(results[n]["peer"]["cpu"] for n in done) / sum(results[n]["tpf"]["cpu"] for n in done))
        summary["peer_timeouts"] = [n for n, r in results.items() if r["peer"]["timed_out"]]
    if {"stock", "ours"} <= set(args.tools):
        stock_cpu = total("stock", "cpu")
        summary["plugin_share_subprocess"] = (total("ours", "cpu") - stock_cpu) / stock_cpu
    engine_ms = sum(r[2] for r in perfile)
    if "stock" in args.tools:
        summary["plugin_share_inprocess"] = engine_ms / 1000 / total("stock", "cpu")
    measured = [r for r in perfile if r[1] >= 20]
    per_line = sorted(r[2] / r[1] for r in measured)
    median = statistics.median(per_line)
    p99 = per_line[int(0.99 * (len(per_line) - 1))]
    above = sorted(((r[2] / r[1], r[0], r[1], r[2]) for r in measured if r[2] / r[1] > 3 * median),
                   reverse=True)
    summary.update(engine_cpu_s=engine_ms / 1000, files_measured=len(measured),
                   ms_per_line_median=median, ms_per_line_p99=p99, ms_per_line_max=per_line[-1],
                   files_above_3x_median=len(above), slowest=[list(a) for a in above[:15]])
    # second measure: µs per AST node (dense files inflate ms/line; nodes are the work unit)
    per_node = sorted(r[2] * 1000 / r[3] for r in measured)
    node_median = statistics.median(per_node)
    node_above = sorted(((r[2] * 1000 / r[3], r[0], r[3], r[2]) for r in measured
                         if r[2] * 1000 / r[3] > 3 * node_median), reverse=True)
    summary.update(us_per_node_median=node_median,
                   us_per_node_p99=per_node[int(0.99 * (len(per_node) - 1))],
                   us_per_node_max=per_node[-1], files_above_3x_node_median=len(node_above),
                   slowest_per_node=[list(a) for a in node_above[:15]])
    if {"tpf", "tpf-torch"} <= set(args.tools):
        diffs = {n: sorted(set(r["tpf"]["findings"]) ^ set(r["tpf-torch"]["findings"]))
                 for n, r in results.items()}
        summary["torch_identical"] = not any(diffs.values())
        summary["torch_diffs"] = {n: d for n, d in diffs.items() if d}

    lines += ["", "| repo | files | lines | " + " | ".join(f"{t} CPU s" for t in args.tools) + " |",
              "|---|---:|---:|" + "---:|" * len(args.tools)]
    for name, r in results.items():
        lines.append(f"| {name} | {r['files']} | {r['lines']} | "
                     + " | ".join(fmt_cpu(r[t]) for t in args.tools) + " |")
    lines += ["", json.dumps(summary, indent=2)]
    report = "\n".join(lines)
    print(report)
    args.out.write_text(json.dumps({"commit": commit, "dirty": dirty, "peer": version,
                                    "results": results, "summary": summary,
                                    "perfile": perfile}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
