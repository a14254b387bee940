"""Grade submitted notebooks into a gradebook: a CSV of points and a feedback file per student.

::

    python -m course_lib.exercises.grade SUBMISSION... [--roster roster.csv] [--out grades]
        [--kernel python3] [--timeout 900] [--cell-timeout 600] [--memory 8192]
        [--notebooks notebooks]

A SUBMISSION is a notebook or a folder of them (a folder per student: ``alice/05.ipynb``).
Every submission is read into memory first (one over 64 MiB is a row saying so), so one cannot
rewrite another before it is graded.
For each one the grader finds the instructor notebook whose exercises its solution cells
answer (cells tagged ``{"exercise": {"id": ..., "part": "solution"}}`` in their metadata, as
the student edition ships them; the file name does not matter), and runs a notebook it builds
itself: the instructor's cells, with each solution cell replaced by the student's, each
``check(...)`` cell replaced by a grader-owned cell that calls :func:`report`, a grader cell
before any student code that arms the audit hook of :mod:`guard`, and a last grader cell.
Exercises of other notebooks are ignored; every exercise of the notebook gets a row
("missing" when the student has no solution cell for it, or never defined the answer).

What the kernel prints is not read. The grader counts only the lines the audit hook writes,
signed with a key no student code saw, to a file of the run's private folder: for each
exercise, the last verdict that course_lib's own verdict code (checked by the identity of
its code and globals) gave during the grader's check of it. A verdict given while anything
differed from the hook's snapshot of NumPy, builtins and course_lib (module attributes,
course_lib's class attributes, functions' code and defaults, what course_lib.exercises'
lists, dicts and sets hold) is not counted and is flagged. Rows are flagged for review when
the hook saw code get around grading (a function's code or defaults swapped, ``gc``
referrers, other threads' frames, a frame read while the answer runs, a process the answer
starts during a check (its verdict is not counted either), a tracer or profiler,
another audit hook, ``ctypes`` outside course_lib, unsigned lines in its file, a check that
gave no verdict, ``sys.stdout`` replaced...), or when solution cells match patterns of
patching.

Each notebook runs in a worker process in its own session, from a private folder, with a wall
clock limit (``--timeout``) and a limit on each of its processes' writable memory (``--memory``,
``RLIMIT_DATA``: a memory bomb gets a MemoryError, not the machine); what its cells print is
dropped as it comes; afterwards every process below the worker (on Linux a subreaper,
so the processes its kernel starts and leaves stay below it), the worker and every process
that still carries the run's marker in its environment are killed. Each answer is checked
in a child process killed at the exercise's time limit (``verify``). A broken or hostile
submission is a row with its reason, never a traceback.

Known limits: the submitted code runs as your user, in the same interpreter as the grader's
check cells, so isolation is only as good as the audit hook (and the code can signal the
grader's own process). Forgeries of a few lines (rebinding ``report``, swapping ``__code__``,
rewriting ``sys.stdout``, writing lines into the hook's file) get no points and are flagged;
code written against the hook itself can still get past it, for instance a Python signal
handler that runs while the hook is on the stack and reads its key from the frame, ``ctypes``
memory writes (``memmove`` and ``cast`` raise no audit event) or ctypes used from code compiled
under a course_lib file name, a path opened relative to a directory descriptor (``dir_fd``) to
reach the hook's file, a patch of NumPy or builtins that the answer makes and undoes within one
check (of course_lib too, when the answer also swaps ``sys.audit`` for the length of its
calls: the checkpoint after each call then never reaches the hook), a signal handler the
answer sets and calls (its frame argument leads to the checker's locals), frames read by code
compiled under a library's file name, the checks' own state that the answer changes while it
runs (the forbidden-call profiler's record, reached through
``sys.getprofile().__closure__``, or core's caches), a thread the answer starts with
``_thread`` (or after changing ``threading`` during the check: such a thread runs without the
forbidden-call profiler), a process started without an audit event (``_posixsubprocess``), and
on a GPU, where checks run in the kernel itself, a thread left running that patches and
restores during a check. A check's cases are fixed (seeded) and its code is readable, so an
answer can look up results that a solution cell computed beforehand with the library's
function. The code can also read files and write outside its folder, and a process that gets
out from under the worker (the kernel killing the worker first, a chain of processes that
each fork and exit faster than the grader looks through /proc, or outside Linux one in a
session and an environment of its own) outlives the run (it could rewrite the gradebook, or
read a later run's key before its hook). Run the grader in a container (or as a user who can
read nothing else), and review flagged rows.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import hmac
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from hashlib import blake2b
from pathlib import Path

from ..tables import Table
from . import EXERCISES, guard
from .core import verify
from .edition import METADATA, exercise_parts, student_source

MISSING, ERROR, FAILED = "missing", "error", "failed"
_RUN_ENV = "COURSE_LIB_GRADE_RUN"  # marks every process of one graded notebook
_ROOT = Path(__file__).resolve().parent.parent.parent
_MAX_BYTES = 64 << 20  # a submission's size (the course's notebooks are under 1 MiB)


# -- inside the kernel: what the grader's own cells call --------------------------------------
_HOOK_PATTERNS = (
    r"\b(np|numpy|builtins|math|cl|course_lib)(\.\w+)+\s*=[^=]",
    r"\bsetattr\s*\(",
    r"\bsys\.(settrace|setprofile|modules|stdout|stderr|audit|addaudithook)\b",
    r"\b__builtins__\b",
    r"\b__code__\b",
    r"\bvars\s*\([^)]*\)\s*\[[^]]*\]\s*=[^=]",
    r"\bEXERCISES\b",
    r"\bevents\.register\b",
    r"\bos\.(kill|killpg|fork|_exit|setsid|dup2?|close)\b",
)


def report(exercise_id: str, answer) -> None:
    """Check ``answer()`` for ``exercise_id`` and print the verdict (the grader's check cell
    calls this). The grader counts only what the audit hook (guard.py) writes: this function
    begins and ends the check for it, and the verdict reaches it from the code that produced
    it (``core``), never through what this kernel prints."""
    sys.audit(guard.BEGIN, exercise_id)
    try:
        value = answer()
    except BaseException as error:  # noqa: BLE001
        if isinstance(error, NameError):
            message = f"the answer is not defined ({error})"
        else:
            message = f"evaluating the answer raised {type(error).__name__}: {error}"
        sys.audit(guard.VERDICT, exercise_id, None, MISSING, message, None)
        print(f"{exercise_id}: {MISSING}: {message}")
    else:
        print(verify(exercise_id, value))
    sys.audit(guard.END, exercise_id)


# -- reading submissions ----------------------------------------------------------------------
@dataclass
class Submission:
    student: str
    path: Path
    text: str | None = None  # the bytes as read, before anything ran
    problem: str | None = None  # why it cannot be graded
    flags: list[str] = field(default_factory=list)


def _read(path: Path, student: str) -> Submission:
    sub = Submission(student, path)
    if not path.exists():
        sub.problem = "no such file"
    elif not path.is_file():
        sub.problem = "not a file"
    elif path.stat().st_size > _MAX_BYTES:  # every file is held in memory until it is graded
        size = path.stat().st_size
        sub.problem = f"too large ({size >> 20} MiB; a notebook may have {_MAX_BYTES >> 20})"
    else:
        try:
            sub.text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            sub.problem = f"cannot be read ({type(error).__name__})"
    return sub


def _parse(text: str):
    """The notebook node, or the reason it is not one."""
    import nbformat  # noqa: PLC0415  (instructor side: the lab extra brings these)

    try:
        json.loads(text)
    except (ValueError, RecursionError) as error:  # arrays nested deeper than the stack
        return None, f"not a notebook: the file is not JSON ({str(error)[:200]})"
    try:
        notebook = nbformat.reads(text, as_version=4)
        if not isinstance(notebook.get("cells"), list):
            raise ValueError("no cells")
        for cell in notebook.cells:
            if not isinstance(cell.get("source", ""), str) or "cell_type" not in cell:
                raise ValueError("a cell without type or source")
    except Exception as error:
        return None, f"not a notebook: {type(error).__name__}: {str(error)[:200]}"
    return notebook, None


def _solutions(notebook) -> dict[str, list[str]]:
    """``exercise id -> sources of its solution cells`` from the cells' metadata."""
    found: dict[str, list[str]] = {}
    for cell in notebook.cells:
        tag = cell.get("metadata", {}).get(METADATA)
        if (
            cell.get("cell_type") == "code"
            and isinstance(tag, dict)
            and tag.get("part") == "solution"
            and isinstance(tag.get("id"), str)
        ):
            found.setdefault(tag["id"], []).append(cell.get("source", ""))
    return found


