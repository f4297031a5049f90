"""The interpreter's environment: name -> Value, with cheap branching and joining."""
from __future__ import annotations

from typing import Optional

from . import values as V
from .values import join_all


class Env(dict):
    """name -> Value, remembering which names were written since it was branched, so a
    join at the end of an `if` or a loop costs what the branches wrote, not the whole scope."""

    __slots__ = ("written", "iteration")

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.written = set()
        self.iteration = set()    # written in the current loop iteration, shared by branches

    def __setitem__(self, key, value) -> None:
        self.written.add(key)
        self.iteration.add(key)
        dict.__setitem__(self, key, value)

    def branch(self, iteration: Optional[set] = None) -> "Env":
        env = Env(self)
        env.iteration = self.iteration if iteration is None else iteration
        return env


def merge_envs(base: Env, *branches: Env) -> Env:
    """The environment after control flow that took one of `branches` (each from `base`);
    with a single branch, the branch may also not have run (loops)."""
    out = base.branch()
    written = set().union(*(b.written for b in branches))
    for key in written:
        values = [b.get(key, base.get(key)) for b in branches]
        if len(branches) == 1:
            values.append(base.get(key))
        dict.__setitem__(out, key, join_all(v for v in values if v is not None))
    out.written = base.written   # `base` is discarded by every caller: reuse its set
    out.written.update(written)
    return out


# Facts a second walk of a loop body would not change any rule's answer for: a list that
# gained elements, a number that became a tensor of numbers, where a value lives.
_SETTLED_TAGS = frozenset({V.CONTAINER, V.TENSOR, V.PYSCALAR, V.MODULO, V.CUDA_DEVICE})


def carried_values_changed(before: Env, after: Env, reads: set) -> bool:
    """Some name read before being written in an iteration now holds other facts."""
    for name in reads:
        old, new = before.get(name), after.get(name)
        if old is new:
            continue
        if old is None or new is None or old.grad != new.grad or old.leaf != new.leaf \
                or old.cls is not new.cls or (old.tags ^ new.tags) - _SETTLED_TAGS:
            return True
    return False
