"""`FileAnalysis`: one object per linted file that rules ask questions of.

It resolves imports, indexes functions and classes, runs the interpreter (`flow.py`) once
per function (lazily, memoised, with a guard against recursion), and answers
interprocedural questions ("does this loop, directly or through the helpers it calls, run a
backward pass?") from per-function summaries. Cost is linear in the size of the file: each
function body is walked a bounded number of times, whatever the number of rules.
"""
from __future__ import annotations

import ast
import os
from typing import Dict, Iterator, List, Optional, Tuple

from . import semantics
from .project import workspace
from .core import values as V
from .core.astutil import dotted, iterated_expr
from .core.bindings import Bindings, scan_bindings
from .topics.epochs import resolve_values
from .core.events import FunctionFacts, LocalCall, Site
from .core.flow import FlowAnalyzer, FunctionRef
from .project.imports import ImportTable
from .core.memo import per_file
from .project.index import VAL_LOADER_RE, ClassInfo, FileIndex, FunctionInfo
from .core.questions import Does
from .core.values import Value, join

FRAMEWORK_IMPORTS = {
    "lightning": ("lightning", "pytorch_lightning", "lightning.pytorch"),
    "fabric": ("lightning.fabric", "lightning_fabric", "lightning.Fabric"),
    "accelerate": ("accelerate",),
    "transformers": ("transformers", "trl"),
    "deepspeed": ("deepspeed",),
}


