"""Grader review, round 10: a student who wants full marks without solving.

* An answer returned objects of its own class whose ``__eq__`` says yes (and whose
  ``__class__`` says ``int``), or ``unittest.mock.ANY``: ``exact`` refused only subclasses of
  value types, so a tuple of them passed ``05.contiguous_strides`` with no flag. A metaclass
  with a false ``__flags__`` made even an ``int`` subclass look written in C.
* A solution cell patched modules the checks use but nothing guarded: ``contextlib`` (the
  forbidden-call profiler never started), ``types.BuiltinMethodType`` (NumPy's methods no
  longer recognised), ``threading.setprofile`` (the answer's threads unwatched), or a class
  attribute of a trusted class (``Fraction.__eq__``): full marks with the library's function.
* An answer computed its result in a process of its own (``os.fork``, ``subprocess``), where
  the profiler does not follow: full marks with the library's function, no flag.
* A notebook of arrays nested deeper than the stack crashed the grader for everyone; a
  memory bomb had no limit but the machine's.
"""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from test_grade_forgery import _armed

from course_lib.exercises import core, grade, verify

ROOT = Path(__file__).resolve().parent.parent
_CHECK = "grade.report('05.contiguous_strides', lambda: contiguous_strides)\n"


class _Liar:
    """Equal to everything, and an ``int`` to ``isinstance``."""

    @property
    def __class__(self):
        return int

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


class _FakeFlags(type):
    __flags__ = property(lambda cls: 0)  # "written in C"


class _Yes(int, metaclass=_FakeFlags):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


@pytest.mark.parametrize(
    "element, says",
    [
        (_Liar, "an object of a class made by your code"),
        (lambda: __import__("unittest.mock").mock.ANY, "an object of a class made by your code"),
        (lambda: _Yes(0), "a subclass of int made by your code"),
    ],
)
def test_an_element_that_equals_anything_is_refused(element, says):
    verdict = verify("05.contiguous_strides", lambda shape: tuple(element() for _ in shape))
    assert verdict.status == "failed" and says in verdict.message, verdict


def test_an_object_array_is_taken_element_by_element():
    with pytest.raises(core.Wrong, match="class made by your code"):
        core.exact("f()", np.array([1.0, _Liar()], dtype=object))
    assert core.exact("f()", np.array([1, 2.5], dtype=object)).dtype == object


_LIBRARY = """
from course_lib.strides import row_major_strides
def contiguous_strides(shape):
    return row_major_strides(shape)
"""

_PATCHES = {
    "contextlib": ("""
        import contextlib
        class _Nothing:
            def __init__(self, func, args, kwds): pass
            def __enter__(self): return None
            def __exit__(self, *exc): return False
        contextlib._GeneratorContextManager = _Nothing
        """, _LIBRARY, _CHECK),
    "threading": ("""
        import threading
        threading.setprofile = lambda f: None
        from course_lib.strides import row_major_strides
        def contiguous_strides(shape):
            out = []
            t = threading.Thread(target=lambda: out.append(row_major_strides(shape)))
            t.start(); t.join()
            return out[0]
        """, _CHECK),
    "types": ("""
        import types
        types.BuiltinMethodType = None
        def can_view(shape, strides, new_shape):
            if 0 in shape:
                return True
            low = sum(s * (d - 1) for s, d in zip(strides, shape) if s < 0)
            high = sum(s * (d - 1) for s, d in zip(strides, shape) if s > 0)
            a = np.ndarray(shape, np.int8, np.zeros(high - low + 1, np.int8), -low, strides)
            try:
                a.reshape(new_shape, copy=False)
                return True
            except ValueError:
                return False
        grade.report('05.can_view', lambda: can_view)
        """,),
    "Fraction.__eq__": ("""
        import fractions
        fractions.Fraction.__eq__ = lambda self, other: True
        fractions.Fraction.__ne__ = lambda self, other: False
        def intensity(outputs):
            return fractions.Fraction(0)
        grade.report('06.intensity', lambda: intensity)
        """,),
}


