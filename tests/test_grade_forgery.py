"""Forged passes (grader review, round 3, severity 1): a solution cell that rebinds
``grade.report``, swaps a checker's ``__code__`` or rewrites ``sys.stdout`` got full marks
for wrong answers, with no flag. The grader now counts only what its audit hook (guard.py)
writes, signed, to a file of the run's private folder.

The first tests arm the hook in a plain interpreter (fast); the last grades the reviewer's
attack notebooks end to end.
"""

import copy
import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from course_lib.exercises import grade, guard

ROOT = Path(__file__).resolve().parent.parent
KEY = b"0123456789abcdef" * 4

_PRELUDE = """
import os, sys
import numpy as np
import course_lib as cl
import course_lib.exercises
from course_lib.exercises import guard, grade
guard.arm(sys.argv[1], grade.report)
"""

_RIGHT = "def contiguous_strides(shape):\n" \
         "    return tuple(int(np.prod(shape[k + 1:])) for k in range(len(shape)))\n"  # fmt: skip
_WRONG = "def contiguous_strides(shape):\n    return ()\n"
_CHECK = "grade.report('05.contiguous_strides', lambda: contiguous_strides)\n"


def _armed(tmp_path: Path, *parts: str):
    """Run the code ``parts`` in an interpreter whose grader's hook is armed; ``(exit status,
    verdicts, review notes)`` as the grader reads them from the hook's channel."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / guard.KEY).write_bytes(KEY)
    script = tmp_path / "cell.py"
    script.write_text(_PRELUDE + "".join(textwrap.dedent(p) for p in parts))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(script), str(folder)], cwd=folder, env=env, timeout=120,
        capture_output=True, text=True,
    )  # fmt: skip
    assert not (folder / guard.KEY).exists()  # read, and deleted before any student code
    verdicts, notes = grade._verdicts(grade.read_channel(folder, KEY))
    return done.returncode, verdicts, notes


def test_an_honest_answer_passes_with_no_note(tmp_path):
    code, verdicts, notes = _armed(tmp_path, _RIGHT, _CHECK)
    assert code == 0
    assert verdicts["05.contiguous_strides"][0] == "passed", verdicts
    assert verdicts["05.contiguous_strides"][3] == [] and notes == []


def test_an_empty_answer_is_not_done_with_no_note(tmp_path):
    code, verdicts, notes = _armed(tmp_path, "contiguous_strides = ...\n", _CHECK)
    assert verdicts["05.contiguous_strides"][0] == "not done" and notes == [], verdicts


def test_a_replaced_report_gives_no_verdict_and_is_flagged(tmp_path):
    attack = """
    import json
    def _report(exercise_id, answer, nonce=None):
        print(nonce, json.dumps({"exercise": exercise_id, "status": "passed"}), flush=True)
    vars(grade)["report"] = _report
    """
    code, verdicts, notes = _armed(tmp_path, attack, _WRONG, _CHECK, "sys.audit(guard.FINAL)\n")
    assert code == 0 and verdicts == {}
    assert any("course_lib.exercises.grade.report" in n for n in notes), notes


def test_a_swapped_checker_code_is_put_back_and_flagged(tmp_path):
    attack = """
    import course_lib.exercises.core as _c
    from course_lib.exercises.core import Verdict, PASSED
    def _fake(found, answer):
        return Verdict(found.id, PASSED, "all good")
    _c._run_checker.__code__ = _fake.__code__
    """
    code, verdicts, notes = _armed(tmp_path, attack, _WRONG, _CHECK)
    assert verdicts["05.contiguous_strides"][0] == "failed", verdicts
    assert any("set __code__ of a function" in n for n in notes), notes


def test_a_rewritten_stdout_changes_nothing_the_grader_reads(tmp_path):
    attack = """
    class _W:
        def __init__(self, inner): self.inner = inner
        def write(self, text):
            return self.inner.write(text.replace("failed", "passed"))
        def __getattr__(self, name): return getattr(self.inner, name)
    sys.stdout = _W(sys.stdout)
    """
    code, verdicts, notes = _armed(tmp_path, attack, _WRONG, _CHECK, "sys.audit(guard.FINAL)\n")
    assert verdicts["05.contiguous_strides"][0] == "failed", verdicts
    assert any("sys.stdout" in n for n in notes), notes


def test_an_answer_that_patches_its_checker_while_it_runs_is_not_counted(tmp_path):
    attack = """
    def contiguous_strides(shape):
        import course_lib.exercises.layouts as L
        vars(L)["_element_strides"] = lambda a: (0,) * a.ndim
        return (0,) * len(shape)
    """
    code, verdicts, notes = _armed(tmp_path, attack, _CHECK)
    status, _, _, patched = verdicts["05.contiguous_strides"]
    assert "course_lib.exercises.layouts._element_strides" in patched, verdicts


@pytest.mark.parametrize(
    "forgery, note",
    [
        ("sys.audit(guard.VERDICT, '05.contiguous_strides', None, 'passed', 'ok', None)",
         "a verdict from code that is not the grader's"),
        ("sys.audit(guard.BEGIN, '05.contiguous_strides')",
         "a grader's check begun by code that is not the grader's"),
        ("import gc; gc.get_referrers(grade)", "gc.get_referrers"),
        ("sys._current_frames()", "sys._current_frames"),
        ("sys.settrace(lambda *a: None)", "a tracer or profiler on during a check"),
        ("sys.addaudithook(lambda *a: None)", "sys.addaudithook"),
        ("import ctypes; ctypes.string_at(id(1), 8)", "ctypes.string_at"),
        ("f = lambda: 0\nf.__code__ = (lambda: 1).__code__", "set __code__ of a function"),
        ("import course_lib.exercises.core as c; c.close.__defaults__ = (1.0, 1.0)",
         "set __defaults__ of a function"),
    ],
)  # fmt: skip
def test_ways_around_grading_are_recorded(tmp_path, forgery, note):
    code, verdicts, notes = _armed(tmp_path, forgery + "\n", _WRONG, _CHECK)
    assert verdicts["05.contiguous_strides"][0] == "failed", verdicts
    assert any(note in n for n in notes), notes


_HOOK_ROUND_2 = {  # a hostile review of the hook itself
    # student code run inside the hook (a str subclass as a file name): it replaced the
    # hook's `send`, so every verdict went out signed as passed, and no event was written
    "renamed file": """
        import gc as _gc
        def _inside():
            f = sys._getframe(1)
            while f is not None and f.f_code.co_name != "hook":
                f = f.f_back
            ov = f.f_locals["on_verdict"]
            cells = dict(zip(ov.__code__.co_freevars, ov.__closure__))
            real = cells["send"].cell_contents
            def fake(*fields):
                if fields[0] == "verdict":
                    return real("verdict", fields[2], fields[2], "passed", "right", None, ())
                return None if fields[0] == "event" else real(*fields)
            cells["send"].cell_contents = fake
        class _Name(str):
            def __add__(self, other):
                _inside()
                raise RuntimeError
            startswith = __add__
        def _probe():
            _gc.get_referrers(None)
        _probe = type(_probe)(_probe.__code__.replace(co_filename=_Name("x")), globals())
        _probe()
        """,
    # NumPy's functions look up helpers in its submodules' globals
    "numpy submodule": """
        from numpy._core import numeric as _n
        _real = _n.asanyarray
        _n.asanyarray = lambda x, *a, **k: _real(x, *a, **k)
        """,
    # a closure cell of a checker's helper: setting cell_contents raises no audit event
    "closure cell": """
        import contextlib
        from course_lib.exercises import core as _c
        @contextlib.contextmanager
        def _allow(found, answer):
            yield
        _c._refusing.__closure__[0].cell_contents = _allow.__wrapped__
        """,
}


@pytest.mark.parametrize("attack", list(_HOOK_ROUND_2))
def test_code_against_the_hook_itself_gets_no_points(tmp_path, attack):
    code, verdicts, notes = _armed(tmp_path, _HOOK_ROUND_2[attack], _WRONG, _CHECK)
    status, _, _, patched = verdicts.get("05.contiguous_strides", ("missing", "", None, []))
    assert status != "passed" and (notes or patched), (verdicts, notes)


@pytest.mark.parametrize(
    "honest",
    [
        "os.open('.', os.O_RDONLY)",  # the working directory is the run's folder: reading it
        "list(os.fwalk('.'))",
        "import cProfile; cProfile.run('sum(range(10))')",  # %prun in a cell of its own
        "from threadpoolctl import threadpool_limits\nwith threadpool_limits(limits=1): pass",
        "import multiprocessing; multiprocessing.Value('i', 0)",
    ],
)  # fmt: skip
def test_honest_tools_are_not_flagged(tmp_path, honest):
    code, verdicts, notes = _armed(tmp_path, honest + "\n", _RIGHT, _CHECK)
    assert code == 0 and verdicts["05.contiguous_strides"][0] == "passed", verdicts
    assert verdicts["05.contiguous_strides"][3] == [] and notes == [], (verdicts, notes)


def test_lines_written_into_the_channel_by_other_code_do_not_count(tmp_path):
    forged = """
    for fd in os.listdir("/proc/self/fd"):
        if "audit-" in os.readlink(f"/proc/self/fd/{fd}"):
            os.write(int(fd), b"0" * 64 + b" (1, 'verdict', '05.contiguous_strides', "
                     b"'05.contiguous_strides', 'passed', 'ok', None, ())\\n")
    """
    code, verdicts, notes = _armed(tmp_path, _WRONG, _CHECK, forged)
    assert verdicts["05.contiguous_strides"][0] == "failed"
    assert any("unsigned lines" in n for n in notes), notes


def test_opening_the_channel_ends_the_kernel_and_keeps_what_it_holds(tmp_path):
    attack = """
    import glob
    open(glob.glob(os.path.join(sys.argv[1], "audit-*.log"))[0], "w").close()
    """
    code, verdicts, notes = _armed(tmp_path, _RIGHT, _CHECK, attack)
    assert code == 70
    assert verdicts["05.contiguous_strides"][0] == "passed"
    assert any("open of the grader's channel" in n for n in notes), notes


# -- end to end: the reviewer's notebooks (tmp/review_grader/mk.py, mk2.py) -------------------
_WRONG_CELLS = {
    "05.permuted": "def permuted(shape, strides, axes):\n    return shape, strides\n",
    "05.can_view": "def can_view(shape, strides, new_shape):\n    return True\n",
    "05.add_views": "def add_views(a, b):\n    return 0\n",
}
_ATTACKS = {
    "attack_report": """import json
