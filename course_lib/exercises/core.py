"""What every checker shares: verdicts, named mistakes, calling an answer safely, a time limit.

A checker is a function of the student's answer that returns a one-line summary of what it
tried when the answer is right, and raises :class:`Wrong` (what went wrong, and the
:class:`Mistake` it looks like) or :class:`NotDone` otherwise. :func:`verify` runs it in a
child process (forked, in its own process group) that it kills with everything it started
when the time limit is up, and turns every outcome, including the answer's own exceptions,
``os._exit`` and endless loops no signal stops, into a :class:`Verdict`; nothing the answer
does escapes. Results of the answer are taken at their exact type (no subclass of ``int``,
``tuple``, ``ndarray``..., no object of the answer's own class, whose ``__eq__`` says yes to
everything), and an exercise may name
library functions the answer must not call (found by the identity of their code, however the
answer reached them: an alias, a bound method, a subclass).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import importlib
import io
import os
import pickle
import select
import signal
import sys
import sysconfig
import threading
import time
import traceback
import types
import warnings
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import evaluate, topological_order
from ..backend import get_device
from ..backend import to_host as host  # checks compare and show numbers on the host

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


#: The mistake of an answer that calls a library function its exercise asks the student to
#: write (each exercise names those functions in ``forbidden``).
USES_LIBRARY = Mistake(
    "uses-library",
    "the exercise asks you to write this yourself: use only what the task allows, not the "
    "course_lib function that already does it (calling it under another name counts too).",
)

#: The same mistake for a NumPy function an exercise rules out (a view with given strides,
#: a transpose, a reshape, broadcasting: what the exercise asks the student to work out).
USES_NUMPY = Mistake(
    "uses-library",
    "the exercise asks you to work this out yourself: the NumPy function named above would do "
    "it for you, so the task rules it out (its text says which ones). Compute it from the "
    "shapes and strides with plain Python (tuples, loops, arithmetic).",
)

#: The library's finite differences: an exercise that asks for one forbids them all.
FINITE_DIFFERENCES = tuple(
    f"course_lib.gradcheck.{name}"
    for name in ("forward_difference", "central_difference", "difference_errors",
                 "numerical_gradient", "check_gradients", "check_tangents")
)  # fmt: skip

#: Every way the library computes a derivative for you: reverse mode on graphs and on eager
#: tensors, forward mode, Jacobians and finite differences. An exercise about a derivative
#: forbids them all, however the answer reaches them.
DERIVATIVES = (
    "course_lib.autodiff.reverse.grad",
    "course_lib.autodiff.reverse.gradient",
    "course_lib.autodiff.reverse.gradient_trace",
    "course_lib.runtime.eager.Tensor.backward",
    "course_lib.autodiff.forward.jvp",
    "course_lib.autodiff.forward.tangent_map",
    "course_lib.jacobians.jacobian",
    *FINITE_DIFFERENCES,
)

#: The mistake of an answer that changes an array it was given (the caller still needs it).
CHANGED_INPUT = Mistake(
    "changed-input",
    "do not change the arrays you are given: compute the result into a new array (W2 = W * R, "
    "not W *= R); the caller still uses them afterwards.",
)


@dataclass(frozen=True)
class Exercise:
    """One exercise: its id, a one-line task, the mistakes its checker recognises, the checker,
    how long an answer may take, the points it is worth and the library functions an answer
    must not call (dotted names, ``"course_lib.strides.row_major_strides"``; a class stands for
    all its methods)."""

    id: str
    task: str  # for a function: its signature, " -> ", what it returns
    mistakes: tuple[Mistake, ...]
    checker: Callable[[object], str]
    function: bool = True  # the answer is a function (else a namespace, or source text)
    time_limit: float = DEFAULT_TIME_LIMIT
    points: float = 1.0
    forbidden: tuple[str, ...] = ()


EXERCISES: dict[str, Exercise] = {}


def exercise(
    exercise_id: str,
    task: str,
    mistakes: tuple[Mistake, ...],
    function: bool = True,
    time_limit: float = DEFAULT_TIME_LIMIT,
    points: float = 1.0,
    forbidden: tuple[str, ...] = (),
):
    """Register the decorated checker under ``exercise_id`` (``"NN.name"``, NN the notebook),
    with the common ``mistakes`` it recognises. When ``function``, an answer that is not
    callable is refused before the checker runs. ``points`` is what the exercise is worth in
    the gradebook; ``forbidden`` names the library functions an answer must not call."""

    def register(checker: Callable[[object], str]) -> Callable[[object], str]:
        if exercise_id in EXERCISES:
            raise ValueError(f"exercise {exercise_id!r} is registered twice")
        record = Exercise(
            exercise_id, task, mistakes, checker, function, time_limit, points, forbidden
        )
        EXERCISES[exercise_id] = record
        return checker

    return register


# -- running a check --------------------------------------------------------------------------
def verify(exercise_id: str, answer, *, time_limit: float | None = None) -> Verdict:
    """Check ``answer`` for exercise ``exercise_id`` and return the :class:`Verdict`.

    Never raises for anything the answer does (except Ctrl-C): an answer that raises (any
    exception, ``SystemExit``, ``GeneratorExit`` or a ``BaseException`` of its own), returns
    the wrong type, ends the process or runs longer than the exercise's time limit
    (``time_limit`` overrides it) gets a failing verdict that says so. The check runs in a
    forked child process, so what the answer changes dies with it; what the answer prints is
    printed here afterwards. Where there is no ``fork`` (Windows) or on a CUDA GPU (a CUDA
    context does not survive a fork) the check runs in this process under a SIGALRM timer.
    """
    found = None
    if type(exercise_id) is str:  # noqa: E721  (exact: a str subclass could pretend)
        found = _RECORDS.get(exercise_id) or EXERCISES.get(exercise_id)
    if found is None:
        return _unknown(exercise_id, answer)
    seconds = found.time_limit if time_limit is None else time_limit
    early = None
    if answer is None or answer is Ellipsis:
        early = Verdict(exercise_id, NOT_DONE, "not done yet: the answer is still empty")
    elif found.function and not callable(answer):
        signature = found.task.split(" -> ")[0]
        early = Verdict(
            exercise_id, FAILED, f"the answer must be a function {signature}, got {_kind(answer)}"
        )
    if early is not None:
        sys.audit(VERDICT_EVENT, found.id, found, early.status, early.message, None)
        return early
    if _can_fork():
        return _verify_in_child(found, answer, seconds)
    try:
        with _time_limit(seconds):
            verdict = _run_checker(found, answer)
    except OutOfTime:
        verdict = _out_of_time(exercise_id, seconds)
    # to the grader's audit hook, if there is one (guard.py): the verdict, from this code
    sys.audit(VERDICT_EVENT, found.id, found, verdict.status, verdict.message, verdict.mistake)
    return verdict


def _unknown(exercise_id, answer) -> Verdict:
    """The verdict when ``exercise_id`` names no exercise: the arguments swapped, a typo (the
    closest id suggested), or the ids there are."""
    if type(answer) is str and answer in EXERCISES:  # noqa: E721  (exact, as above)
        named = isinstance(exercise_id, types.FunctionType) and exercise_id.__name__.isidentifier()
        name = exercise_id.__name__ if named else "answer"  # not "<lambda>"
        message = f'the first argument is the exercise id: check("{answer}", {name})'
        return Verdict(answer, UNKNOWN, message)
    close = difflib.get_close_matches(str(exercise_id), EXERCISES, n=1)
    known = f'did you mean "{close[0]}"?' if close else f"known: {', '.join(sorted(EXERCISES))}"
    return Verdict(str(exercise_id), UNKNOWN, f"there is no such exercise; {known}")


def _out_of_time(exercise_id: str, seconds: float) -> Verdict:
    message = (
        f"your answer did not finish within {seconds:g} s: an endless loop, or "
        "far more work than needed?"
    )
    return Verdict(exercise_id, FAILED, message)


def _run_checker(found: Exercise, answer) -> Verdict:
    """The checker's verdict on ``answer``, in this process; every exception a verdict."""
    exercise_id = found.id
    try:
        with _quiet(), _refusing(found, answer):
            summary = found.checker(answer)
        if type(summary) is not str:  # noqa: E721  (exact: a str subclass could pretend)
            summary = str(summary)
    except OutOfTime:
        raise
    except KeyboardInterrupt:
        raise
    except NotDone as error:
        return Verdict(exercise_id, NOT_DONE, f"not done yet: {error}")
    except Wrong as error:
        return _wrong(exercise_id, error.message, error.mistake)
    except BaseException as error:  # outside a guarded call: the answer, or a bug here
        return _wrong(exercise_id, _unexpected(error), None)
    return Verdict(exercise_id, PASSED, summary)


