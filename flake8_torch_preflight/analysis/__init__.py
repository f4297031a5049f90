"""The shared analysis layer: rules ask `FileAnalysis` questions and never walk the tree.

Layout (see docs/architecture.md):
- `file_analysis.py` — `FileAnalysis`, the per-file object rules receive;
- `flow.py` (+ `env.py`) — the interpreter: statements, environment, loop fixpoint, joins;
- `semantics/` — what libraries do, as tables the interpreter looks up;
- `values.py`, `events.py`, `questions.py` — what the interpreter knows and records;
- `imports.py`, `index.py`, `bindings.py`, `project.py`, `workspace.py` — names, functions
  and classes, in this file and across the project's files;
- topic modules (`epochs`, `modes`, `losses`, `distributed`, `device`, `seeding`,
  `accumulation`, `classes`) — shared questions of several rules, memoised per file.
"""
from .core.events import FunctionFacts, Site
from .file_analysis import FileAnalysis, iterated_name
from .project.index import ClassInfo, FunctionInfo
from .core.questions import Does

__all__ = ["ClassInfo", "Does", "FileAnalysis", "FunctionFacts", "FunctionInfo", "Site",
           "iterated_name"]
