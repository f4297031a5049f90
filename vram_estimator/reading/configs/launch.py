"""Launcher command lines: what ``torchrun``, ``python -m torch.distributed.run``, ``accelerate
launch``, ``deepspeed``, ``tune run`` and ``litgpt`` decide -- the number of ranks, the torchtune
recipe, the config files and script arguments they pass.

They are read from a shell script given on the command line (``vram-estimate train.py
run.sh``), and from the comment lines of a config file (a torchtune recipe config documents the
``tune run`` line that launches it).  Nothing is executed; a value that is not a literal
(``$NGPUS``, ``${N:-8}``) reads as nothing, and when several launch lines disagree on the
number of ranks none is taken.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..setting_names import interpret

# launcher -> (options giving processes per node, options giving nodes); products are the world
WORLD_OPTIONS: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "torchrun": (("nproc_per_node", "nproc-per-node"), ("nnodes",)),
    "accelerate": (("num_processes",), ()),  # accelerate's count is over every machine
    "deepspeed": (("num_gpus", "num-gpus"), ("num_nodes", "num-nodes")),
    "tune": (("nproc_per_node", "nproc-per-node"), ("nnodes",)),
    "litgpt": (("devices",), ("num_nodes",)),
}
# options that name a config file the run reads
CONFIG_OPTIONS = ("config_file", "config", "deepspeed", "deepspeed_config", "deepspeed_config_file")
TORCH_RUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
MAX_LINES = 2000


@dataclass
class Launch:
    """One launch command: its launcher, ranks, the torchtune recipe, the script it runs, the
    config files it names and the script's own ``--name value`` arguments."""

    line: int
    launcher: str
    how: str = ""
    world: Optional[int] = None
    recipe: str = ""
    script: str = ""
    configs: List[str] = field(default_factory=list)
    args: Dict[str, Any] = field(default_factory=dict)


def logical_lines(text: str, comments: bool) -> List[Tuple[int, str]]:
    """``(first line number, text)`` with backslash continuations joined; with ``comments``,
    only comment lines, their ``#`` removed (a config's header)."""
    out: List[Tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines()[:MAX_LINES], 1):
        line = raw.strip()
        if comments:
            if not line.startswith("#"):
                pending = ""
                continue
            line = line.lstrip("#").strip()
        elif line.startswith("#"):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    return out


def _launcher(tokens: List[str]) -> Tuple[Optional[str], List[str]]:
    """The launcher a command line starts with, and the tokens after it."""
    while tokens and _ENV.match(tokens[0]):  # CUDA_VISIBLE_DEVICES=0,1 torchrun ...
        tokens = tokens[1:]
    if not tokens:
        return None, []
    head = os.path.basename(tokens[0])
    if head == "torchrun":
        return "torchrun", tokens[1:]
    if head.startswith("python") and len(tokens) > 2 and tokens[1] == "-m" and tokens[2] in TORCH_RUN_MODULES:
        return "torchrun", tokens[3:]
    if head == "accelerate" and tokens[1:2] == ["launch"]:
        return "accelerate", tokens[2:]
    if head == "deepspeed":
        return "deepspeed", tokens[1:]
    if head == "tune" and tokens[1:2] == ["run"]:
        return "tune", tokens[2:]
    if head == "litgpt" and len(tokens) > 1:
        return "litgpt", tokens[1:]
    return None, []