class FileAnalysis:
    def __init__(self, tree: ast.Module, filename: str = "<stdin>") -> None:
        self.tree = tree
        self.filename = filename
        self.imports = ImportTable(tree)
        self.index = FileIndex(tree, self.imports)
        for func in self.index.functions:
            func.home = self
        for cls in self.index.all_classes:
            cls.home = self
        self._facts: Dict[FunctionInfo, FunctionFacts] = {}
        self._in_progress: set = set()
        self._globals = _ModuleGlobals()
        self._module_facts: Optional[FunctionFacts] = None
        self._memos: Dict[str, Dict] = {}
        self._others: Dict[str, Optional["FileAnalysis"]] = {}
        self._live: Dict[FunctionInfo, FlowAnalyzer] = {}    # functions being analysed now
        self._callers: Optional[Dict[FunctionInfo, List[Tuple[FunctionFacts, LocalCall]]]] = None

    # ------------------------------------------------------------------ the file
    @property
    def is_test_file(self) -> bool:
        """A pytest file: `test_*.py`, `*_test.py`, `conftest.py`, `tests.py`, or any file
        in a `tests` folder (not `test.py`, which in training repositories is usually the
        evaluation script)."""
        folder, base = os.path.split(os.path.abspath(self.filename))
        return base.startswith("test_") or base.endswith("_test.py") or \
            base in ("conftest.py", "tests.py") or os.path.basename(folder) == "tests"

    def uses_framework(self, name: str) -> bool:
        return self.imports.imports_any(*FRAMEWORK_IMPORTS[name])

    def other_file(self, path: str) -> Optional["FileAnalysis"]:
        """The analysis of another file of the project: one per module and process, the same
        whoever imports it (`workspace.py`), kept for as long as this analysis so the functions
        and classes it hands out stay its own."""
        other = self._others.get(path)
        if other is None and path not in self._others:
            other = self._others[path] = workspace.analysis_of(path, FileAnalysis)
        return other

    def where(self, func: FunctionInfo, line: int) -> str:
        """`line 12`, or `line 12 of engine.py` for a function of another file."""
        if func.home is None or func.home is self:
            return f"line {line}"
        return f"line {line} of {os.path.basename(func.home.filename)}"

    def release(self) -> None:
        """Drop what this analysis built (called once the rules are done with the file): its
        facts and memos refer back to it, and untangling them here lets reference counting
        free them at once instead of leaving cycles for the garbage collector to scan."""
        for func in self.index.functions:
            func.home = None
        for cls in self.index.all_classes:
            cls.home = None
        self._globals.analyzer = self._globals.final_env = None
        self._facts.clear()
        self._memos.clear()
        self._others.clear()
        self._live.clear()
        self._callers = None
        self._module_facts = None

    def memo(self, topic: str) -> Dict:
        """The memo table of one question (see `memo.per_file`), as long as this analysis."""
        return self._memos.setdefault(topic, {})

    # ------------------------------------------------------------------ flow facts
    @property
    def module_facts(self) -> FunctionFacts:
        if self._module_facts is None:
            facts = FunctionFacts(func=None)
            analyzer = FlowAnalyzer(self, None, facts, {}, {}, recording=True)
            self._globals.analyzer = analyzer
            analyzer.run(self.tree.body)
            facts.env = analyzer.env
            self._globals.finish()
            self._module_facts = facts
        return self._module_facts

    @property
    def global_env(self) -> "_ModuleGlobals":
        """Module-level names as bound so far by the module body's walk: a function called
        from the module body sees the globals bound before the call (as Python does), and
        every other function sees them all. One walk of the module body serves both."""
        if not self._globals.walked:
            _ = self.module_facts   # walking the module body binds the globals
        return self._globals

    def facts_for(self, func: FunctionInfo) -> FunctionFacts:
        if func.home is not self and func.home is not None:
            return func.home.facts_for(func)    # a function of another project file
        cached = self._facts.get(func)
        if cached is not None:
            return cached
        if func in self._in_progress:
            return FunctionFacts(func=func)   # recursion: assume nothing
        self._in_progress.add(func)
        try:
            facts = FunctionFacts(func=func)
            params = {name: semantics.parameter_value(func, i, name)
                      for i, name in enumerate(func.params)}
            analyzer = FlowAnalyzer(self, func, facts, params, self._outer_names(func))
            self._live[func] = analyzer
            analyzer.run(func.node.body)
            facts.env = analyzer.env
        finally:
            self._in_progress.discard(func)
            self._live.pop(func, None)
        self._facts[func] = facts
        return facts

    def _outer_names(self, func: FunctionInfo) -> "_OuterNames":
        """What a function reads from the scopes around it: the functions it is nested in
        (closure variables, as bound so far when the enclosing function is being analysed,
        else as it ends), then the module's globals."""
        scopes = []
        parent = func.parent
        while parent is not None:
            scopes.append(lambda parent=parent: self._env_of(parent))
            parent = parent.parent
        return _OuterNames(scopes, self.global_env) if scopes else self.global_env

    def binding_scope(self, func: Optional[FunctionInfo], name: str) -> str:
        """The qualified name of the innermost function from `func` outwards that binds
        `name` (a closure variable's home), or `<module>`."""
        while func is not None:
            if name in self.bindings(func).names or name in func.params:
                return func.qualname
            func = func.parent
        return "<module>"

    def bindings(self, func: Optional[FunctionInfo]) -> Bindings:
        """What `func`'s body (the module body for None) binds: one statement walk, shared
        by the interpreter and the questions about closures and attributes."""
        table = self.memo("bindings")
        found = table.get(func)
        if found is None:
            found = table[func] = scan_bindings(func.node.body if func else self.tree.body)
        return found

    def _env_of(self, func: FunctionInfo):
        live = self._live.get(func)
        if live is not None:
            return live.env
        if func in self._in_progress:
            return None
        return self.facts_for(func).env

    def all_facts(self) -> Iterator[FunctionFacts]:
        """The module body, then every function, in source order."""
        yield self.module_facts
        for func in self.index.functions:
            yield self.facts_for(func)

    def class_attr(self, cls: ClassInfo, text: str) -> Optional[Value]:
        """What `self.x` holds, as the class's `__init__` (or a base's) leaves it; for an
        attribute `__init__` does not set, as the methods that set it leave it (a recipe's
        `setup()` building `self._dataloader`)."""
        if cls.home is not self and cls.home is not None:
            return cls.home.class_attr(cls, text)
        init = cls.method("__init__")
        value = None
        if init is not None and init not in self._in_progress:
            value = self.facts_for(init).env.get(text)
        if value is None:
            for method in self._attribute_setters(cls, text):
                if method is not init and method not in self._in_progress:
                    found = self.facts_for(method).env.get(text)
                    if found is not None:
                        value = found if value is None else join(value, found)
        return value.as_attribute() if value is not None else None

    def _attribute_setters(self, cls: ClassInfo, text: str) -> List[FunctionInfo]:
        """Methods of `cls` (and of its bases in this file) that assign `text`."""
        table = self.memo("attribute_setters").get(cls)
        if table is None:
            table = {}
            for owner in [cls] + list(cls.local_bases):
                for method in owner.methods.values():
                    for attribute in self.bindings(method).attributes:
                        table.setdefault(attribute, []).append(method)
            self.memo("attribute_setters")[cls] = table
        return table.get(text, [])

    # ------------------------------------------------------------------ interprocedural
    def callers(self, func: FunctionInfo) -> List[Tuple[FunctionFacts, LocalCall]]:
        if self._callers is None:
            table: Dict[FunctionInfo, List[Tuple[FunctionFacts, LocalCall]]] = {}
            for facts in self.all_facts():
                for call in facts.local_calls:
                    table.setdefault(call.callee, []).append((facts, call))
            self._callers = table
        return self._callers.get(func, [])

    def wrapped_in_no_grad_by_caller(self, func: FunctionInfo) -> bool:
        """Some call of `func` in this file runs with autograd off (one level up)."""
        return any(call.site.no_grad for _, call in self.callers(func))

    def function_does(self, func: FunctionInfo, what: Does) -> bool:
        """Transitive: `func` or something it calls does `what`."""
        what = Does(what)
        memo = self.memo("function_does")
        key = (what, func)
        if key in memo:
            return memo[key]
        memo[key] = False   # recursion guard: assume no
        facts = self.facts_for(func)
        result = bool(what.sites_in(facts)) or any(
            self.function_does(call.callee, what) for call in facts.local_calls) or \
            bool(self.parameter_call_sites(facts, what))
        memo[key] = result
        return result

    def loop_does(self, facts: FunctionFacts, loop: ast.AST, what: Does) -> bool:
        """The body of `loop` does `what`, directly or through a function it calls."""
        return loop in self._sites_by_loop(facts, Does(what))

    def loop_sites(self, facts: FunctionFacts, loop: ast.AST, what: Does) -> List[Site]:
        """Sites in `loop` that do `what`: direct events and calls of helpers that do it."""
        return self._sites_by_loop(facts, Does(what)).get(loop, [])

    def scope_does(self, facts: FunctionFacts, site: Site, what: Does) -> bool:
        """The innermost loop around `site` (or, outside loops, its function) does `what`."""
        what = Does(what)
        if site.loops:
            return self.loop_does(facts, site.loops[-1], what)
        if facts.func is not None:
            return self.function_does(facts.func, what)
        return bool(what.sites_in(facts))

    def in_loop(self, facts: FunctionFacts, events: str, loop: ast.AST) -> list:
        """The records of `facts.<events>` (`"steps"`, `"backwards"`, `"calls"`, …) made inside
        `loop`; indexed once per function and list, so asking for every loop stays linear."""
        index = self.memo("events_by_loop").get((facts, events))
        if index is None:
            index = {}
            for record in getattr(facts, events):
                site = record if isinstance(record, Site) else record.site
                for enclosing in site.loops:
                    index.setdefault(enclosing, []).append(record)
            self.memo("events_by_loop")[(facts, events)] = index
        return index.get(loop, [])

    def _sites_by_loop(self, facts: FunctionFacts, what: Does) -> Dict[ast.AST, List[Site]]:
        """loop -> sites doing `what` inside it; built once per function and question."""
        index = self.memo("sites_by_loop").get((facts, what))
        if index is None:
            index = {}
            sites = what.sites_in(facts) + [c.site for c in facts.local_calls
                                            if self.function_does(c.callee, what)]
            sites += self.parameter_call_sites(facts, what)
            for site in sites:
                for loop in site.loops:
                    index.setdefault(loop, []).append(site)
            self.memo("sites_by_loop")[(facts, what)] = index
        return index

    @per_file("parameter_call_sites", guard=())   # recursion: assume no
    def parameter_call_sites(self, facts: FunctionFacts, what: Does) -> List[Site]:
        """Calls of a parameter (`loss_scaler(loss, optimizer)` in `train_one_epoch(...,
        loss_scaler)`) that do `what` because a caller in this file passes for it an object of
        a project class whose `__call__` does it, or a project function that does it. The
        callee stays unseen where no caller is in the file or what they pass is unknown."""
        if facts.func is None:
            return []
        return [call.site for call in facts.calls
                if call.unseen and self._passed_callee_does(facts, call, what)]

    def _passed_callee_does(self, facts: FunctionFacts, call, what: Does) -> bool:
        callee = call.node.func
        func = facts.func
        if not isinstance(callee, ast.Name) or callee.id not in func.params:
            return False
        value = facts.value(callee)
        if value.params != {func.params.index(callee.id)}:
            return False   # the name was rebound to something else before the call
        for passed in resolve_values(self, facts, value):
            target = _called_function(passed)
            if target is not None and self.function_does(target, what):
                return True
        return False

    # ------------------------------------------------------------------ training loops
    def training_loops(self, facts: FunctionFacts) -> List[ast.AST]:
        """Loops of `facts` that run a backward pass (directly or through helpers)."""
        return [loop for loop in facts.loops if self.loop_does(facts, loop, Does.BACKWARD)]

    def has_training_loop(self, func: FunctionInfo) -> bool:
        """`func`, or a function of the file it calls, contains a training loop."""
        memo = self.memo("has_training_loop")
        if func in memo:
            return memo[func]
        memo[func] = False   # recursion guard
        facts = self.facts_for(func)
        result = bool(self.training_loops(facts)) or any(
            self.has_training_loop(call.callee) for call in facts.local_calls)
        memo[func] = result
        return result

    def innermost_loops_doing(self, facts: FunctionFacts, *what: Does) -> List[ast.AST]:
        """Loops doing all of `what` (directly or via helpers) with no nested loop that does."""
        doing = [loop for loop in facts.loops
                 if all(self.loop_does(facts, loop, w) for w in what)]
        ancestors = set()
        for loop in doing:
            parent = facts.loop_parents.get(loop)
            while parent is not None:
                ancestors.add(parent)
                parent = facts.loop_parents.get(parent)
        return [loop for loop in doing if loop not in ancestors]

    # ------------------------------------------------------------------ evaluation code
    def evaluation_reason(self, facts: FunctionFacts, site: Site) -> Optional[str]:
        """Why `site` is evaluation code (the spec's three ways), or None."""
        func = facts.func
        if func is not None and func.evaluation_by_name(self.is_test_file):
            if not func.name.lower().startswith("test") or site.loops:
                return f"`{func.name}()` is evaluation code by its name"
        for loop in reversed(site.loops):
            name = iterated_name(loop)
            if name and VAL_LOADER_RE.match(name):
                return f"the loop at line {loop.lineno} iterates `{name}`"
        if site.eval_mode:
            return "it runs after `.eval()` in the same scope"
        return None

    def framework_owned(self, func: Optional[FunctionInfo]) -> Optional[str]:
        """The framework that runs `func`'s loop and manages grads/modes, if any."""
        cls = func.cls if func is not None else None
        while func is not None and cls is None:
            func = func.parent
            cls = func.cls if func is not None else None
        if cls is None:
            return None
        if cls.is_lightning:
            return "Lightning"
        if cls.is_hf_trainer:
            return "HF Trainer"
        return None


