"""``vram-estimate``: the command line.

    vram-estimate train.py --gpu h100-80gb
    vram-estimate train.py config/train_gpt2.py           # nanoGPT-style configurator override
    vram-estimate recipe.yaml --gpu a100-80gb              # torchtune / litgpt / axolotl / HF / DeepSpeed
    vram-estimate --model llama-3-8b --gpu a100-80gb --mode generate --batch 16 --context 8192
    vram-estimate gpus | models
    vram-estimate train.py --format json

Every ``# vram:`` comment key has a flag of the same name; flags win over comments, which win
over config files, which win over what is read from the script.  Every flag is checked
before anything is estimated: a bad value is one ``vram-estimate: error:`` line.

``--trace`` adds a traced estimate beside the static one (docs/vram.md, "Traced estimate");
without torch and transformers it is one line and the bad-input exit status.

Exit status: 0 fits (or no target), 1 tight, 2 oom, 3 bad input (a flag, a ``# vram:``
comment or a config value that is wrong; an unknown model or GPU), 4 no model named,
5 an input that cannot be read (missing, undecodable, a syntax error, an unreadable config).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, List, Optional, Tuple

from .knowledge import db
from .reading.config_comments import KEYS, normalise

# 2 is bad usage, as for `tpf` and flake8 (argparse's own code); an OOM verdict has its own
# code so that a script can tell "will not fit" from "did not understand me". 3 is retired
# (it was bad input before bad input joined bad usage on 2).
EXIT_FITS, EXIT_TIGHT, EXIT_BAD_INPUT, EXIT_NO_MODEL, EXIT_UNREADABLE, EXIT_OOM = 0, 1, 2, 4, 5, 6
EXIT_STATUS = ("exit status: 0 fits (or no target), 1 tight, 2 bad usage or bad input (unknown "
               "option, malformed value or '# vram:' comment, unknown model or GPU), 4 no model, "
               "5 unreadable input, 6 oom")
CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".sh", ".bash")


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors exit with EXIT_BAD_INPUT (2, argparse's own)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _checked(key: str) -> Callable[[str], str]:
    """An argparse type that accepts exactly what a '# vram: key=' comment accepts."""

    def check(text: str) -> str:
        _value, error = normalise(key, text)
        if error:
            raise argparse.ArgumentTypeError(error)
        return text

    check.__name__ = key  # argparse names the type in "invalid <name> value" messages
    return check


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="vram-estimate",
        description="Will this PyTorch job fit on that GPU? "
        "A static estimate from the script, its config files and '# vram:' comments.",
        epilog=EXIT_STATUS,
    )
    p.add_argument(
        "inputs",
        nargs="*",
        metavar="input",
        help="a training/inference script, then config files (YAML/JSON, or nanoGPT-style .py "
        "overrides); a config file alone; or 'gpus' / 'models'",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--json", dest="format", action="store_const", const="json",
                   help="same as --format json")
    for key in KEYS:
        p.add_argument(f"--{key}", default=None, type=_checked(key), help=f"same as '# vram: {key}=...'")
    p.add_argument("--lora-targets", default=None, help="comma-separated LoRA target modules, or all-linear")
    p.add_argument(
        "--trace",
        action="store_true",
        help="also build the model with transformers on fake tensors and trace one step under "
        "PyTorch's memory tracker (needs the [trace] extra: torch, transformers; peft for LoRA); "
        "both estimates side by side",
    )
    p.add_argument(
        "--gpus", dest="world", default=None, type=_checked("world"), help="ranks of the run; same as --world"
    )
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


def _split_inputs(inputs: List[str]) -> Tuple[Optional[str], List[str]]:
    """The script (a ``.py`` first) and the config files that follow it or stand alone; a
    launch script alone (``run.sh``) brings the Python script its launch line runs."""
    if inputs and inputs[0].lower().endswith(CONFIG_SUFFIXES):
        return _launched_script(inputs[0]), inputs
    return (inputs[0] if inputs else None), inputs[1:]


def _launched_script(path: str) -> Optional[str]:
    """The ``.py`` a shell script's launch line runs, when it exists beside the shell script."""
    if not path.lower().endswith((".sh", ".bash")):
        return None
    from .reading.configs import read_config

    launch = read_config(path).launch
    if launch is None or not launch.script:
        return None
    found = os.path.join(os.path.dirname(path), launch.script)
    return found if os.path.isfile(found) else None


def exit_status(result: Any) -> int:
    if result.input_error:
        return EXIT_UNREADABLE
    if result.errors:
        return EXIT_BAD_INPUT
    if result.estimate is None:
        return EXIT_NO_MODEL
    return {"fits": EXIT_FITS, "tight": EXIT_TIGHT, "oom": EXIT_OOM}.get(result.estimate.verdict or "fits", 0)


def _listing(inputs: List[str], fmt: str) -> Optional[str]:
    """``vram-estimate gpus`` / ``models``: the table, or None for any other command line."""
    if len(inputs) != 1 or inputs[0] not in ("gpus", "models"):
        return None
    return _list_gpus(fmt) if inputs[0] == "gpus" else _list_models(fmt)


def _trace_possible() -> bool:
    """``--trace`` without torch or transformers: one line, and the caller exits with the bad-input status."""
    from .tracing import missing

    why = missing()
    if why:
        print(f"vram-estimate: {why}", file=sys.stderr)
    return why is None


def _attach_trace(args: argparse.Namespace, result: Any) -> None:
    """With ``--trace``, the traced estimate beside a static one (not when there is none)."""
    if args.trace and result.estimate is not None:
        from .tracing.compare import traced_estimate

        result.traced = traced_estimate(result.estimate)


def main(argv: Optional[List[str]] = None) -> int:
    """The `vram-estimate` command; a reader that stops early (`| head`) ends it quietly."""
    try:
        return _main(argv)
    except BrokenPipeError:
        try:   # the interpreter flushes stdout at exit: point it at nothing first
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


def _main(argv: Optional[List[str]]) -> int:
    from .api import estimate_config, estimate_configs, estimate_file
    from .report import json_report, text_report

    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error (2) or --help (0), already printed
        return int(exc.code or 0)
    if args.trace and not _trace_possible():
        return EXIT_BAD_INPUT
    listing = _listing(args.inputs, args.format)
    if listing is not None:
        print(listing)
        return 0
    overrides = {k: getattr(args, k) for k in KEYS if getattr(args, k) is not None}
    if args.lora_targets:
        overrides["lora_targets"] = [t.strip() for t in args.lora_targets.split(",") if t.strip()]
    script, configs = _split_inputs(args.inputs)
    if script:
        result = estimate_file(script, overrides=overrides, configs=configs)
    elif configs:
        result = estimate_configs(configs, overrides=overrides)
    else:
        if not overrides:
            parser.print_help()
            return EXIT_NO_MODEL
        result = estimate_config(**overrides)
    _attach_trace(args, result)
    name = configs[0] if configs and configs[0].lower().endswith((".sh", ".bash")) else script
    name = name or (configs[0] if configs else None)
    if result.input_error and args.format == "text":
        print(f"vram-estimate: {result.input_error}", file=sys.stderr)
    elif args.format == "json":
        print(json.dumps(json_report(result, name), indent=1))
    else:
        print(text_report(result, name))
    return exit_status(result)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
