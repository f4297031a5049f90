"""Where a script binds its settings: statements in source order, and the CLI libraries
whose target function's signature defaults are what the run uses.

A function run by ``fire.Fire(train)``, ``typer.run(main)``, ``jsonargparse.CLI(setup)``
(litgpt's ``CLI``), decorated with ``@click.command``/``@app.command()``, or called bare at
module level (``main()`` under ``if __name__ == "__main__":``) runs with its defaults unless
the command line says otherwise, so its defaults are read like constants (and marked
``default of train(micro_batch_size)``).  Other functions' defaults are not: an
``evaluate(model, batch_size=1)`` helper says nothing about the training batch.

nanoGPT-style scripts define the model as module globals (``n_layer``, ``n_head``,
``n_embd``, ``block_size``, ``vocab_size``) and ``exec`` a configurator that overrides them
from a config file; :func:`finish_model_shape` turns the globals into a GPT-2-shaped config,
and the overrides (read from the config file the user names) apply at the ``exec`` line.
"""

from __future__ import annotations

import ast
from typing import Any, Dict, List, Optional

from ..knowledge import db
from .config_comments import Value
from .folding import Unknown, _arith, checked
from .script_state import ScriptState
from .setting_names import interpret
from .tables import LITGPT_LORA_ROLES

# callables whose first argument is the function (or dict of functions) a CLI runs
ENTRY_CALLS = {
    "fire.Fire": "fire.Fire",
    "typer.run": "typer.run",
    "jsonargparse.CLI": "jsonargparse.CLI",
    "jsonargparse.auto_cli": "jsonargparse.auto_cli",
    "litgpt.utils.CLI": "litgpt CLI",
    "litgpt.CLI": "litgpt CLI",
}
# option factories whose first positional argument (or default=) is the default
OPTION_DEFAULTS = ("typer.Option", "typer.Argument")
CLI_LIBRARIES = ("click", "typer")
LITGPT_PACKAGES = ("litgpt", "lit_gpt")


# --------------------------------------------------------------------------- entry points


def find_entry_points(reader: ScriptState) -> None:
    """Functions whose signature defaults the run uses (see the module docstring)."""
    for node in reader.nodes[ast.Call]:
        if node.args and isinstance(node.func, (ast.Name, ast.Attribute)):
            how = ENTRY_CALLS.get(reader.qual(node.func))
            if how:
                for target in _function_names(node.args[0]):
                    reader.entry_points.setdefault(target, how)
    for node in reader.nodes[ast.FunctionDef]:
        for deco in node.decorator_list:
            if _is_cli_decorator(reader, deco):
                reader.entry_points.setdefault(node.name, reader.qual(deco).rstrip("()"))
    for call in _bare_module_calls(getattr(reader.tree, "body", [])):
        reader.entry_points.setdefault(call.func.id, f"{call.func.id}() at line {call.lineno}")
    if not reader.entry_points and _litgpt_command_module(reader):
        reader.entry_points["setup"] = "the litgpt command line (litgpt finetune/pretrain run setup())"


def _litgpt_command_module(reader: ScriptState) -> bool:
    """litgpt's command modules (``litgpt/finetune/lora.py``, ``litgpt/pretrain.py``) have no
    ``__main__``: ``litgpt finetune lora ...`` (litgpt/__main__.py) runs their ``setup()``."""
    if not any(v.startswith(LITGPT_PACKAGES) for v in reader.imports.values()):
        return False
    body = getattr(reader.tree, "body", [])
    return any(isinstance(stmt, ast.FunctionDef) and stmt.name == "setup" for stmt in body)


def _function_names(node: ast.AST) -> List[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Dict):
        return [v.id for v in node.values if isinstance(v, ast.Name)]
    return []


def _is_cli_decorator(reader: ScriptState, deco: ast.AST) -> bool:
    q = reader.qual(deco)
    if q.startswith("click.") and q.split(".")[1].startswith(("command", "group", "option", "argument")):
        return True
    uses_cli = any(v.split(".")[0] in CLI_LIBRARIES for v in reader.imports.values())
    return uses_cli and q.endswith((".command()", ".command"))


def _bare_module_calls(body: List[ast.stmt]) -> List[ast.Call]:
    """``main()`` at module level or directly under ``if __name__ == "__main__":``."""
    out = []
    for stmt in body:
        if isinstance(stmt, ast.If) and _is_main_guard(stmt.test):
            out.extend(_bare_module_calls(stmt.body))
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            if isinstance(call.func, ast.Name) and not call.args and not call.keywords:
                out.append(call)
    return out


def _is_main_guard(test: ast.AST) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


# --------------------------------------------------------------------------- statements


def bind_statement(reader: ScriptState, stmt: ast.stmt) -> None:
    handler = _STATEMENTS.get(type(stmt))
    if handler is not None:
        handler(reader, stmt)


