"""Exercises with immediate feedback: ``check("05.can_view", can_view)`` in a notebook.

Every notebook 01–09 has exercises where the student writes code that matters for the lecture.
:func:`check` prints a verdict (✓, or what is wrong and a hint for the mistake it looks like,
or "not done yet" while the answer is the stub) and never raises; :func:`verify` returns the
:class:`Verdict` for tests and autograders. Checkers test behaviour on random and edge cases
against an oracle (NumPy, ``cl.grad``, ``cl.jvp``, the FLOP table, ...), never source text.
:func:`check_guess` answers the "Check yourself" questions: a guess against a computed value.
"""

from __future__ import annotations

import math

# Each topic module registers the checkers of one notebook's exercises.
from . import (  # noqa: F401
    forward_mode,
    fused_op,
    fusion,
    gpu_assignments,
    gpu_kernels,
    graph_memory,
    layouts,
    llama,
    llm_budget,
    programming_models,
    reverse_mode,
    strided_add,
    training,
)
from .core import EXERCISES, Verdict, host, take_snapshot, verify

take_snapshot()  # the modules as they are before any answer ran

__all__ = ["EXERCISES", "Verdict", "check", "check_guess", "verify"]


def check(exercise_id: str, answer) -> None:
    """Check ``answer`` for ``exercise_id`` and print the verdict; never raises.

    Prints ``✓ 05.can_view: ...`` when the answer is right; ``✗`` with what went wrong and, when
    the answer looks like a common mistake, a hint; ``…`` "not done yet" while it is the stub.
    """
    print(verify(exercise_id, answer))


def check_guess(guess, answer, rel_tol: float = 0.0) -> None:
    """Print whether ``guess`` equals ``answer`` (or is within ``rel_tol`` of it); never raises.

    ``None``, the blank guess of the student edition, prints "no guess yet"; a wrong guess is
    told so without the answer.
    """
    if guess is None:
        print("… no guess yet: replace None with your guess and run the cell again")
    elif _same(guess, host(answer), rel_tol):
        print(f"✓ right: {guess}")
    else:
        print(f"✗ not {guess}: think again (the answer is under the cell)")


def _same(guess, answer, rel_tol: float) -> bool:
    try:
        return bool(math.isclose(guess, answer, rel_tol=rel_tol) if rel_tol else guess == answer)
    except Exception:  # a guess of another kind: a string, an array, ...
        return False