_RUN_CHECKER_CODE = _run_checker.__code__  # where the checker starts: answer frames lie above
#: the standard modules checks rely on (``types`` and ``contextlib`` too: the forbidden-call
#: profiler tells NumPy's methods by ``types.BuiltinMethodType``, and ``_refusing`` is entered
#: through ``contextlib._GeneratorContextManager``) and NumPy's
_GUARDED = ("builtins", "math", "operator", "fractions", "types", "contextlib", "numpy",
            "numpy.linalg", "numpy.random")  # fmt: skip
#: The events by which course_lib's verdict code reports to the grader's audit hook (guard.py);
#: without a hook (a student's own notebook) raising them costs nothing.
VERDICT_EVENT, CHECKPOINT_EVENT = "course_lib.grade.verdict", "course_lib.grade.checkpoint"


def guarded_modules(packages: tuple = ("course_lib",)) -> dict:
    """``name -> module``: the standard ones above and every module of ``packages`` loaded now
    (course_lib's: the checkers and their oracles)."""
    names = [*_GUARDED, *(n for n in list(sys.modules) if n.split(".")[0] in packages)]
    return {n: sys.modules[n] for n in names if isinstance(sys.modules.get(n), types.ModuleType)}


def _snapshot() -> dict:
    """The attributes of the modules checks rely on (:func:`guarded_modules`)."""
    return {name: dict(vars(module)) for name, module in guarded_modules().items()}


def _function_of(value):
    """The plain function behind ``value`` (a function, static or class method, property)."""
    value = getattr(value, "__func__", value)
    value = getattr(value, "fget", value)
    return value if isinstance(value, types.FunctionType) else None


