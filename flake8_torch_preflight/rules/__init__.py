"""The rule registry: every rule, in code order. Docs and `explain` read from here."""
from __future__ import annotations

from .base import Rule
from .tpf001_retained_graph import RetainedGraph
from .tpf002_eval_without_no_grad import EvalWithoutNoGrad
from .tpf003_missing_zero_grad import MissingZeroGrad
from .tpf004_unscaled_accumulation import UnscaledAccumulation
from .tpf007_stuck_eval_mode import StuckEvalMode

ALL_RULES = (
    RetainedGraph,
    EvalWithoutNoGrad,
    MissingZeroGrad,
    UnscaledAccumulation,
    StuckEvalMode,
)

__all__ = ["ALL_RULES", "Rule"]
