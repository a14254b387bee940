"""Exercises with immediate feedback: ``check("05.can_view", can_view)`` in a notebook.

Every notebook 01–09 has exercises where the student writes code that matters for the lecture.
:func:`check` prints a verdict (✓, or what is wrong and a hint for the mistake it looks like,
or "not done yet" while the answer is the stub) and never raises; :func:`verify` returns the
:class:`Verdict` for tests and autograders. Checkers test behaviour on random and edge cases
against an oracle (NumPy, ``cl.grad``, ``cl.jvp``, the FLOP table, ...), never source text.
"""

from __future__ import annotations

# Each topic module registers the checkers of one notebook's exercises.
from . import (  # noqa: F401
    forward_mode,
    fusion,
    gpu_kernels,
    layouts,
    llama,
    llm_budget,
    programming_models,
    reverse_mode,
    strided_add,
    training,
)
from .core import EXERCISES, Verdict, take_snapshot, verify

take_snapshot()  # the modules as they are before any answer ran

__all__ = ["EXERCISES", "Verdict", "check", "verify"]


def check(exercise_id: str, answer) -> None:
    """Check ``answer`` for ``exercise_id`` and print the verdict; never raises.

    Prints ``✓ 05.can_view: ...`` when the answer is right; ``✗`` with what went wrong and, when
    the answer looks like a common mistake, a hint; ``…`` "not done yet" while it is the stub.
    """
    print(verify(exercise_id, answer))