def collect(modules: dict, skip: Iterable[str] = ()) -> tuple[list, list]:
    """``(class attributes, functions)`` of ``modules`` (``name -> module``) as they are now.

    Class attributes are ``(class namespace, key, value, label)`` for every class written in
    Python that a module defines (course_lib's, ``fractions.Fraction``, NumPy's ``errstate``:
    ``Fraction.__eq__ = ...`` changes what every check of a fraction says); functions are
    ``(function, __code__, __defaults__, __kwdefaults__, label)`` for every function in the
    modules and in those classes (swapping a function's ``__code__`` in place leaves the
    module's attribute the same object)."""
    attributes, functions, seen = [], [], set()
    for name, module in modules.items():
        for key, value in list(vars(module).items()):
            if f"{name}.{key}" in skip:
                continue
            members = [(key, value)]
            if (isinstance(value, type) and value.__module__ == name
                    and _FLAGS(value) & _HEAP_TYPE):  # fmt: skip
                space = vars(value)
                for attr, member in list(space.items()):
                    attributes.append((space, attr, member, f"{name}.{key}.{attr}"))
                    members.append((f"{key}.{attr}", member))
            for label, member in members:
                fn = _function_of(member)
                if fn is not None and id(fn) not in seen:
                    seen.add(id(fn))
                    functions.append(
                        (fn, fn.__code__, fn.__defaults__, fn.__kwdefaults__, f"{name}.{label}")
                    )
    return attributes, functions


_KERNEL_OWNED = {"builtins.input", "builtins.raw_input", "builtins.display", "builtins.exit",
                 "builtins.quit", "builtins.get_ipython", "builtins.help"}  # fmt: skip
_RECORDS: dict = {}  # copies of the registered exercises, as they were
_ORIGINAL: dict = {}  # filled at the end of this package's import (course_lib.exercises)
_INTERNALS: dict = {"attributes": [], "functions": []}  # course_lib classes, functions' code


def take_snapshot() -> None:
    """Record the guarded modules' attributes as they are now, and the code and defaults of
    every function in them (restored in every check's child process, so a solution cell's
    ``np.allclose = lambda *a, **k: True``, ``course_lib.exercises.core.close = ...`` or
    ``core._run_checker.__code__ = ...`` does not reach the checker), and the attributes of
    course_lib's classes (reported by :func:`patched_names`, not restored)."""
    _ORIGINAL.update(_snapshot())
    modules = {name: sys.modules[name] for name in _ORIGINAL}
    attributes, functions = collect(modules, _KERNEL_OWNED)
    _INTERNALS.update(attributes=attributes, functions=functions)
    _index_library(functions)
    for name, space in _ORIGINAL.items():
        if name.split(".")[0] in _TRUSTED:
            _TRUSTED_CLASSES.update(
                {id(v): v for v in space.values() if isinstance(v, type) and v.__module__
                 and v.__module__.split(".")[0] in _TRUSTED}
            )  # fmt: skip
    _RECORDS.update({key: dataclasses.replace(record) for key, record in EXERCISES.items()})
    _freeze()


def _freeze() -> None:
    """Make what the snapshot recorded read-only. A solution cell that added its class to the
    trusted ones (``_TRUSTED_CLASSES[id(c)] = c``) or a value to the originals changed what
    the checks trust without rebinding anything, and the grader's hook compares bindings."""
    read_only, space = types.MappingProxyType, globals()
    frozen = {name: read_only(space[name])
              for name in ("_RECORDS", "_TRUSTED_CLASSES", "_LIBRARY", "_ORACLES")}  # fmt: skip
    frozen["_INTERNALS"] = read_only({k: tuple(v) for k, v in _INTERNALS.items()})
    frozen["_KERNEL_OWNED"] = frozenset(_KERNEL_OWNED)
    frozen["_ORIGINAL"] = read_only({name: read_only(s) for name, s in _ORIGINAL.items()})
    _ORIGINAL[__name__].update(frozen)  # the snapshot of this module holds the frozen ones
    space.update(frozen)


def patched_names() -> list[str]:
    """``module.attribute`` for every guarded attribute changed or deleted since the snapshot
    (``module.function.__code__`` for a function whose code or defaults were swapped)."""
    found = []
    for name, original in _ORIGINAL.items():
        module = sys.modules.get(name)
        now = vars(module) if module is not None else {}
        found += [
            f"{name}.{key}"
            for key, value in original.items()
            if now.get(key, _ORIGINAL) is not value
            and not key.startswith("_")
            and f"{name}.{key}" not in _KERNEL_OWNED
        ]
    found += [label for space, key, value, label in _INTERNALS["attributes"]
              if space.get(key, _ORIGINAL) is not value]  # fmt: skip
    found += [
        f"{label}.__code__"
        for fn, code, defaults, kwdefaults, label in _INTERNALS["functions"]
        if fn.__code__ is not code
        or fn.__defaults__ is not defaults
        or fn.__kwdefaults__ is not kwdefaults
    ]
    changed = [key for key, record in _RECORDS.items() if EXERCISES.get(key) != record]
    return found + [f"EXERCISES[{key!r}]" for key in changed]