class _ModuleGlobals:
    """Read-only view of the module body's environment as its walk has left it so far: the
    walking analyzer's while it runs, then the environment it ended with (the analyzer, which
    points back at the file analysis, is let go so the two make no reference cycle)."""

    def __init__(self) -> None:
        self.analyzer: Optional[FlowAnalyzer] = None
        self.final_env = None

    @property
    def walked(self) -> bool:
        return self.analyzer is not None or self.final_env is not None

    def finish(self) -> None:
        self.final_env, self.analyzer = self.analyzer.env, None

    def _env(self):
        return self.final_env if self.final_env is not None else \
            (self.analyzer.env if self.analyzer is not None else None)

    def get(self, name: str, default=None):
        env = self._env()
        return env.get(name, default) if env is not None else default

    def __contains__(self, name: str) -> bool:
        env = self._env()
        return env is not None and name in env


class _OuterNames:
    """Names of the enclosing functions' scopes, innermost first, then the module's. A value
    read from an enclosing function is that function's: the parameter positions it depends
    on are the enclosing function's, not the reader's, so they are dropped."""

    def __init__(self, scopes, module_names) -> None:
        self.scopes = scopes
        self.module_names = module_names

    def get(self, name: str, default=None):
        for scope in self.scopes:
            env = scope()
            if env is not None and name in env:
                return env[name].without_params()
        return self.module_names.get(name, default)

    def __contains__(self, name: str) -> bool:
        return any(name in env for env in (scope() for scope in self.scopes) if env is not None) \
            or name in self.module_names


def _called_function(value: Value) -> Optional[FunctionInfo]:
    """What calling `value` runs: a project function it names, or the `__call__` of the
    project class it is an instance of."""
    if isinstance(value.node, FunctionRef):
        return value.node.func   # `step_fn=train_step`
    if value.cls is not None and not value.has(V.CONTAINER):
        return value.cls.method("__call__")
    return None


def iterated_name(loop: ast.AST) -> Optional[str]:
    """`val_loader` for `for b in tqdm(enumerate(val_loader)):`; None for while loops."""
    expr = iterated_expr(loop)
    text = dotted(expr) if expr is not None else None
    return text.rsplit(".", 1)[-1] if text else None