def _instructor(folder: Path) -> dict[str, tuple[str, object]]:
    """``"NN" -> (file name, notebook)`` for the instructor notebooks with exercises."""
    import nbformat  # noqa: PLC0415

    found = {}
    for path in sorted(folder.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        ids = {part[0] for part in exercise_parts(notebook).values()}
        if ids:
            found[sorted(ids)[0][:2]] = (path.name, notebook)
    return found


# -- building and running the graded notebook -------------------------------------------------
_FINAL_CELL = f"__import__('sys').audit({guard.FINAL!r})  # the grader's last look"


def _compose(instructor, solutions: dict[str, list[str]], folder: str):
    """The instructor notebook with the student's solutions and the grader's cells: the one
    that arms the audit hook (before any student code), a check cell per exercise, and a last
    cell; ``(notebook, {check cell index: exercise id}, ids with no solution cell)``."""
    import nbformat  # noqa: PLC0415

    parts = exercise_parts(instructor)
    cells, checks, absent, used = [], {}, set(), {}
    for index, cell in enumerate(instructor.cells):
        if cell.cell_type != "code":
            continue
        if len(cells) == 2:  # after the install cell and the imports: the modules as they were
            cells.append(nbformat.v4.new_code_cell(
                "from course_lib.exercises import grade as _grade, guard as _guard\n"
                f"_guard.arm({folder!r}, _grade.report)\ndel _grade, _guard"))  # fmt: skip
        exercise_id, part, answer = parts.get(index, (None, None, None))
        source = cell.source
        if part == "solution":
            k = used[exercise_id] = used.get(exercise_id, -1) + 1
            given = solutions.get(exercise_id, [])
            if k < len(given):
                source = given[k]
            else:
                absent.add(exercise_id)
                source = student_source(cell.source)
        elif part == "check":
            checks[len(cells)] = exercise_id
            source = (
                "__import__('course_lib.exercises.grade', fromlist=['report']).report("
                f"{exercise_id!r}, lambda: ({answer}))"
            )
        cells.append(nbformat.v4.new_code_cell(source))
    cells.append(nbformat.v4.new_code_cell(_FINAL_CELL))
    notebook = nbformat.v4.new_notebook(cells=cells, metadata=instructor.metadata)
    return notebook, checks, absent


def _worker() -> int:
    """Run one composed notebook (JSON on stdin) under its memory limit; print why it stopped,
    if it did. What the cells print is dropped as it comes (the grader reads none of it, and a
    cell printing without end would fill this process's memory)."""
    import resource  # noqa: PLC0415  (Unix: the worker runs there)

    import nbformat  # noqa: PLC0415
    from nbclient import NotebookClient  # noqa: PLC0415

    class Client(NotebookClient):
        def output(self, outs, msg, display_id, cell_index):
            return None

    _become_subreaper()
    job = json.loads(sys.stdin.read())
    if job["memory"]:  # the kernel inherits it (writable memory, not address space reserved)
        limit = job["memory"] << 20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    notebook = nbformat.reads(job["notebook"], as_version=4)
    options = {"kernel_name": job["kernel"]} if job["kernel"] else {}
    client = Client(
        notebook, timeout=job["cell_timeout"], allow_errors=True,
        resources={"metadata": {"path": job["folder"]}}, **options,
    )  # fmt: skip
    stopped = None
    try:
        client.execute(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except Exception as error:  # a cell timed out, the kernel died or does not exist
        lines = str(error).strip().splitlines() or [""]
        stopped = f"{type(error).__name__}: {lines[0][:200]}"
    print(json.dumps({"stopped": stopped}))
    return 0


def _become_subreaper() -> None:
    """Make this process (the worker) the parent of every orphan among its descendants
    (Linux's ``PR_SET_CHILD_SUBREAPER``): a process the kernel starts and leaves, in a session
    and an environment of its own, stays below the worker, where :func:`_kill_run` finds it."""
    import ctypes  # noqa: PLC0415  (Linux only; elsewhere the marker sweep alone)

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _descendants(root: int) -> list[int]:
    """The live processes below ``root``, from each process's parent in /proc (zombies left
    out: they are dead, waiting for their parent to read their status)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            state, parent = (entry / "stat").read_text().rpartition(")")[2].split()[:2]
            if state != "Z":
                children.setdefault(int(parent), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def _kill_run(marker: str, process: subprocess.Popen) -> None:
    """Kill every process below the worker (a subreaper: orphans stay below it), then the
    worker's session and every process that carries this run's marker."""
    for _ in range(5):  # a killed process's children become the worker's: look again
        below = _descendants(process.pid)
        if not below:
            break
        for pid in below:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)
    needle = f"{_RUN_ENV}={marker}".encode()
    for _ in range(3):  # processes may start while we look
        for entry in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError, ValueError):
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
    with contextlib.suppress(Exception):
        process.kill()
        process.wait(5)


@dataclass
class Channel:
    """What the audit hook wrote: its signed lines (``(pid, kind, ...)`` tuples, in order) and
    the number of lines whose signature was wrong."""

    lines: list = field(default_factory=list)
    forged: int = 0


def read_channel(folder: Path, key: bytes) -> Channel:
    """The lines of the hook's logs in ``folder`` whose signature ``key`` confirms."""
    found = Channel()
    for path in sorted(folder.glob(guard.LOG)):
        with contextlib.suppress(OSError):
            for raw in path.read_bytes().split(b"\n"):
                if not raw:
                    continue
                mac, _, payload = raw.partition(b" ")
                want = blake2b(payload, key=key, digest_size=32).hexdigest().encode()
                try:
                    if not hmac.compare_digest(mac, want):
                        raise ValueError
                    fields = ast.literal_eval(payload.decode("utf-8"))
                    if type(fields) is not tuple or len(fields) < 2:  # noqa: E721
                        raise ValueError
                except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError):
                    found.forged += 1
                    continue
                found.lines.append(fields)
    return found


def _execute(instructor, solutions: dict, kernel: str | None, timeout: int, cell_timeout: int,
             memory: int = 0):
    """``(composed notebook's checks, ids with no solution, the hook's channel, why the run
    stopped or None)``: the notebook runs from a private folder, its processes with at most
    ``memory`` MiB of writable memory each (0: no limit)."""
    import nbformat  # noqa: PLC0415

    marker, key = secrets.token_hex(16), secrets.token_hex(32).encode()
    with tempfile.TemporaryDirectory(prefix="grade-") as folder:
        (Path(folder) / guard.KEY).write_bytes(key)  # arm() reads it, and deletes it
        notebook, checks, absent = _compose(instructor, solutions, folder)
        job = json.dumps({
            "notebook": nbformat.writes(notebook), "kernel": kernel,
            "cell_timeout": cell_timeout, "folder": folder, "memory": memory,
        })  # fmt: skip
        env = {**os.environ, _RUN_ENV: marker, "PYTHONDONTWRITEBYTECODE": "1"}
        process = subprocess.Popen(
            [sys.executable, "-m", "course_lib.exercises.grade", "--worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=folder, env=env, start_new_session=True,
        )  # fmt: skip
        stopped = None
        try:
            out, _ = process.communicate(job.encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            out, stopped = b"", f"stopped after {timeout} s (the notebook's time limit)"
        finally:
            _kill_run(marker, process)
        channel = read_channel(Path(folder), key)
    if stopped is None:
        try:
            stopped = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
            stopped = stopped["stopped"]
        except (ValueError, IndexError, KeyError, TypeError, AttributeError):
            stopped = (
                "the grading process ended without a result "
                f"(exit status {process.returncode})"
            )
    return checks, absent, channel, stopped


@dataclass
class Row:
    exercise: str
    status: str
    message: str
    mistake: str | None = None
    review: str = ""

    @property
    def points(self) -> float:
        return EXERCISES[self.exercise].points if self.status == "passed" else 0.0


def _suspicious(sources: list[str]) -> str:
    hits = sorted(
        {m.group(0).strip() for p in _HOOK_PATTERNS for s in sources for m in re.finditer(p, s)}
    )
    return ", ".join(hits[:5])


def _verdicts(channel: Channel) -> tuple[dict, list[str]]:
    """``(exercise id -> (status, message, mistake, patched), review notes)`` from the hook's
    lines: the last verdict given during the grader's check of that exercise counts."""
    verdicts, notes, armed, final = {}, [], False, None
    for fields in channel.lines:
        kind = fields[1]
        if kind == "armed":
            armed = True
        elif kind == "verdict" and len(fields) == 8:
            _, _, window, exercise_id, status, message, mistake, patched = fields
            if window == exercise_id:
                verdicts[exercise_id] = (str(status), str(message), mistake, list(patched))
        elif kind == "event" and len(fields) >= 3:
            detail = f" ({fields[3]})" if len(fields) > 3 and fields[3] else ""
            notes.append(f"{fields[2]}{detail}")
        elif kind == "final" and len(fields) == 3:
            final = list(fields[2])
    if not armed:
        notes.append("the grader's audit hook was not armed")
    if channel.forged:
        notes.append(f"{channel.forged} unsigned lines in the grader's channel")
    if final:
        notes.append(f"patched: {', '.join(final)}")
    return verdicts, list(dict.fromkeys(notes))


def grade_submission(  # noqa: C901
    sub: Submission,
    instructors: dict,
    kernel: str | None = None,
    timeout: int = 900,
    cell_timeout: int = 600,
    memory: int = 0,
) -> tuple[str | None, list[Row]]:
    """``(instructor notebook file or None, a row per exercise)``; a problem is one row."""
    if sub.problem:
        return None, [Row("-", ERROR, sub.problem)]
    notebook, problem = _parse(sub.text)
    if problem:
        return None, [Row("-", ERROR, problem)]
    solutions = _solutions(notebook)
    numbers = sorted(
        {i[:2] for i in solutions if i[:2] in instructors},
        key=lambda n: -sum(i.startswith(n) for i in solutions),
    )
    if not numbers:
        why = (
            "not a notebook of this course: no cell is tagged as the solution of one of its "
            "exercises (submit the student edition's notebook)"
        )
        return None, [Row("-", ERROR, why)]
    name, instructor = instructors[numbers[0]]
    ids = sorted({part[0] for part in exercise_parts(instructor).values()})
    ours = {i: s for i, s in solutions.items() if i in ids}
    checks, absent, channel, stopped = _execute(
        instructor, ours, kernel, timeout, cell_timeout, memory
    )
    verdicts, notes = _verdicts(channel)
    regex = _suspicious([s for i in ids for s in ours.get(i, [])])
    if regex:
        notes.append(f"review: {regex}")
    rows = []
    for exercise_id in ids:
        found = verdicts.get(exercise_id)
        if exercise_id in absent:
            row = Row(exercise_id, MISSING, "no solution cell for this exercise in the submission")
        elif found is None:
            why = f" ({stopped})" if stopped else ""
            if not stopped and exercise_id in checks.values():
                why = " (the grader's check gave no verdict: was its code replaced?)"
                notes.append(f"no verdict from the grader's check of {exercise_id}")
            row = Row(exercise_id, MISSING, "never checked" + why)
        elif found[3]:
            row = Row(
                exercise_id, FAILED,
                "not counted: the check ran with course_lib, NumPy or builtins changed "
                f"({', '.join(found[3][:5])}); flagged for review\n{found[1]}",
                found[2], f"patched during the check: {', '.join(found[3])}",
            )  # fmt: skip
        else:
            row = Row(exercise_id, *found[:3])
        rows.append(row)
    review = "; ".join(dict.fromkeys(notes))
    for row in rows:
        if review and row.exercise not in absent:
            row.review = "; ".join(filter(None, [row.review, review]))
    ignored = sorted(set(solutions) - set(ids))
    if ignored:
        sub.flags.append(f"ignored solutions of other notebooks: {', '.join(ignored)}")
    return name, rows


# -- the gradebook ----------------------------------------------------------------------------
def _roster(path: Path) -> dict[str, str]:
    """``file name -> student id`` from a CSV with the columns ``student`` and ``file``."""
    with path.open(encoding="utf-8", newline="") as file:
        reader = csv.DictReader(file)
        if not reader.fieldnames or not {"student", "file"} <= set(reader.fieldnames):
            raise ValueError(f"{path}: the roster needs the columns student and file")
        return {Path(r["file"]).name: r["student"].strip() for r in reader if r.get("file")}


def _collect(paths: list[Path]) -> list[tuple[Path, str]]:
    """``(notebook path, student id from the path)``: a folder's notebooks, by subfolder."""
    found = []
    for path in paths:
        if path.is_dir():
            for notebook in sorted(path.rglob("*.ipynb")):
                inner = notebook.relative_to(path).parts
                found.append((notebook, inner[0] if len(inner) > 1 else notebook.stem))
        else:
            found.append((path, path.stem))
    return found


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("._") or "student"


def main(argv: list[str] | None = None) -> int:  # noqa: C901
    if argv is None and sys.argv[1:] == ["--worker"]:
        return _worker()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", nargs="+", type=Path, help="notebooks or folders of them")
    parser.add_argument("--roster", type=Path, help="CSV with columns student,file")
    parser.add_argument("--out", type=Path, default=Path("grades"),
                        help="folder for grades.csv and feedback/ (default grades)")  # fmt: skip
    parser.add_argument("--kernel", help="kernel to run them in (default: the notebook's)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per notebook (900)")
    parser.add_argument("--cell-timeout", type=int, default=600, help="seconds per cell (600)")
    parser.add_argument("--memory", type=int, default=8192,
                        help="MiB of writable memory per process (8192; 0: none)")  # fmt: skip
    parser.add_argument("--notebooks", type=Path, default=_ROOT / "notebooks",
                        help="instructor notebooks (default: the repository's notebooks/)")
    args = parser.parse_args(argv)
    roster = {}
    if args.roster:
        try:
            roster = _roster(args.roster)
        except (OSError, ValueError, csv.Error) as error:
            print(f"error: cannot read the roster: {error}", file=sys.stderr)
            return 2
    instructors = _instructor(args.notebooks) if args.notebooks.is_dir() else {}
    if not instructors:
        print(f"error: no instructor notebooks with exercises in {args.notebooks}",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.out.exists() and not args.out.is_dir():
        print(f"error: --out {args.out} is a file", file=sys.stderr)
        return 2
    submissions = []
    for path, student in _collect(args.submissions):
        sub = _read(path, roster.get(path.name, student))
        if args.roster and path.name not in roster:
            sub.student = f"?{student}"
            sub.flags.append(f"{path.name} is not on the roster")
        submissions.append(sub)  # every file is read before any runs
    for student in sorted(set(roster.values()) - {s.student for s in submissions}):
        submissions.append(Submission(student, Path("-"), problem="no submission"))
    graded = [
        (sub, *grade_submission(sub, instructors, args.kernel, args.timeout, args.cell_timeout,
                                args.memory))  # fmt: skip
        for sub in submissions
    ]
    _write(args.out, graded)
    table = []
    for sub, _, rows in graded:
        for row in rows:
            note = "; ".join(filter(None, [row.review, *sub.flags]))
            first = row.message.splitlines()[0] if row.message else ""
            table.append([sub.student, str(sub.path), row.exercise, row.status, first, note])
    passed = sum(r[3] == "passed" for r in table)
    title = f"{passed} of {len(table)} rows passed; gradebook in {args.out}/grades.csv"
    print(Table(["student", "notebook", "exercise", "verdict", "message", "flags"], table, title))
    return 0


def _write(out: Path, graded) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "feedback").mkdir(exist_ok=True)
    columns = sorted({row.exercise for _, _, rows in graded for row in rows} - {"-"})
    with (out / "grades.csv").open("w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["student", "file", "notebook", *columns, "total", "max", "notes"])
        for sub, name, rows in graded:
            got = {row.exercise: row for row in rows}
            points = [f"{got[c].points:g}" if c in got else "" for c in columns]
            total = sum(row.points for row in rows if row.exercise != "-")
            most = sum(EXERCISES[row.exercise].points for row in rows if row.exercise != "-")
            notes = [r.message for r in rows if r.exercise == "-"] + sub.flags
            notes += [f"{r.exercise} {r.review}" for r in rows if r.review]
            writer.writerow([sub.student, str(sub.path), name or "", *points, f"{total:g}",
                             f"{most:g}", "; ".join(notes)])  # fmt: skip
    by_student: dict[str, list] = {}
    for sub, name, rows in graded:
        by_student.setdefault(sub.student, []).append((sub, name, rows))
    for student, items in by_student.items():
        lines = [f"# Feedback for {student}", ""]
        for sub, name, rows in items:
            lines += [f"## {sub.path.name} ({name or 'not graded'})", ""]
            lines += [f"- {flag}" for flag in sub.flags]
            for row in rows:
                label = row.exercise if row.exercise != "-" else "submission"
                worth = EXERCISES[row.exercise].points if row.exercise in EXERCISES else None
                points = f" ({row.points:g}/{worth:g})" if worth is not None else ""
                lines.append(f"### {label}: {row.status}{points}")
                lines += ["", "```", row.message, "```", ""]
                if row.review:
                    lines += [f"Flagged for review: {row.review}", ""]
        (out / "feedback" / f"{_safe(student)}.md").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