def _options(tokens: List[str]) -> Tuple[Dict[str, Any], List[str]]:
    """``--name value`` / ``--name=value`` / bare ``--flag`` pairs, and the positional tokens."""
    options: Dict[str, Any] = {}
    positional: List[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.startswith("--") and len(token) > 2:
            name, eq, value = token[2:].partition("=")
            if not eq:
                nxt = tokens[i + 1] if i + 1 < len(tokens) else None
                if nxt is not None and not nxt.startswith("--"):
                    value, i = nxt, i + 1
                else:
                    value = "true"
            options[name] = _literal(value)
        elif not token.startswith("-"):
            positional.append(token)
        i += 1
    return options, positional


def _literal(text: str) -> Any:
    if re.fullmatch(r"\d{1,9}", text):
        return int(text)
    low = text.lower()
    return {"true": True, "false": False}.get(low, text)


def _split_at_program(launcher: str, tokens: List[str]) -> Tuple[List[str], str, List[str]]:
    """Launcher options, the program (a script, a recipe, a litgpt command) and its arguments."""
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-"):
            return tokens[:i], token, tokens[i + 1 :]
        if "=" not in token and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
            if launcher == "tune" or not tokens[i + 1].endswith(".py"):
                i += 1  # the option's value
        i += 1
    return tokens, "", []


def parse_launch(number: int, text: str) -> Optional[Launch]:
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError:
        return None
    launcher, rest = _launcher(tokens)
    if launcher is None:
        return None
    if launcher == "litgpt":  # litgpt finetune lora <model> --devices 2 ...: all its options are the run's
        launch_opts, program, program_args = rest, " ".join(t for t in rest[:2] if not t.startswith("-")), []
    else:
        launch_opts, program, program_args = _split_at_program(launcher, rest)
    options, _ = _options(launch_opts)
    args, positional = _options(program_args)
    launch = Launch(number, launcher, how=f"{launcher} line")
    launch.world = _world(launcher, options)
    if launcher == "tune":
        launch.recipe = program
    elif program.endswith(".py"):
        launch.script = program
    for source in (options, args):
        for name in CONFIG_OPTIONS:
            value = source.get(name)
            if isinstance(value, str) and value.lower().endswith((".yaml", ".yml", ".json")):
                launch.configs.append(value)
    launch.args = {k: v for k, v in args.items() if k not in CONFIG_OPTIONS}
    if launcher == "litgpt":
        launch.args = {k: v for k, v in options.items() if k not in CONFIG_OPTIONS}
        models = [t for t in _options(rest)[1][1:] if "/" in t]
        if models:
            launch.args.setdefault("checkpoint_dir", models[0])
    return launch


def _world(launcher: str, options: Dict[str, Any]) -> Optional[int]:
    per_node_names, node_names = WORLD_OPTIONS[launcher]
    per_node = next((options[n] for n in per_node_names if n in options), None)
    nodes = next((options[n] for n in node_names if n in options), 1)
    if launcher == "deepspeed" and per_node is None and isinstance(options.get("include"), str):
        hosts = options["include"].split("@")
        if len(hosts) == 1 and ":" in hosts[0]:
            per_node = len(hosts[0].split(":", 1)[1].split(","))
    if not isinstance(per_node, int) or isinstance(per_node, bool) or per_node <= 0:
        return None
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes <= 0:
        nodes = 1  # an elastic range (--nnodes=1:4) or a variable: one node's worth
    return per_node * nodes


def launches(text: str, comments: bool = False) -> List[Launch]:
    out = []
    for number, line in logical_lines(text, comments):
        found = parse_launch(number, line)
        if found is not None:
            out.append(found)
    return out


def agreed(found: List[Launch]) -> Optional[Launch]:
    """The launch the lines agree on (the first, with a world only when every line that gives
    one gives the same), or None when there is none."""
    if not found:
        return None
    first = found[0]
    worlds = {f.world for f in found if f.world is not None}
    recipes = {f.recipe for f in found if f.recipe}
    world = worlds.pop() if len(worlds) == 1 else None
    recipe = recipes.pop() if len(recipes) == 1 else ""
    return Launch(first.line, first.launcher, first.how, world, recipe, first.script, list(first.configs),
                  dict(first.args))


def script_settings(args: Dict[str, Any]) -> List[Tuple[str, Any, str]]:
    """The script's own arguments through the shared name table (``--per_device_train_batch_size
    4``, ``--train.micro_batch_size 2``, ``--bf16``)."""
    out = []
    for name, value in args.items():
        key = name.replace("-", "_").rsplit(".", 1)[-1]
        found = interpret(key, value)
        if found and not found[0].startswith("gpt."):
            out.append((found[0], found[1], name))
    return out
