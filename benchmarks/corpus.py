"""The real-world corpus (issue 6): lay it out from fetched snapshots, lint it, count it.

    python -m benchmarks.corpus layout --dest /work/corpus [--mirrors /work/.mirror]
    python -m benchmarks.corpus lint   --dest /work/corpus --out /tmp/findings.txt [--flake8]
    python -m benchmarks.corpus stats  --dest /work/corpus [--subset tuned|new]

Each subcommand takes `--toml PATH` to use another set laid out the same way (a held-out set,
e.g. `benchmarks/heldout_own.toml`) instead of `benchmarks/corpus.toml`.

`benchmarks/corpus.toml` names each repository, the commit and the folders (or single files)
that are training-relevant. `layout` reads the snapshot that the `fetch` tool brought to
`<mirrors>/<owner>+<name>/repo` (a bare git directory) and writes only the `.py` files of those
folders at that commit to `<dest>/<name>/...`, so the corpus is the same on every machine that
has the snapshots. Nothing of the corpus lives in this repository.

`lint` runs our rules over every corpus file, by default through the engine in-process (no
flake8 start-up, independent of the entry points), or with `--flake8` as
`flake8 --select TPF` subprocesses (what users run; honours `# noqa`). It writes one finding a
line, `<name>/<path>:<line>:<col>: <code> <message>` (flake8's 1-based column), and prints a
per-repository table of files, lines and findings per code. `--subset tuned` keeps the
repositories the rules were tuned on (`tuned = true`), `--subset new` the others.

`python -m benchmarks.mutants` injects the bugs the rules target into these files and measures
recall (docs/recall.md).
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import time
import tokenize
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
CORPUS_TOML = HERE / "corpus.toml"
DEFAULT_MIRRORS = Path("/work/.mirror")
DEFAULT_DEST = Path("/work/corpus")
MANIFEST = "corpus-manifest.json"
FINDING_RE = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<col>\d+): (?P<code>[A-Z]+\d+) (?P<text>.*)$")


class Repo(NamedTuple):
    name: str
    repo: str
    commit: str
    folders: Tuple[str, ...]
    kind: str = ""
    tuned: bool = False      # one of the repositories the rules were tuned on (issue 14)

    def git_dir(self, mirrors: Path) -> Path:
        owner, name = self.repo.split("/", 1)
        return mirrors / f"{owner}+{name}" / "repo"


def load_corpus(path: Path = CORPUS_TOML) -> List[Repo]:
    with open(path, "rb") as handle:
        data = tomllib.load(handle)
    repos = [Repo(r["name"], r["repo"], r["commit"], tuple(r["folders"]), r.get("kind", ""),
                  bool(r.get("tuned", False))) for r in data["repo"]]
    names = [r.name for r in repos]
    if len(set(names)) != len(names):
        raise SystemExit("corpus.toml: duplicate names")
    return repos


def select_repos(repos: Sequence[Repo], subset: str) -> List[Repo]:
    """`all`, `tuned` (the code the rules were tuned on) or `new` (the rest)."""
    if subset == "all":
        return list(repos)
    return [r for r in repos if r.tuned == (subset == "tuned")]


# ---------------------------------------------------------------------------------- layout

def _git(git_dir: Path, *args: str, stdin: Optional[bytes] = None) -> bytes:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], input=stdin,
                          stdout=subprocess.PIPE, check=True).stdout


def python_blobs(repo: Repo, git_dir: Path) -> List[Tuple[str, str]]:
    """(path, blob id) of every regular .py file under the repo's folders at its commit."""
    pathspec = [] if "." in repo.folders else ["--", *repo.folders]
    out = _git(git_dir, "ls-tree", "-r", "-z", repo.commit, *pathspec)
    blobs = []
    for entry in out.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        mode, kind, oid = meta.split()
        name = path.decode("utf-8", "surrogateescape")
        if kind == b"blob" and mode in (b"100644", b"100755") and name.endswith(".py"):
            blobs.append((name, oid.decode()))
    return sorted(blobs)