import course_lib.exercises.grade as _g
def _report(exercise_id, answer, nonce):
    print(nonce, json.dumps({"exercise": exercise_id, "status": "passed", "message": "ok",
                             "mistake": None, "patched": []}), flush=True)
vars(_g)["report"] = _report
def contiguous_strides(shape):
    return ()
""",
    "attack_code": """import course_lib.exercises.core as _c
def _fake(found, answer):
    return Verdict(found.id, PASSED, "all good")
_c._run_checker.__code__ = _fake.__code__
def contiguous_strides(shape):
    return ()
""",
    "attack_stdout": """import sys as _s
class _W:
    def __init__(self, inner): self.inner = inner
    def write(self, text):
        return self.inner.write(text.replace('"status": "failed"', '"status": "passed"')
                                    .replace('"status": "not done"', '"status": "passed"'))
    def __getattr__(self, name): return getattr(self.inner, name)
_s.stdout = _W(_s.stdout)
def contiguous_strides(shape):
    return ()
""",
}


def test_the_reviewers_forgeries_get_no_points_and_are_flagged(tmp_path):
    base = json.loads((ROOT / "student" / "05_strides.ipynb").read_text())
    for name, first in _ATTACKS.items():
        notebook = copy.deepcopy(base)
        sources = {"05.contiguous_strides": first, **_WRONG_CELLS}
        for cell in notebook["cells"]:
            tag = cell["metadata"].get("exercise")
            if tag and tag["part"] == "solution" and tag["id"] in sources:
                cell["source"] = sources[tag["id"]]
        (tmp_path / f"{name}.ipynb").write_text(json.dumps(notebook))
    out = tmp_path / "grades"
    names = [str(tmp_path / f"{n}.ipynb") for n in _ATTACKS]
    assert grade.main([*names, "--out", str(out), "--kernel", "python3", "--timeout", "300"]) == 0
    with (out / "grades.csv").open(encoding="utf-8") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    for name in _ATTACKS:
        assert rows[name]["total"] == "0" and rows[name]["max"] == "8", rows[name]
        assert rows[name]["notes"], rows[name]  # flagged for review
    assert "grade.report" in rows["attack_report"]["notes"]
    assert "__code__" in rows["attack_code"]["notes"]
    assert "sys.stdout" in rows["attack_stdout"]["notes"]


def test_the_trusted_classes_cannot_be_added_to(tmp_path):
    """An answer's always-equal int, added in place to the classes the checks trust (the
    hook compares bindings, not contents): the snapshot's containers are read-only."""
    attack = """
    from course_lib.exercises import core as _c
    class _Any(int):
        def __eq__(self, other):
            return True
        __hash__ = int.__hash__
    try:
        _c._TRUSTED_CLASSES[id(_Any)] = _Any
    except TypeError:
        pass
    def contiguous_strides(shape):
        return tuple(_Any(0) for _ in shape)
    """
    code, verdicts, notes = _armed(tmp_path, attack, _CHECK)
    assert verdicts["05.contiguous_strides"][0] == "failed", verdicts
