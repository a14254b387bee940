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
from fractions import Fraction

from .. import strict_device  # noqa: F401  (its arrays are answers' values: recorded as trusted)

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
    told so without the answer. A list guesses a tuple as well; the right number written as
    text (``"2"``, or ``[1, "2"]``) is not taken, and told why.
    """
    answer = host(answer)
    if guess is None:
        print("… no guess yet: replace None with your guess and run the cell again")
    elif _same(guess, answer, rel_tol):
        print(f"✓ right: {guess}")
    elif isinstance(guess, str) and _same(_number(guess), answer, rel_tol):
        print(f"✗ {guess!r} is text: write it as a number, not text (without the quotes)")
    elif _has_text(guess) and _same(_numbers(guess), answer, rel_tol):
        print(f"✗ {guess!r} holds text: write each number as a number (without the quotes)")
    else:
        print(f"✗ not {guess}: think again (the answer is under the cell)")


def _same(guess, answer, rel_tol: float) -> bool:
    if isinstance(answer, tuple | list) and isinstance(guess, tuple | list):
        return len(guess) == len(answer) and all(
            _same(g, a, rel_tol) for g, a in zip(guess, answer, strict=True))  # fmt: skip
    try:
        return bool(math.isclose(guess, answer, rel_tol=rel_tol) if rel_tol else guess == answer)
    except Exception:  # a guess of another kind: a string, an array, ...
        return False


def _has_text(guess) -> bool:
    """Is ``guess`` a list or tuple with text somewhere in it?"""
    return isinstance(guess, tuple | list) and any(
        isinstance(g, str) or _has_text(g) for g in guess)  # fmt: skip


def _numbers(guess):
    """``guess`` with each piece of text in it read as the number it spells (or None)."""
    if isinstance(guess, str):
        return _number(guess)
    if isinstance(guess, tuple | list):
        return [_numbers(g) for g in guess]
    return guess


def _number(text: str):
    """The number ``text`` spells (``"2"``, ``"0.5"``, ``"1/2"``), or None."""
    for kind in (int, float, Fraction):
        try:
            return kind(text)
        except (ValueError, ZeroDivisionError):  # not a number; "1/0"
            continue
    return None