def _assign(reader: ScriptState, stmt: ast.Assign) -> None:
    if isinstance(stmt.value, ast.Call):
        _maybe_add_argument(reader, stmt.value)
    if len(stmt.targets) != 1:
        return
    target = stmt.targets[0]
    if isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple):
        if len(target.elts) == len(stmt.value.elts) <= 64:
            for name, value in zip(target.elts, stmt.value.elts):
                if isinstance(name, ast.Name):
                    _bind_expr(reader, name.id, value, stmt.lineno)
        return
    if not isinstance(target, ast.Name):
        return
    name = target.id
    if isinstance(stmt.value, ast.Call):
        reader.calls_by_name[name] = stmt.value
        reader.assigned_to[id(stmt.value)] = name
    if isinstance(stmt.value, ast.Dict):
        reader.dicts_by_name[name] = stmt.value
    _bind_expr(reader, name, stmt.value, stmt.lineno)


def _bind_expr(reader: ScriptState, name: str, node: ast.AST, line: int) -> None:
    value, how = reader.try_ev(node)
    if value is not None:
        reader.bind_name(name, value, line, how)
    else:
        reader.env.pop(name, None)  # rebound to something unknown: the old value no longer holds


def _aug_assign(reader: ScriptState, stmt: ast.AugAssign) -> None:
    if not isinstance(stmt.target, ast.Name) or stmt.target.id not in reader.env:
        return
    name = stmt.target.id
    old, _line, how = reader.env[name]
    value, how_b = reader.try_ev(stmt.value)
    try:
        new = _arith(stmt.op, old, value)
    except Unknown:
        reader.env.pop(name, None)
        return
    reader.bind_name(name, new, stmt.lineno, how or how_b)


def _ann_assign(reader: ScriptState, stmt: ast.AnnAssign) -> None:
    if not isinstance(stmt.target, ast.Name) or stmt.value is None:
        return
    node = stmt.value
    if isinstance(node, ast.Call) and reader.qual(node.func).split(".")[-1] == "field":
        node = _field_default(reader, node)
    value, _how = reader.try_ev(node)
    if value is None:
        return
    name = stmt.target.id
    reader.fields[name] = (value, stmt.lineno)
    reader.env.setdefault(name, (value, stmt.lineno, "field default"))
    reader.bind_name(name, value, stmt.lineno, "field default")


def _field_default(reader: ScriptState, call: ast.Call) -> Optional[ast.AST]:
    """``field(default=4)``, or ``field(default_factory=lambda: ["q_proj", "v_proj"])``."""
    node = reader.kw(call, "default")
    if node is not None:
        return node
    factory = reader.kw(call, "default_factory")
    if isinstance(factory, ast.Lambda) and not factory.args.args:
        return factory.body
    return None


def _expr(reader: ScriptState, stmt: ast.Expr) -> None:
    if not isinstance(stmt.value, ast.Call):
        return
    call = stmt.value
    _maybe_add_argument(reader, call)
    if _is_configurator_exec(reader, call):
        reader.facts.configurator = stmt.lineno
        for name, (value, source, line) in reader.overrides.items():
            reader.env[name] = (value, line, "")
            _bind_override(reader, name, value, source, line)


def _return(reader: ScriptState, stmt: ast.Return) -> None:
    if isinstance(stmt.value, ast.Call):
        _maybe_add_argument(reader, stmt.value)


def _bind_override(reader: ScriptState, name: str, value: Any, source: str, line: int) -> None:
    """A configurator override: the config file's value replaces the script's global."""
    found = interpret(name, value)
    if found is None:
        return
    setting, canonical, rank = found
    if setting.startswith("gpt."):
        reader.gpt_dims[setting[4:]] = (canonical, line, source)
    elif setting == "model":
        key = db.find_model(canonical)
        if key:
            reader.facts.put("model", key, source, line, 9)
    else:
        reader.facts.put(setting, canonical, source, line, 9 + rank)


def _is_configurator_exec(reader: ScriptState, call: ast.Call) -> bool:
    """``exec(open('configurator.py').read())``: the script's globals are overridden here."""
    if not (isinstance(call.func, ast.Name) and call.func.id == "exec" and call.args):
        return False
    inner = call.args[0]
    return isinstance(inner, ast.Call) and "open()" in reader.qual(inner.func)


def _function(reader: ScriptState, stmt: ast.FunctionDef) -> None:
    for deco in stmt.decorator_list:
        if isinstance(deco, ast.Call) and reader.qual(deco.func) == "click.option":
            _click_option(reader, deco)
    how = reader.entry_points.get(stmt.name)
    if how is None:
        return
    args = stmt.args
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    for arg, default in pairs:
        _bind_parameter(reader, stmt.name, arg.arg, default, how)
    _litgpt_lora_targets(reader, stmt)


def _bind_parameter(reader: ScriptState, func: str, name: str, default: ast.AST, how: str) -> None:
    line = default.lineno
    label = f"default of {func}({name}), run by {how}"
    if isinstance(default, ast.Call) and reader.qual(default.func) in OPTION_DEFAULTS:
        default = reader.kw(default, "default") or (default.args[0] if default.args else None)
        if default is None:
            return
    if isinstance(default, ast.Call) and default.keywords and not default.args:
        # a config object built in the signature: train: TrainArgs = TrainArgs(micro_batch_size=1)
        for k in default.keywords:
            if k.arg:
                value, _ = reader.try_ev(k.value)
                if value is not None:
                    field_label = f"default of {func}({name}={k.arg}), run by {how}"
                    reader.bind_name(k.arg, value, line, field_label, 1)
        return
    value, _ = reader.try_ev(default)
    if value is not None:
        reader.bind_name(name, value, line, label, 1)


