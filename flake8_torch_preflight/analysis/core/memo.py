"""One way to memoise a question per file: `@per_file("topic")`.

Topic modules answer questions of the form `question(analysis, key...)`; the answer lives in
the file analysis's memo table for that topic (as long as the analysis). While an answer is
being computed, a recursive question with the same key gets `guard` (helpers that call each
other: "assume no" until proven), instead of recursing forever. With `key_args=n` only the
first n arguments after the analysis name the question (the rest bound how far it looks:
the first answer computed stands).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
_COMPUTING = object()


def per_file(topic: str, guard: Any = None, key_args: Optional[int] = None) -> Callable[[F], F]:
    def decorate(question: F) -> F:
        @functools.wraps(question)
        def memoised(analysis, *args):
            table = analysis.memo(topic)
            key = args if key_args is None else args[:key_args]
            found = table.get(key, _COMPUTING)
            if found is not _COMPUTING:
                return found
            table[key] = guard
            try:
                answer = question(analysis, *args)
            except BaseException:
                table.pop(key, None)   # no answer: a later asker must not take the guard for one
                raise
            table[key] = answer
            return answer
        return memoised  # type: ignore[return-value]
    return decorate
