"""``vram-estimate``: the command line.

    vram-estimate train.py --gpu h100-80gb
    vram-estimate --model llama-3-8b --gpu a100-80gb --mode generate --batch 16 --context 8192
    vram-estimate gpus | models
    vram-estimate train.py --format json

Every ``# vram:`` comment key has a flag of the same name; flags win over comments, which win
over what is read from the script.  Exit status: 0 fits (or no target), 1 tight, 2 oom,
3 bad input (TPF102), 4 no model.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

from . import db
from .config_comments import KEYS


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vram-estimate",
        description="Will this PyTorch job fit on that GPU? "
        "A static estimate from the script and '# vram:' comments.",
    )
    p.add_argument("script", nargs="?", help="a training/inference script, or 'gpus' / 'models'")
    p.add_argument("--format", choices=("text", "json"), default="text")
    for key in KEYS:
        p.add_argument(f"--{key}", default=None, help=f"same as '# vram: {key}=...'")
    p.add_argument("--lora-targets", default=None, help="comma-separated LoRA target modules, or all-linear")
    return p


def _list_gpus(fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"gpus": db.gpus(), "instances": db.instances()}, indent=1)
    out = [f"{'gpu':<14} {'GiB':>7}  bf16  aliases"]
    for k in db.gpu_names():
        g = db.gpus()[k]
        out.append(
            f"{k:<14} {g['memory_mib'] / 1024:>7.1f}  {'yes' if g['bf16'] else 'no ':<4}  "
            f"{', '.join(g['aliases'][:3])}"
        )
    out.append("")
    out.append(f"{'instance':<28} {'cloud':<7} gpus")
    for k in db.instance_names():
        i = db.instances()[k]
        out.append(f"{k:<28} {i['cloud']:<7} {i['count']} x {i['gpu']}")
    return "\n".join(out)


def _list_models(fmt: str) -> str:
    if fmt == "json":
        return json.dumps(
            {
                k: dict(family=e["family"], params=db.count_params(k), aliases=e["aliases"])
                for k, e in db.models().items()
            },
            indent=1,
        )
    out = [f"{'model':<24} {'family':<12} {'params':>17}  aliases"]
    for k in db.model_names():
        e = db.models()[k]
        out.append(f"{k:<24} {e['family']:<12} {db.count_params(k):>17,}  {', '.join(e['aliases'][:2])}")
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    from .api import estimate_config, estimate_source
    from .report import json_report, text_report

    args = _parser().parse_args(argv)
    if args.script == "gpus":
        print(_list_gpus(args.format))
        return 0
    if args.script == "models":
        print(_list_models(args.format))
        return 0
    overrides = {k: getattr(args, k) for k in KEYS if getattr(args, k) is not None}
    if args.lora_targets:
        overrides["lora_targets"] = [t.strip() for t in args.lora_targets.split(",") if t.strip()]
    if args.script:
        try:
            with open(args.script, encoding="utf-8") as handle:
                source = handle.read()
        except OSError as exc:
            print(f"vram-estimate: cannot read {args.script}: {exc}", file=sys.stderr)
            return 4
        result = estimate_source(source, filename=args.script, overrides=overrides)
    else:
        if not overrides:
            _parser().print_help()
            return 4
        result = estimate_config(**overrides)
    if args.format == "json":
        print(json.dumps(json_report(result, args.script), indent=1))
    else:
        print(text_report(result, args.script))
    if result.errors:
        return 3
    if result.estimate is None:
        return 4
    return {"fits": 0, "tight": 1, "oom": 2}.get(result.estimate.verdict or "fits", 0)


def _run() -> int:  # pragma: no cover - console entry with a quiet broken pipe (`| head`)
    try:
        return main()
    except BrokenPipeError:
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_run())