def module_lora_switches(reader: ScriptState) -> None:
    """lit-gpt's module globals ``lora_r = 8``, ``lora_query = True``, ... (older scripts)."""
    if "lora_targets" not in reader.facts.values and any(role in reader.env for role in LITGPT_LORA_ROLES):
        _litgpt_lora_targets(reader, None)


def _litgpt_lora_targets(reader: ScriptState, stmt: Optional[ast.FunctionDef]) -> None:
    """litgpt's ``lora_query=True, lora_value=True, ...`` switches name the adapted linears."""
    chosen: List[str] = []
    seen = False
    line = stmt.lineno if stmt else 1
    for role, modules in LITGPT_LORA_ROLES.items():
        if role in reader.env:
            seen = True
            value, line, _ = reader.env[role]
            if value is True:
                chosen.extend(modules)
    if seen and chosen:
        where = f"lora_* switches of {stmt.name}()" if stmt else "lora_* switches"
        reader.put("lora_targets", chosen, line, 2, where)
        if "lora" not in reader.facts.values:
            reader.put("lora", 8, line, 1, "litgpt LoRA, rank not read (default 8)", guessed=True)


def _click_option(reader: ScriptState, call: ast.Call) -> None:
    dest = _option_dest(call)
    default = reader.kw(call, "default")
    if dest and default is not None:
        value, _ = reader.try_ev(default)
        if value is not None:
            reader.argparse[dest] = (value, call.lineno)
            reader.bind_name(dest, value, call.lineno, "click option default", 1)


def _option_dest(call: ast.Call) -> Optional[str]:
    """``--batch-size`` -> ``batch_size``; a bare name (positional) as it is."""
    dest = None
    for arg in call.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            if arg.value.startswith("--"):
                return arg.value[2:].replace("-", "_")
            if not arg.value.startswith("-"):
                dest = arg.value
    return dest


def _maybe_add_argument(reader: ScriptState, call: ast.Call) -> None:
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
        return
    dest_node = reader.kw(call, "dest")
    dest = reader.try_ev(dest_node)[0] if dest_node is not None else None
    if not isinstance(dest, str):
        dest = _option_dest(call)
    if dest is None:
        return
    default = reader.kw(call, "default")
    value = reader.try_ev(default)[0] if default is not None else None
    action = reader.kw(call, "action")
    if value is None and isinstance(action, ast.Constant):
        value = {"store_true": False, "store_false": True}.get(action.value)
    if value is not None:
        reader.argparse[dest] = (value, call.lineno)
        reader.bind_name(dest, value, call.lineno, "argparse default", 1)


_STATEMENTS: Dict[type, Any] = {
    ast.Assign: _assign,
    ast.AugAssign: _aug_assign,
    ast.AnnAssign: _ann_assign,
    ast.Expr: _expr,
    ast.Return: _return,
    ast.FunctionDef: _function,
    ast.AsyncFunctionDef: _function,
}


# --------------------------------------------------------------------------- model shape


def finish_model_shape(reader: ScriptState) -> None:
    """nanoGPT-style ``n_layer``/``n_head``/``n_embd`` globals: an exact GPT-2-shaped config."""
    dims = reader.gpt_dims
    if not all(k in dims for k in ("n_layer", "n_head", "n_embd")):
        return
    init = reader.env.get("init_from")
    if init and isinstance(init[0], str) and init[0].startswith("gpt2"):
        key = db.find_model(init[0])
        if key:
            reader.put("model", key, init[1], 2, "init_from")
            return
    values = {k: v[0] for k, v in dims.items()}
    if any(isinstance(values[k], bool) for k in ("n_layer", "n_head", "n_embd")):
        return
    block = reader.facts.values.get("seq")
    positions = reader.env.get("block_size", (block.value if block else 1024, 0, ""))[0]
    config = {
        "model_type": "gpt2",
        "n_layer": values["n_layer"],
        "n_head": values["n_head"],
        "n_embd": values["n_embd"],
        "n_positions": positions if isinstance(positions, int) and positions > 0 else 1024,
        "vocab_size": values.get("vocab_size") or 50304,  # nanoGPT's padded GPT-2 vocabulary
        "tie_word_embeddings": True,
    }
    if values.get("bias") is False:
        config["bias"] = False
    _value, line, how = dims["n_layer"]
    try:
        checked(config["n_layer"] * config["n_embd"] * config["n_embd"])
    except Unknown:
        return
    where = how if how.endswith(f":{line}") else reader.src(line)  # a configurator override names its file
    reader.facts.model_config = Value(config, f"{where} (n_layer/n_head/n_embd, GPT-2 shape)", line)