def unmatched_folders(repo: Repo, blobs: Sequence[Tuple[str, str]]) -> List[str]:
    """Folders (or files) of the entry that match no laid-out file: a typo or a moved path."""
    paths = [path for path, _ in blobs]
    return [folder for folder in repo.folders if folder != "."
            and not any(p == folder or p.startswith(folder.rstrip("/") + "/") for p in paths)]


def read_blobs(git_dir: Path, oids: Sequence[str]) -> Iterator[bytes]:
    """Contents of the blobs, in order, through one `git cat-file --batch`."""
    out = _git(git_dir, "cat-file", "--batch", stdin="".join(o + "\n" for o in oids).encode())
    pos = 0
    for _ in oids:
        header_end = out.index(b"\n", pos)
        size = int(out[pos:header_end].split()[2])
        start = header_end + 1
        yield out[start:start + size]
        pos = start + size + 1


def layout(repos: Sequence[Repo], mirrors: Path, dest: Path) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    manifest, missing = [], []
    for repo in repos:
        git_dir = repo.git_dir(mirrors)
        if not git_dir.is_dir():
            missing.append(f"{repo.repo}: no snapshot at {git_dir} (fetch github:{repo.repo})")
            continue
        try:
            _git(git_dir, "cat-file", "-e", f"{repo.commit}^{{commit}}")
        except subprocess.CalledProcessError:
            missing.append(f"{repo.repo}: commit {repo.commit} not in {git_dir}")
            continue
        target = dest / repo.name
        if target.exists():
            shutil.rmtree(target)
        blobs = python_blobs(repo, git_dir)
        for folder in unmatched_folders(repo, blobs):
            missing.append(f"{repo.repo}: no .py file under `{folder}` at {repo.commit[:12]}")
        for (path, _), data in zip(blobs, read_blobs(git_dir, [oid for _, oid in blobs])):
            out = target / path
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
        manifest.append({"name": repo.name, "repo": repo.repo, "commit": repo.commit,
                         "kind": repo.kind, "tuned": repo.tuned,
                         "folders": list(repo.folders), "files": len(blobs)})
        print(f"{repo.name:20} {repo.commit[:12]} {len(blobs):5d} .py files")
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    for line in missing:
        print("MISSING", line, file=sys.stderr)
    print(f"total {sum(m['files'] for m in manifest)} files in {len(manifest)} repositories -> {dest}")
    return 1 if missing else 0


# ---------------------------------------------------------------------------------- files

def corpus_files(dest: Path, repos: Sequence[Repo]) -> Dict[str, List[Path]]:
    """name -> sorted .py files laid out for it."""
    files = {}
    for repo in repos:
        root = dest / repo.name
        if not root.is_dir():
            raise SystemExit(f"{root} missing: run `python -m benchmarks.corpus layout` first")
        files[repo.name] = sorted(p for p in root.rglob("*.py") if p.is_file())
    return files


def read_source(path: Path) -> str:
    try:
        with tokenize.open(path) as handle:  # PEP 263 encoding, like flake8
            return handle.read()
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return path.read_bytes().decode("latin-1")


def count_lines(source: str) -> int:
    return len(source.splitlines())


# ---------------------------------------------------------------------------------- lint

def lint_engine(dest: Path, files: Dict[str, List[Path]]) -> List[str]:
    from flake8_torch_preflight.engine import lint_source

    out = []
    for name, paths in files.items():
        for path in paths:
            rel = path.relative_to(dest).as_posix()
            for f in lint_source(read_source(path), str(path)):
                out.append(f"{rel}:{f.line}:{f.col + 1}: {f.code} {f.message.split(' ', 1)[1]}"
                           if f.message.startswith(f.code) else
                           f"{rel}:{f.line}:{f.col + 1}: {f.code} {f.message}")
    return out


def lint_flake8(dest: Path, files: Dict[str, List[Path]], flake8: str, select: str,
                jobs: str) -> List[str]:
    out = []
    for name in files:
        proc = subprocess.run([flake8, "--isolated", f"--select={select}", f"-j{jobs}", name],
                              cwd=dest, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"flake8 failed on {name} (rc {proc.returncode}):\n{proc.stderr[-2000:]}")
        out.extend(line for line in proc.stdout.splitlines() if FINDING_RE.match(line))
    return out


