"""What every checker shares: verdicts, named mistakes, calling an answer safely, a time limit.

A checker is a function of the student's answer that returns a one-line summary of what it
tried when the answer is right, and raises :class:`Wrong` (what went wrong, and the
:class:`Mistake` it looks like) or :class:`NotDone` otherwise. :func:`verify` runs it under a
time limit and turns every outcome, including the answer's own exceptions, into a
:class:`Verdict`; nothing the answer does escapes.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from .. import evaluate, topological_order
from ..backend import device_of, to_numpy

DEFAULT_TIME_LIMIT = 10.0  # seconds an answer may take for the whole check

PASSED, FAILED, NOT_DONE, UNKNOWN = "passed", "failed", "not done", "unknown exercise"
_SYMBOL = {PASSED: "✓", FAILED: "✗", NOT_DONE: "…", UNKNOWN: "?"}


@dataclass(frozen=True)
class Mistake:
    """A common wrong answer, recognised by its behaviour, and the hint that fixes it."""

    name: str
    hint: str


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking one answer.

    Attributes
    ----------
    exercise : str
        The exercise id, e.g. ``"05.can_view"``.
    status : str
        ``"passed"``, ``"failed"``, ``"not done"`` or ``"unknown exercise"``.
    message : str
        What was tried, or what went wrong followed by a hint.
    mistake : str or None
        The name of the common mistake the answer was recognised as, if any.
    """

    exercise: str
    status: str
    message: str
    mistake: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __str__(self) -> str:
        return f"{_SYMBOL[self.status]} {self.exercise}: {self.message}"


class Wrong(Exception):
    """The answer is wrong: ``message`` says how, ``mistake`` names it when recognised."""

    def __init__(self, message: str, mistake: Mistake | None = None):
        super().__init__(message)
        self.message, self.mistake = message, mistake


class NotDone(Exception):
    """The answer is still the stub (it raises NotImplementedError, or is ``...``)."""


class OutOfTime(BaseException):  # noqa: N818  (BaseException: an answer's ``except Exception`` cannot swallow it)
    """Raised inside a check when its time is up."""


@dataclass(frozen=True)
class Exercise:
    """One exercise: its id, a one-line task, the mistakes its checker recognises, the checker
    and how long an answer may take."""

    id: str
    task: str  # for a function: its signature, " -> ", what it returns
    mistakes: tuple[Mistake, ...]
    checker: Callable[[object], str]
    function: bool = True  # the answer is a function (else a namespace, or source text)
    time_limit: float = DEFAULT_TIME_LIMIT


EXERCISES: dict[str, Exercise] = {}


def exercise(
    exercise_id: str,
    task: str,
    mistakes: tuple[Mistake, ...],
    function: bool = True,
    time_limit: float = DEFAULT_TIME_LIMIT,
):
    """Register the decorated checker under ``exercise_id`` (``"NN.name"``, NN the notebook),
    with the common ``mistakes`` it recognises. When ``function``, an answer that is not
    callable is refused before the checker runs."""

    def register(checker: Callable[[object], str]) -> Callable[[object], str]:
        if exercise_id in EXERCISES:
            raise ValueError(f"exercise {exercise_id!r} is registered twice")
        record = Exercise(exercise_id, task, mistakes, checker, function, time_limit)
        EXERCISES[exercise_id] = record
        return checker

    return register


# -- running a check --------------------------------------------------------------------------
def verify(exercise_id: str, answer, *, time_limit: float | None = None) -> Verdict:
    """Check ``answer`` for exercise ``exercise_id`` and return the :class:`Verdict`.

    Never raises for anything the answer does (except Ctrl-C): an answer that raises, returns
    the wrong type or runs longer than the exercise's time limit (``time_limit`` overrides it)
    gets a failing verdict that says so.
    """
    found = EXERCISES.get(exercise_id) if isinstance(exercise_id, str) else None
    if found is None:
        known = ", ".join(sorted(EXERCISES))
        return Verdict(str(exercise_id), UNKNOWN, f"there is no such exercise; known: {known}")
    seconds = found.time_limit if time_limit is None else time_limit
    if answer is None or answer is Ellipsis:
        return Verdict(exercise_id, NOT_DONE, "not done yet: the answer is still empty")
    if found.function and not callable(answer):
        signature = found.task.split(" -> ")[0]
        return Verdict(
            exercise_id, FAILED, f"the answer must be a function {signature}, got {_kind(answer)}"
        )
    try:
        with _quiet(), _time_limit(seconds):
            summary = found.checker(answer)
    except NotDone as error:
        return Verdict(exercise_id, NOT_DONE, f"not done yet: {error}")
    except Wrong as error:
        return _wrong(exercise_id, error.message, error.mistake)
    except OutOfTime:
        message = (
            f"your answer did not finish within {seconds:g} s: an endless loop, or "
            "far more work than needed?"
        )
        return Verdict(exercise_id, FAILED, message)
    except (Exception, SystemExit) as error:  # outside a guarded call: the answer, or a bug here
        return _wrong(exercise_id, _unexpected(error), None)
    return Verdict(exercise_id, PASSED, summary)


def _unexpected(error: BaseException) -> str:
    text = f"checking your answer raised {_describe(error)}"
    if not _answer_frames(error):
        text += (
            " inside the checker; if your answer looks right, this may be a bug in "
            "course_lib.exercises"
        )
    return text


def _wrong(exercise_id: str, message: str, mistake: Mistake | None) -> Verdict:
    if mistake is None:
        return Verdict(exercise_id, FAILED, message)
    return Verdict(exercise_id, FAILED, f"{message}\n  Hint: {mistake.hint}", mistake.name)


