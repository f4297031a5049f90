"""Provenance: every fact a finding rests on says whether it is proven or assumed.

A rule's chain ("`loss` carries a graph", "`model` is a module", "nothing resets the
gradients in the loop") is a list of `Premise`s. A premise is *proven* when the analysis
saw what makes it true (a construction, a library call it knows, a search over everything
reachable), *assumed* when it rests on a name, a default or a call the analysis cannot see
into. A finding is as strong as its weakest premise (`level`): an error needs every premise
proven; an assumed one lowers it to a warning, and the message names it (`assumed_text`).
Unknown stays silent: a fact nobody can even assume makes no premise and no finding.

The fix proof (`topics/fix_proof.py`) asks the same question of a fix: the plan is attached
only when each of its premises is proven (`first_unproven`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Tuple

from . import values as V
from .astutil import dotted
from .values import Value

PROVEN, ASSUMED = "proven", "assumed"


@dataclass(frozen=True)
class Premise:
    claim: str        # "`model` is a module"
    basis: str        # "built by `Net(...)`", "taken by its parameter's name"
    proven: bool = True

    @property
    def status(self) -> str:
        return PROVEN if self.proven else ASSUMED

    def sentence(self) -> str:
        return f"{self.claim} ({self.basis})"


def proven(claim: str, basis: str) -> Premise:
    return Premise(claim, basis, True)


def assumed(claim: str, basis: str) -> Premise:
    return Premise(claim, basis, False)


# the kinds a value may be taken for, and how a finding names them
_KIND_WORDS = {V.MODULE: "a module", V.LOSS_FN: "a loss", V.OPTIMIZER: "an optimizer",
               V.SCALER: "a GradScaler", V.ACCELERATOR: "an Accelerator",
               V.LOADER: "a data loader", V.TENSOR: "a tensor"}


def kind_premise(text: str, value: Value, kind: str) -> Premise:
    """`text` (the source of the expression) holds an object of `kind`: proven when the
    analysis saw it built, by a known library call or a project class; assumed when the
    kind comes from a parameter's name only (`BY_NAME`)."""
    word = _KIND_WORDS.get(kind, kind)
    claim = f"`{text}` is {word}"
    if value.has(V.BY_NAME):
        return assumed(claim, f"`{text}` is taken for {word} by its name")
    return proven(claim, "seen built or returned by a call the analysis knows")


def graph_premise(text: str, value: Value) -> Premise:
    """`text` carries an autograd graph: proven when it was made by a forward or a loss the
    analysis resolved (or a backward ran through it), assumed when the object that made it
    is known only by its parameter's name."""
    claim = f"`{text}` carries an autograd graph"
    if value.has(V.BY_NAME) and not value.has(V.PROVEN_GRAPH):
        maker = _maker(value)
        who = f"`{maker}`" if maker else "the object that made it"
        return assumed(claim, f"{who} is taken for a model or a loss by its parameter's name")
    return proven(claim, f"made at line {value.origin[0]}" if value.origin else "seen made")


def _maker(value: Value) -> str:
    """`model` for a value made by `model(x)` (from its origin), else ""."""
    node = getattr(value.origin, "_node", None) if value.origin is not None else None
    func = getattr(node, "func", None)
    return (dotted(func) or "") if func is not None else ""


def first_unproven(premises: Iterable[Premise]) -> Optional[Premise]:
    return next((p for p in premises if not p.proven), None)


def assumed_text(premises: Tuple[Premise, ...]) -> str:
    """What a lowered finding says about why it is not an error."""
    return "; ".join(f"assumed: {p.basis}" for p in premises if not p.proven)