@pytest.mark.parametrize("attack", list(_PATCHES))
def test_a_patch_of_what_the_checks_use_gets_no_points(tmp_path, attack):
    code, verdicts, notes = _armed(tmp_path, *_PATCHES[attack])
    (status, message, _, patched), = verdicts.values()
    assert code == 0 and (status != "passed" or patched), verdicts


@pytest.mark.parametrize("start", ["fork", "subprocess"])
def test_an_answer_that_computes_in_a_process_of_its_own_is_not_counted(tmp_path, start):
    if start == "fork":
        body = """
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.write(w, repr(row_major_strides(shape)).encode())
                os._exit(0)
            os.close(w)
            out = os.read(r, 1 << 16)
            os.close(r)
            os.waitpid(pid, 0)
            return eval(out)
        """
    else:  # one shape in a subprocess is enough to be seen
        body = """
            import subprocess
            subprocess.run([sys.executable, "-c", "pass"])
            return row_major_strides(shape)
        """
    attack = (
        "import sys\nfrom course_lib.strides import row_major_strides as _r\n"
        "def row_major_strides(shape):\n    return tuple(int(x) for x in _r(shape))\n"
        "def contiguous_strides(shape):" + body.replace("\n            ", "\n    ")
    )
    code, verdicts, notes = _armed(tmp_path, attack, _CHECK)
    status, _, _, patched = verdicts["05.contiguous_strides"]
    assert any("a process started by the answer" in p for p in patched), verdicts
    assert any("a process started by the answer during a check" in n for n in notes), notes


def test_the_checks_own_process_is_not_flagged(tmp_path):
    right = "def contiguous_strides(shape):\n    return tuple(int(np.prod(shape[k + 1:])) " \
            "for k in range(len(shape)))\n"  # fmt: skip
    code, verdicts, notes = _armed(tmp_path, right, _CHECK)
    assert verdicts["05.contiguous_strides"] == ("passed", verdicts["05.contiguous_strides"][1],
                                                 None, []) and notes == []  # fmt: skip


def test_json_nested_deeper_than_the_stack_is_a_row_not_a_crash():
    sub = grade.Submission("s", Path("deep.ipynb"), "[" * 100_000 + "]" * 100_000)
    name, rows = grade.grade_submission(sub, {})
    assert name is None and rows[0].status == "error" and "not JSON" in rows[0].message, rows


_BOMB = """
try:
    _bomb = np.zeros(2 << 30, np.uint8)  # 2 GiB, over the limit
    LIMITED = False
except MemoryError:
    LIMITED = True
for _ in range(2000):
    print("x" * 10_000)  # 20 MB of output, dropped as it comes
def contiguous_strides(shape):
    if not LIMITED:
        return ()
    return tuple(int(np.prod(shape[k + 1:])) for k in range(len(shape)))
"""


def test_a_memory_bomb_meets_the_limit_and_a_deep_notebook_harms_no_one(tmp_path):
    notebook = json.loads((ROOT / "student" / "05_strides.ipynb").read_text())
    for cell in notebook["cells"]:
        tag = cell["metadata"].get("exercise")
        if tag and tag["part"] == "solution" and tag["id"] == "05.contiguous_strides":
            cell["source"] = _BOMB
    (tmp_path / "bomb.ipynb").write_text(json.dumps(notebook))
    (tmp_path / "deep.ipynb").write_text("[" * 100_000 + "]" * 100_000)
    out = tmp_path / "grades"
    names = [str(tmp_path / "bomb.ipynb"), str(tmp_path / "deep.ipynb")]
    assert grade.main([*names, "--out", str(out), "--kernel", "python3", "--timeout", "300",
                       "--memory", "1024"]) == 0  # fmt: skip
    with (out / "grades.csv").open(encoding="utf-8") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    assert rows["bomb"]["05.contiguous_strides"] == "1", rows["bomb"]
    assert "not JSON" in rows["deep"]["notes"], rows["deep"]