def _restore() -> None:
    for name, original in _ORIGINAL.items():
        module = sys.modules.get(name)
        if module is None:
            continue
        now = vars(module)
        for key, value in original.items():
            if now.get(key, _ORIGINAL) is not value and f"{name}.{key}" not in _KERNEL_OWNED:
                with contextlib.suppress(Exception):
                    setattr(module, key, value)
    # (course_lib's class attributes are reported, not put back: tests patch them on purpose)
    for fn, code, defaults, kwdefaults, _ in _INTERNALS["functions"]:
        if fn.__code__ is not code:
            fn.__code__ = code
        if fn.__defaults__ is not defaults:
            fn.__defaults__ = defaults
        if fn.__kwdefaults__ is not kwdefaults:
            fn.__kwdefaults__ = kwdefaults


def _can_fork() -> bool:
    if not hasattr(os, "fork") or os.environ.get("COURSE_LIB_CHECK_IN_PROCESS"):
        return False
    try:
        return get_device() != "gpu"
    except Exception:
        return False


def _verify_in_child(found: Exercise, answer, seconds: float) -> Verdict:  # noqa: C901
    """Run the checker in a forked child in its own process group; kill the group after
    ``seconds``. The verdict (plain strings) and what the answer printed come back in a pipe."""
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(read_end)
            with contextlib.suppress(OSError):
                os.setpgid(0, 0)
            printed = io.StringIO()
            sys.stdout = sys.stderr = printed
            _restore()  # what earlier cells patched stays out of the check
            try:
                verdict = _run_checker(found, answer)
            except BaseException as error:  # noqa: BLE001  (OutOfTime cannot happen here)
                verdict = _wrong(found.id, _unexpected(error), None)
            mistake = verdict.mistake and str(verdict.mistake)
            # the grader counts this event (guard.py), not what comes back through the pipe
            sys.audit(VERDICT_EVENT, found.id, found, verdict.status, verdict.message, mistake)
            record = (str(verdict.status), str(verdict.message), mistake, printed.getvalue())
            data = pickle.dumps(record)
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view) :]
        except BaseException:  # noqa: BLE001
            code = 70
        finally:
            os._exit(code)
    os.close(write_end)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)
    chunks, deadline, timed_out = [], time.monotonic() + seconds, False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                timed_out = True
                break
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        for kill in (os.killpg, os.kill):  # the group, and the child if it left the group
            with contextlib.suppress(OSError):
                kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if timed_out:
        verdict = _out_of_time(found.id, seconds)
        sys.audit(VERDICT_EVENT, found.id, found, verdict.status, verdict.message, None)
        return verdict
    try:
        state, message, mistake, printed = pickle.loads(b"".join(chunks))
    except Exception:
        message = _ended(status)
        sys.audit(VERDICT_EVENT, found.id, found, FAILED, message, None)
        return Verdict(found.id, FAILED, message)
    if printed:
        print(printed, end="" if printed.endswith("\n") else "\n")
    return Verdict(found.id, state, message, mistake)


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return f"the process checking your answer was killed by {name} (a crash in your code?)"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    return (
        f"your answer ended the process that checks it (exit status {code}: os._exit, or a "
        "crash?) before a verdict"
    )


def _unexpected(error: BaseException) -> str:
    text = f"checking your answer raised {describe_error(error)}"
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

    The fallback where checks cannot run in a child process. Without SIGALRM (Windows) or
    outside the main thread the block runs without a limit. A timer that was already running
    (pytest-timeout, say) is restored afterwards.
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


# -- library functions an answer must not call ------------------------------------------------
def folders(*paths) -> tuple[str, ...]:
    """Each folder as named (made absolute) and as it resolves, each ending in a separator: a
    module's file name is the path it was imported by, through a symbolic link (a linked
    virtualenv or checkout) or not, so a test by file name must accept both."""
    return tuple(sorted({f"{folder}{os.sep}" for path in paths
                         for folder in (os.path.abspath(path), Path(path).resolve())}))  # fmt: skip


_PACKAGE = folders(Path(__file__).parent.parent)  # course_lib/: the checkers and oracles
_EXERCISES = folders(Path(__file__).parent)  # course_lib/exercises/
_NUMPY = folders(Path(np.__file__).parent)
#: Where trusted code outside course_lib lies (the standard library, installed packages). A
#: frame there is trusted only when its code object is one its module holds (by identity); the
#: grader's hook (guard.py) lets code there use ctypes.
_INSTALLED = folders(
    *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))
)
_MIN_COPY = 16  # bytes of bytecode below which a function is too trivial to call a copy
_LIBRARY: dict = {}  # id -> code object of course_lib (nested ones too), at the snapshot
_ORACLES: dict = {}  # id -> (code, label): course_lib.exercises' own code (checkers, oracles)
_ORIGINS: dict = {}  # id -> (code, trusted): frames classified so far
_FORBIDDEN_CACHE: dict = {}  # an exercise's forbidden names -> what the profiler matches
_OWN = " (the checker's own code)"
_HANDED: dict = {}  # id -> code: functions a check hands to the answer (they may be called)
#: bound here (a guarded module): ``threading.setprofile = lambda f: None`` in a solution cell
#: would let the answer's threads call what the exercise forbids
_THREADS_PROFILE = threading.setprofile