@contextlib.contextmanager
def _quiet():
    """No warnings printed while an answer runs (its results say what went wrong)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise :class:`OutOfTime` in the block after ``seconds`` (SIGALRM, main thread only).

    Without SIGALRM (Windows) or outside the main thread the block runs without a limit.
    A timer that was already running (pytest-timeout, say) is restored afterwards.
    """
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def on_alarm(signum, frame):
        raise OutOfTime

    previous = signal.signal(signal.SIGALRM, on_alarm)
    outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_delay:
            left = max(outer_delay - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, outer_interval)


# -- calling the answer -----------------------------------------------------------------------
def call(label: str, fn, *args, errors: Iterable[tuple[type, str, Mistake]] = ()):
    """``fn(*args)``, with whatever it raises turned into :class:`Wrong` or :class:`NotDone`.

    ``label`` shows the call in messages (``"can_view((2, 3), (3, 1), (6,))"``). ``errors``
    recognises mistakes by what they raise: ``(exception type, text in its message, mistake)``.
    """
    try:
        return fn(*args)
    except NotImplementedError:
        raise NotDone(
            f"{label} raises NotImplementedError (replace the stub with your code)"
        ) from None
    except (Wrong, NotDone):
        raise
    except (Exception, SystemExit) as error:
        found = next(
            (m for kind, text, m in errors if isinstance(error, kind) and text in str(error)), None
        )
        raise Wrong(f"{label} raised {_describe(error)}", found) from None


def _describe(error: BaseException) -> str:
    """``ZeroDivisionError: division by zero (line: `return a / b`)``: the type, the message
    and the innermost line of the answer's own code (not course_lib's, not NumPy's)."""
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    frames = _answer_frames(error)
    if frames and frames[-1].line:
        text += f" (at `{frames[-1].line.strip()}`)"
    return text


def _answer_frames(error: BaseException) -> list:
    """The frames of the traceback in the answer's own code (not course_lib's, not a library's)."""
    skip = ("course_lib", "site-packages", "numpy", "<frozen")
    return [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if not any(s in f.filename for s in skip)
    ]


def require(condition: bool, message: str, mistake: Mistake | None = None) -> None:
    """Raise :class:`Wrong` with ``message`` (and ``mistake``) unless ``condition`` holds."""
    if not condition:
        raise Wrong(message, mistake)


def _kind(value) -> str:
    return (
        f"{type(value).__name__} {value!r}"
        if isinstance(value, int | float | str)
        else type(value).__name__
    )


def first_match(
    got, candidates: Iterable[tuple[Mistake, Callable[[], object]]], same
) -> Mistake | None:
    """The first mistake whose wrong result (computed lazily) is ``same`` as ``got``."""
    for mistake, wrong_result in candidates:
        try:
            if same(got, wrong_result()):
                return mistake
        except Exception:  # a candidate that cannot even be computed for this input is not it
            continue
    return None


def run_graph(nodes, feed: dict):
    """Evaluate ``nodes`` fed with the part of ``feed`` they use (an executor refuses the rest)."""
    used = set(topological_order(nodes))
    return evaluate(nodes, {node: value for node, value in feed.items() if node in used})


# -- comparing numbers ------------------------------------------------------------------------
def host(value):
    """``value`` with its device arrays copied to the host (NumPy), in lists and tuples too.

    Checks compare and show numbers on the host: what the graphs compute stays on the
    current device (a GPU, or the strict stand-in), where NumPy cannot read it."""
    if device_of(value) not in (None, "cpu"):
        return to_numpy(value)
    if type(value) in (list, tuple):
        return type(value)(host(v) for v in value)
    return value


def close(got, want, rtol: float = 1e-7, atol: float = 1e-9) -> bool:
    """Same shape, and equal up to the tolerances (NaN where NaN, infinities where equal);
    arrays of any device."""
    try:
        got, want = np.asarray(host(got), dtype=float), np.asarray(host(want), dtype=float)
    except (TypeError, ValueError):
        return False
    return got.shape == want.shape and bool(np.allclose(got, want, rtol, atol, equal_nan=True))


def show(value) -> str:
    """A short, deterministic text of a number or a small array (of any device) for a message."""
    value = host(value)
    if isinstance(value, float | np.floating):
        return f"{float(value):.6g}"
    if isinstance(value, np.ndarray):
        return np.array2string(value, precision=4, threshold=8, edgeitems=2, suppress_small=True)
    return repr(value)


def mismatch(got, want) -> str:
    """``gives [1. 2.], expected [1. 3.]`` for small arrays, the worst element otherwise."""
    got, want = np.asarray(host(got), dtype=float), np.asarray(host(want), dtype=float)
    if got.shape != want.shape:
        return f"has shape {got.shape}, expected {want.shape}"
    if got.size <= 6:
        return f"gives {show(got)}, expected {show(want)}"
    bad = np.isfinite(got) != np.isfinite(want)
    error = np.where(bad, np.inf, np.abs(np.nan_to_num(got - want, nan=0.0)))
    where = np.unravel_index(np.argmax(error), got.shape)
    at = f"at index {tuple(map(int, where))}: {show(got[where])} instead of {show(want[where])}"
    if bad.any():
        return f"has {int(bad.sum())} non-finite values where finite ones are expected ({at})"
    return f"is off by up to {show(error[where])} ({at})"


def as_float(label: str, value) -> float:
    """A real number from an answer, or :class:`Wrong` saying what came back instead."""
    require(
        isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool),
        f"{label} returned {type(value).__name__} {show(value)}; it must return a number",
    )
    return float(value)
