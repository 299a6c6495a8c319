"""Where a run's seconds go (pipeline-wide: instrumentation, no behaviour): SFT, RL sampling, the RL update,
evaluation, and environment work (tool calls, verification, retrieval, the sandbox).

The library marks each phase with `phase(name)` (a context manager) or `@timed(name)`; the time is added to a
process-wide total per phase. Phases nest, and each second goes to the innermost open phase only: a tool call
inside an evaluation counts as "environment", the rest of the evaluation as "evaluation". So the totals add up
to at most the wall time, and what is left is the notebook's own work (loading, plotting, printing).

`totals()` reads them; `course.results.write_results` stores them in every results file as `phase_seconds`, so
a lesson's cpu run says where its minutes went (issue: the next optimisation starts from data). Only the main
thread records: a phase entered from a worker thread is not counted.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

PHASES = ("sft", "rl sampling", "rl update", "evaluation", "environment")
"""the phases the library marks, in pipeline order"""

_totals: dict[str, float] = {}
_open: list[list[Any]] = []  # [name, the time it last started counting]

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Count the time inside this block towards `name` (and stop counting it towards the enclosing phase)."""
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}; the phases are {PHASES}")
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    now = time.perf_counter()
    if _open:
        outer = _open[-1]
        _totals[outer[0]] = _totals.get(outer[0], 0.0) + now - outer[1]
    _open.append([name, now])
    try:
        yield
    finally:
        end = time.perf_counter()
        inner = _open.pop()
        _totals[inner[0]] = _totals.get(inner[0], 0.0) + end - inner[1]
        if _open:
            _open[-1][1] = end


def timed(name: str) -> Callable[[F], F]:
    """Decorator: every call of the function is a `phase(name)`."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            with phase(name):
                return fn(*args, **kwargs)
        return inner  # type: ignore[return-value]
    return wrap


def totals() -> dict[str, float]:
    """Seconds per phase so far in this process (closed time only, plus the running time of open phases), in
    `PHASES` order; phases never entered are left out."""
    now = time.perf_counter()
    out = dict(_totals)
    for name, start in _open[-1:]:  # only the innermost open phase is counting
        out[name] = out.get(name, 0.0) + now - start
    return {name: round(out[name], 3) for name in PHASES if name in out}


def reset() -> None:
    """Forget the totals (tests; a new run in the same process)."""
    _totals.clear()