def _hand(args) -> None:
    """Let the answer call the checker's functions it is given (``central_difference(f, x,
    h)`` calls the checker's ``f``), and the methods of the checker's objects it is given (not
    a function the exercise forbids)."""
    for value in args:
        if isinstance(value, types.ModuleType):  # np, handed as the array module
            continue
        codes = _reachable_codes(value)
        kind = type(value)
        if (kind.__module__ or "").startswith(__package__) and kind.__flags__ & _HEAP_TYPE:
            codes |= _reachable_codes(kind)
        for code in codes:
            for inner in _nested(code):
                if id(inner) in _ORACLES:
                    _HANDED[id(inner)] = inner


def _nested(code: types.CodeType):
    """``code`` and the code objects nested in it (functions, lambdas, comprehensions)."""
    todo = [code]
    while todo:
        code = todo.pop()
        yield code
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]


def _shape(code: types.CodeType):
    """What a renamed copy of ``code`` keeps (``code.replace(co_name=...)``): its bytecode,
    constants, names and file; or None when the code is too short to tell a copy from an
    answer's own one-liner. (The file: an answer may write a function with the same bytecode
    as the library's, as the notebook's ``Dual.sin`` does, but not in the library's file.)"""
    if len(code.co_code) < _MIN_COPY or code.co_filename.startswith("<"):
        return None  # too short, or generated (a dataclass's __eq__ for the same fields)
    try:
        shape = (code.co_code, code.co_consts, code.co_names, code.co_filename)
        hash(shape)
    except TypeError:
        return None
    return shape


def _index_library(functions: list) -> None:
    """Fill :data:`_LIBRARY` and :data:`_ORACLES` from the snapshot's functions."""
    for fn, code, _, _, _ in functions:
        module = getattr(fn, "__module__", None) or ""
        if module.split(".")[0] != "course_lib":
            continue
        oracle = module.startswith(__package__ + ".") or module == __package__
        for inner in _nested(code):
            _LIBRARY[id(inner)] = inner
            # by where the code was written, not by ``__module__`` (functools.wraps copies it:
            # the standard library's dataclass repr wrapper says course_lib.exercises.core)
            if oracle and inner.co_filename.startswith(_EXERCISES):
                _ORACLES[id(inner)] = (inner, f"{inner.co_qualname}{_OWN}")


def _module_codes(module) -> dict:
    """id -> code of every function a module holds (in classes, behind decorators), nested."""
    found, seen = {}, set()
    todo = list(vars(module).values())
    name = getattr(module, "__name__", None)
    while todo:
        value = todo.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, types.FunctionType):
            for inner in _nested(value.__code__):
                found[id(inner)] = inner
        todo += _held(value, name)
    return found


def _held(value, module_name) -> list:
    """What ``value`` holds that may be a function of its module: a class's members (of a class
    the module defines), what a decorator, a static or class method, a property, a NumPy
    dispatcher or a cache wraps."""
    if isinstance(value, type):
        return list(vars(value).values()) if value.__module__ == module_name else []
    if isinstance(value, types.FunctionType):
        return [value.__dict__["__wrapped__"]] if "__wrapped__" in value.__dict__ else []
    if isinstance(value, staticmethod | classmethod):
        return [value.__func__]
    if isinstance(value, property):
        return [value.fget, value.fset, value.fdel]
    held = []
    if type(value).__module__ in ("numpy", "functools"):
        for attr in ("_implementation", "__wrapped__", "func"):  # dispatchers, caches
            with contextlib.suppress(Exception):
                held.append(getattr(value, attr))
    return held


def _trusted_code(code: types.CodeType) -> bool:
    """Whether a frame running ``code`` is course_lib's, the standard library's or an installed
    package's (NumPy's): by the identity of its code object, which the module that defines it
    holds; code compiled under such a file name (``compile(src, ".../course_lib/x.py")``) is
    not. Anything else is the answer's."""
    hit = _ORIGINS.get(id(code))
    if hit is not None and hit[0] is code:
        return hit[1]
    trusted = id(code) in _LIBRARY
    filename = code.co_filename
    if not trusted and filename.startswith(_INSTALLED + _PACKAGE):
        for module in list(sys.modules.values()):
            if getattr(module, "__file__", None) == filename and isinstance(
                    module, types.ModuleType) and id(code) in _module_codes(module):  # fmt: skip
                trusted = True
                break
    _ORIGINS[id(code)] = (code, trusted)
    return trusted


def _answer_above(frame) -> bool:
    """Whether answer code (anything not trusted) runs in ``frame`` or a frame that called it,
    up to the checker's start (:func:`_run_checker`); a thread of its own counts as the
    answer's (the checker starts none)."""
    while frame is not None:
        code = frame.f_code
        if code is _RUN_CHECKER_CODE or _HANDED.get(id(code)) is code:
            return False  # the checker's start, or a function it handed to the answer
        if not _trusted_code(code):
            return True
        frame = frame.f_back
    return True


def _resolve(dotted: str):
    """The object ``dotted`` names: ``module.function``, ``module.Class`` or
    ``module.Class.method``."""
    module_name, _, attribute = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError):  # a class attribute: module.Class.method
        module_name, _, owner = module_name.rpartition(".")
        return getattr(getattr(importlib.import_module(module_name), owner), attribute)