def _sort_key(line: str):
    m = FINDING_RE.match(line)
    return (m["path"], int(m["line"]), int(m["col"]), m["code"]) if m else (line, 0, 0, "")


def table(dest: Path, files: Dict[str, List[Path]], findings: Sequence[str]) -> str:
    per_repo: Dict[str, collections.Counter] = {n: collections.Counter() for n in files}
    for line in findings:
        m = FINDING_RE.match(line)
        if m:
            per_repo[m["path"].split("/", 1)[0]][m["code"]] += 1
    codes = sorted({c for counter in per_repo.values() for c in counter})
    rows = ["| repo | files | lines | " + " | ".join(codes) + (" | " if codes else "") + "total |",
            "|---|---:|---:|" + "---:|" * (len(codes) + 1)]
    tot_files = tot_lines = 0
    totals: collections.Counter = collections.Counter()
    for name, paths in files.items():
        lines = sum(count_lines(read_source(p)) for p in paths)
        tot_files += len(paths)
        tot_lines += lines
        totals.update(per_repo[name])
        cells = [str(per_repo[name][c]) for c in codes]
        rows.append(f"| {name} | {len(paths)} | {lines} | " + " | ".join(cells)
                    + (" | " if codes else "") + f"{sum(per_repo[name].values())} |")
    rows.append(f"| **total** | {tot_files} | {tot_lines} | " + " | ".join(str(totals[c]) for c in codes)
                + (" | " if codes else "") + f"{sum(totals.values())} |")
    return "\n".join(rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.corpus")
    parser.add_argument("--corpus", type=Path, default=CORPUS_TOML, help="corpus.toml to use")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_layout = sub.add_parser("layout", help="write the corpus from the fetched snapshots")
    p_layout.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS)
    p_layout.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    p_lint = sub.add_parser("lint", help="run our rules over the corpus")
    p_lint.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    p_lint.add_argument("--out", type=Path, help="write the findings here (default: stdout)")
    p_lint.add_argument("--flake8", nargs="?", const="flake8", default=None, metavar="EXE",
                        help="run `flake8 --select TPF` (optionally this executable) instead "
                             "of the engine in-process")
    p_lint.add_argument("--select", default="TPF")
    p_lint.add_argument("--jobs", default="auto", help="flake8 -j (with --flake8)")
    for p in (p_lint,):
        p.add_argument("--subset", choices=("all", "tuned", "new"), default="all",
                       help="the repositories the rules were tuned on, the others, or all")
    p_stats = sub.add_parser("stats", help="files and lines per repository")
    p_stats.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    p_stats.add_argument("--subset", choices=("all", "tuned", "new"), default="all")
    for p in (p_layout, p_lint, p_stats):
        p.add_argument("--toml", type=Path, default=None, metavar="PATH",
                       help="another corpus toml (a held-out set); overrides --corpus")
    args = parser.parse_args(argv)

    repos = load_corpus(args.toml or args.corpus)
    if args.cmd == "layout":
        return layout(repos, args.mirrors, args.dest)
    files = corpus_files(args.dest, select_repos(repos, args.subset))
    if args.cmd == "stats":
        print(table(args.dest, files, []))
        return 0
    start = time.perf_counter()
    if args.flake8:
        findings = lint_flake8(args.dest, files, args.flake8, args.select, args.jobs)
    else:
        findings = lint_engine(args.dest, files)
        findings = [f for f in findings if FINDING_RE.match(f)["code"].startswith(args.select)]
    findings.sort(key=_sort_key)
    elapsed = time.perf_counter() - start
    text = "".join(line + "\n" for line in findings)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    print(table(args.dest, files, findings), file=sys.stderr if not args.out else sys.stdout)
    print(f"{len(findings)} findings in {elapsed:.1f} s", file=sys.stderr if not args.out else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