def _codes(dotted: str) -> set:
    """The code objects of the function (or of every method of the class) ``dotted`` names."""
    target = _resolve(dotted)
    members = vars(target).values() if isinstance(target, type) else [target]
    found = set()
    for member in members:
        member = getattr(member, "__func__", member)  # staticmethod, classmethod
        member = getattr(member, "fget", member)  # property
        member = getattr(member, "_implementation", member)  # a NumPy dispatcher
        code = getattr(member, "__code__", None)
        if code is not None:
            found.add(code)
    return found


@dataclass
class _Forbidden:
    """What the profiler matches for one exercise: code objects by identity (``codes``: id ->
    (code, label, third party)), renamed copies (``shapes``), C functions by identity
    (``c_ids``), NumPy array methods by name (``methods``) and the Python stubs of NumPy
    functions written in C (``stubs``: name -> label)."""

    codes: dict
    shapes: dict
    c_ids: dict
    methods: dict
    stubs: dict

    def label_of(self, code: types.CodeType):
        """(label, third party) when ``code`` is forbidden, else None (codes not known yet)."""
        if code.co_name in self.stubs and code.co_filename.startswith(_NUMPY):
            return self.stubs[code.co_name], True
        shape = _shape(code)
        if shape is not None and shape in self.shapes and not _trusted_code(code):
            return self.shapes[shape], False
        return None


def _forbidden(found: Exercise) -> _Forbidden:
    """Everything an answer to ``found`` must not call: every function of course_lib.exercises
    (the checkers and their oracles) and what the exercise names, course_lib's or NumPy's."""
    cached = _FORBIDDEN_CACHE.get(found.forbidden)
    if cached is not None and len(cached[0]) == len(_ORACLES):
        return cached[1]
    codes = {key: (code, label, False) for key, (code, label) in _ORACLES.items()}
    c_ids, methods, stubs = {}, {}, {}
    for dotted in found.forbidden:
        target = _resolve(dotted)
        third = not dotted.startswith("course_lib.")
        implementation = getattr(target, "_implementation", None)  # a NumPy dispatcher
        if isinstance(target, types.BuiltinFunctionType):
            c_ids[id(target)] = (target, dotted)
        elif type(target).__name__ == "method_descriptor":  # numpy.ndarray.transpose
            c_ids[id(target)] = (target, dotted)
            methods[target.__name__] = dotted
        elif isinstance(implementation, types.BuiltinFunctionType):  # written in C
            c_ids[id(implementation)] = (implementation, dotted)
            stubs[target.__name__] = dotted
        else:
            for code in _codes(dotted):
                for inner in _nested(code):
                    codes[id(inner)] = (inner, dotted if third else inner.co_qualname, third)
    allowed = {_shape(c) for key, c in _LIBRARY.items() if key not in codes}
    shapes = {}
    for code, label, third in codes.values():
        shape = _shape(code)
        if shape is not None and shape not in allowed and not third:
            shapes[shape] = label
    result = _Forbidden(codes, shapes, c_ids, methods, stubs)
    _FORBIDDEN_CACHE[found.forbidden] = (dict(_ORACLES), result)
    return result


def _reachable_codes(answer, depth: int = 2) -> set:
    """Code objects the answer is made of: its function, its class's methods, a namespace's,
    what a ``functools.partial`` or a decorator wraps."""
    seen, found, todo = set(), set(), [(answer, 0)]
    while todo:
        value, level = todo.pop()
        if id(value) in seen or level > depth:
            continue
        seen.add(id(value))
        value = getattr(value, "__func__", value)
        code = getattr(value, "__code__", None)
        if code is not None:
            found.add(code)
        todo += [(part, level + 1) for part in _parts(value)]
    return found


def _parts(value) -> list:
    """What an answer's value is made of: a class's members, a container's items, what a
    ``functools.partial`` or a decorator wraps, a namespace's attributes."""
    if isinstance(value, type):
        return [v for klass in value.__mro__ for v in vars(klass).values()]
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, tuple | list):
        return list(value)
    if isinstance(value, functools.partial):
        return [value.func, *value.args, *value.keywords.values()]
    parts = []
    if isinstance(value, types.ModuleType):
        return [v for v in vars(value).values() if not isinstance(v, types.ModuleType)]
    if hasattr(value, "__wrapped__"):
        with contextlib.suppress(Exception):
            parts.append(value.__wrapped__)
    if hasattr(value, "__dict__") and not callable(value):
        parts += list(vars(value).values())
    return parts


def _library_mistake(found: Exercise) -> Mistake:
    """The exercise's own ``uses-...`` mistake (with its hint), or :data:`USES_LIBRARY`."""
    return next((m for m in found.mistakes if m.name.startswith("uses-")), USES_LIBRARY)


@contextlib.contextmanager
def _refusing(found: Exercise, answer):  # noqa: C901  (one closure: the profiler, its state)
    """While the checker runs: a call of a forbidden function (every function of
    course_lib.exercises, the checkers' oracles, and what the exercise names) with answer code
    anywhere between it and the checker (not only as its caller) is recorded, and refused
    afterwards with :data:`USES_LIBRARY`. course_lib's code and trusted code are told apart
    from the answer's by the identity of their code objects (:func:`_trusted_code`), not by
    file name; a renamed copy of a forbidden function counts as the function. A NumPy function
    that an exercise names is NumPy's to call for itself (``np.ndindex`` uses ``as_strided``),
    not the answer's. The answer itself is refused when it *is* a forbidden function (or a
    class with its methods). The caches start empty: a solution cell could have filled them
    (its own code as trusted, an exercise's rules as empty)."""
    _ORIGINS.clear()
    _FORBIDDEN_CACHE.clear()
    rules = _forbidden(found)
    codes, shapes = rules.codes, rules.shapes
    mine = _reachable_codes(answer)
    hit = next((c for c in mine if id(c) in codes or _shape(c) in shapes), None)
    if hit is not None:
        oracle = id(hit) in _ORACLES or (_shape(hit) in shapes and id(hit) not in codes)
        raise Wrong("your answer is the library's own function",
                    USES_LIBRARY if oracle else _library_mistake(found))  # fmt: skip
    calls: list[tuple[str, bool]] = []
    verdicts = dict(codes)  # id -> (code, label, third party) or (code, None, False)
    c_ids, methods = rules.c_ids, rules.methods
    builtin_method, ndarray = types.BuiltinMethodType, np.ndarray

    above: dict = {}  # id -> (frame, answer above it): a live frame's callers never change

    def answer_above(frame) -> bool:
        """:func:`_answer_above`, remembered for the frames on the way (an oracle called in a
        loop walks one frame, not the whole stack)."""
        path, result = [], True
        while frame is not None:
            hit = above.get(id(frame))
            if hit is not None and hit[0] is frame:
                result = hit[1]
                break
            code = frame.f_code
            if code is _RUN_CHECKER_CODE or _HANDED.get(id(code)) is code:
                result = False
                break
            if not _trusted_code(code):
                break
            path.append(frame)
            frame = frame.f_back
        if len(above) > 4096:  # frames kept alive here: a bounded few
            above.clear()
        for walked in path:
            above[id(walked)] = (walked, result)
        return result

    def refused(caller, label: str, third: bool) -> None:
        if caller is not None and _HANDED.get(id(caller.f_code)) is caller.f_code:
            return  # a function the checker handed to the answer, calling what it needs
        if third and caller is not None and _trusted_code(caller.f_code) and (
                id(caller.f_code) not in _LIBRARY):  # fmt: skip
            return  # NumPy calling its own function (np.ndindex and as_strided)
        if answer_above(caller):
            calls.append((label, "oracle" if label.endswith(_OWN) else
                          "numpy" if third else "library"))  # fmt: skip

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            known = verdicts.get(id(code))
            if known is None or known[0] is not code:
                label = rules.label_of(code)
                known = (code, *label) if label else (code, None, False)
                verdicts[id(code)] = known
            if known[1] is not None and _HANDED.get(id(code)) is not code:
                refused(frame.f_back, known[1], known[2])
        elif event == "c_call" and (c_ids or methods):
            known = c_ids.get(id(arg))
            if known is not None and known[0] is arg:
                refused(frame, known[1], True)
            elif methods and type(arg) is builtin_method and arg.__name__ in methods and (
                    isinstance(arg.__self__, ndarray)):  # fmt: skip
                refused(frame, methods[arg.__name__], True)

    _HANDED.clear()
    previous = sys.getprofile()
    sys.setprofile(profile)
    _THREADS_PROFILE(profile)
    failure = None  # what ends the check, if it fails
    try:
        yield
    except BaseException as error:
        failure = error
        raise
    finally:
        above.clear()
        _HANDED.clear()
        still = sys.getprofile() is profile
        sys.setprofile(previous)
        _THREADS_PROFILE(None)
        if calls:
            label, kind = calls[0]
            if kind == "numpy":
                raise Wrong(f"your answer calls {label}, which this exercise rules out",
                            USES_NUMPY)  # fmt: skip
            raise Wrong(f"your answer calls the library's {label}",
                        USES_LIBRARY if kind == "oracle" else _library_mistake(found))  # fmt: skip
        # endless recursion also switches it off (the hook itself runs out of stack); the
        # answer fails for that anyway, and a recursion it caught leaves no failure here
        if not still and not _recursion(failure):
            raise Wrong("your answer switched off the profiler that watches library calls")


# -- calling the answer -----------------------------------------------------------------------
def call(label: str, fn, *args, errors: Iterable[tuple[type, str, Mistake]] = (),
         changed: Mistake = CHANGED_INPUT, own: bool = False):
    """``fn(*args)``, with whatever it raises turned into :class:`Wrong` or :class:`NotDone`,
    and :class:`Wrong` when it changed an array argument in place.

    ``label`` shows the call in messages (``"can_view((2, 3), (3, 1), (6,))"``). ``errors``
    recognises mistakes by what they raise: ``(exception type, text in its message, mistake)``;
    ``changed`` is the mistake of an answer that changes an array argument. ``own``: the result
    is an object of the answer's own class (a ``Dual``, a ``NamedTuple`` too), never compared
    as a whole: the checker reads its attributes, each taken at its exact type (:func:`exact`).
    """
    before = {k: a.copy() for k, a in enumerate(args) if type(a) is np.ndarray}
    _hand(args)
    try:
        result = fn(*args)
        sys.audit(CHECKPOINT_EVENT)  # the grader's hook notes what the call changed
        result = result if own else exact(label, result)
    except NotImplementedError:
        raise NotDone(
            f"{label} raises NotImplementedError (replace the stub with your code)"
        ) from None
    except (Wrong, NotDone, OutOfTime, KeyboardInterrupt):
        raise
    except BaseException as error:  # SystemExit, GeneratorExit, a BaseException of its own
        found = next(
            (m for kind, text, m in errors if isinstance(error, kind) and text in str(error)), None
        )
        raise Wrong(f"{label} raised {describe_error(error)}", found) from None
    for k, copy in before.items():
        require(np.array_equal(args[k], copy, equal_nan=True) and args[k].shape == copy.shape,
                f"{label} changed its argument {k + 1} in place", changed)  # fmt: skip
    return result


_TRUSTED = ("builtins", "numpy", "course_lib", "cupy", "fractions")
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (or type())
#: a class's own flags and MRO (a metaclass can give a class any ``__flags__`` or ``__mro__``)
_FLAGS, _MRO = type.__dict__["__flags__"].__get__, type.__dict__["__mro__"].__get__


def _trusted(kind: type) -> bool:
    """Whether results of class ``kind`` are taken as they are: a class written in C (int,
    tuple, ndarray, NumPy's scalars...), or a Python class that a trusted module held when the
    snapshot was taken (Fraction, course_lib's own), found by identity: an answer's class can
    say ``__module__ = "builtins"``, but it cannot be one of those."""
    if not _FLAGS(kind) & _HEAP_TYPE:
        return True
    found = _TRUSTED_CLASSES.get(id(kind))
    return found is kind



_TRUSTED_CLASSES: dict = {}  # id -> class, filled by take_snapshot


def exact(label: str, value):
    """``value`` unchanged, or :class:`Wrong` when it (or an element of a tuple, list, set,
    dict or object array in it, however deep) is an object of an answer-made class that is
    not a subclass of one of course_lib's (an op): a subclass of a number, string, container
    or array, or any other class (whose ``__eq__`` may agree with anything, and whose
    ``__class__`` may say ``int``), or a weak reference proxy (its ``==`` and ``__class__``
    are its referent's), so checks take results at their exact, trusted type."""
    todo, seen = [value], {}
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen[id(item)] = item  # (kept alive: an id is not reused while we look)
        _exact_type(label, item)
        kind = type(item)
        if issubclass(kind, tuple | list | set | frozenset):
            todo += item
        elif issubclass(kind, dict | types.MappingProxyType):  # OrderedDict, defaultdict too
            todo += [x for pair in item.items() for x in pair]
        elif issubclass(kind, np.ndarray) and item.dtype.hasobject:
            todo += item.ravel().tolist()  # an array of objects compares them with their ==
    return value


def _exact_type(label: str, value) -> None:
    """:class:`Wrong` unless ``value``'s own class is one :func:`exact` takes."""
    kind = type(value)
    if kind in _PROXIES:
        raise Wrong(f"{label} returned a weak reference proxy; return plain values (numbers, "
                    "tuples, lists, arrays)")  # fmt: skip
    base = kind if _trusted(kind) else next(b for b in _MRO(kind) if _trusted(b))
    ours = _FLAGS(base) & _HEAP_TYPE and base.__module__.split(".")[0] == "course_lib"
    if base is not kind and not ours:
        if base is object:
            raise Wrong(
                f"{label} returned a {kind.__name__}, an object of a class made by your code; "
                "return plain values (numbers, tuples, lists, arrays)"
            )
        raise Wrong(
            f"{label} returned a {kind.__name__}, a subclass of {base.__name__} made by your "
            f"code; return a plain {base.__name__}"
        )


_PROXIES = (weakref.ProxyType, weakref.CallableProxyType)


def _recursion(error: BaseException | None) -> bool:
    """Whether ``error`` is a RecursionError, or the :class:`Wrong` that :func:`call` made of
    one."""
    return isinstance(error, RecursionError) or (
        isinstance(error, Wrong) and isinstance(error.__context__, RecursionError))  # fmt: skip


def describe_error(error: BaseException) -> str:
    """``ZeroDivisionError: division by zero (line: `return a / b`)``: the type, the message
    and the innermost line of the answer's own code (not course_lib's, not NumPy's); for a
    RecursionError what it usually means (its innermost line is wherever the stack ran out)."""
    if isinstance(error, RecursionError):
        return ("RecursionError: maximum recursion depth exceeded — a recursive call that never "
                "reaches its base case (is the argument getting smaller?)")  # fmt: skip
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


#: The memory layouts :func:`laid_out` makes; checks cycle through them.
LAYOUTS = ("C", "F", "strided")


def laid_out(array: np.ndarray, layout: str) -> np.ndarray:
    """A new array equal to ``array`` in another memory layout: ``"C"`` (row major), ``"F"``
    (column major) or ``"strided"`` (every other element of a larger buffer). An answer must
    not depend on how its inputs lie in memory (a write through ``.ravel()`` of a column-major
    array, for one, changes a copy)."""
    if layout in ("C", "F"):
        return np.array(array, order=layout)
    if array.ndim == 0:
        return array.copy()
    wide = np.zeros(array.shape[:-1] + (2 * array.shape[-1],), array.dtype)
    wide[..., ::2] = array
    return wide[..., ::2]


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
    exact(label, value)
    require(
        isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool),
        f"{label} returned {type(value).__name__} {show(value)}; it must return a number",
    )
    return float(value)
