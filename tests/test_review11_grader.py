"""Grader review, round 11: a student who wants full marks without solving.

* A module a checker imports only when it runs (``09.parallel_memory``'s oracle,
  ``course_lib.models.parallel``) was not in the hook's snapshot: a solution cell imported it
  first and replaced the oracle, and an answer that agreed with the fake got 3 points, no flag.
* A function's keyword defaults are a dict, changed in place without a new binding:
  ``core.call.__kwdefaults__["own"] = True`` switched off ``exact`` for every check, and a
  tuple of objects equal to anything passed ``05.contiguous_strides``, no flag.
* ``exact`` let through a weak reference proxy (a C type whose ``==`` and ``__class__`` are its
  referent's: a tuple of proxies of an always-equal object passed ``05.contiguous_strides``),
  the items of ``OrderedDict``, ``defaultdict`` and ``mappingproxy`` (not exactly ``dict``),
  and anything nested more than four deep.
* Every submission is read into memory before any runs, whatever its size.
"""

import collections
import types
import weakref

import numpy as np
import pytest
from test_grade_forgery import _armed
from test_review10_grader import _Liar

from course_lib.exercises import core, grade, verify

_KEEP = []  # the proxies' referents


def _proxy():
    _KEEP.append(_Liar())
    return weakref.proxy(_KEEP[-1])


def test_an_oracle_imported_late_by_its_check_cannot_be_replaced_unseen(tmp_path):
    attack = """
    import types
    import course_lib.models.parallel as P
    from course_lib.exercises.llm_budget import PARALLEL_KEYS
    def _fake(*case):
        ns = types.SimpleNamespace()
        for k in PARALLEL_KEYS:
            setattr(ns, k, 1)
        return ns
    P.parallel_memory = _fake
    def parallel_budget(config, b, s, n, strategy):
        return dict.fromkeys(PARALLEL_KEYS, 1)
    grade.report('09.parallel_memory', lambda: parallel_budget)
    """
    code, verdicts, notes = _armed(tmp_path, attack)
    patched = verdicts["09.parallel_memory"][3]
    assert "course_lib.models.parallel.parallel_memory" in patched, verdicts


def test_keyword_defaults_changed_in_place_are_not_counted(tmp_path):
    attack = """
    from course_lib.exercises import core as _c
    _c.call.__kwdefaults__["own"] = True  # results no longer taken at their exact type
    class _Liar:
        def __eq__(self, other):
            return True
        __hash__ = object.__hash__
    def contiguous_strides(shape):
        return tuple(_Liar() for _ in shape)
    grade.report('05.contiguous_strides', lambda: contiguous_strides)
    """
    code, verdicts, notes = _armed(tmp_path, attack)
    patched = verdicts["05.contiguous_strides"][3]
    assert "course_lib.exercises.core.call.__kwdefaults__ (its contents)" in patched, verdicts


def test_a_weak_proxy_of_an_object_equal_to_anything_is_refused():
    verdict = verify("05.contiguous_strides", lambda shape: tuple(_proxy() for _ in shape))
    assert verdict.status == "failed" and "weak reference proxy" in verdict.message, verdict


def _nested(value, times):
    for _ in range(times):
        value = [value]
    return value


def _object_arrays(value, times):
    for _ in range(times):
        array = np.empty(1, object)
        array[0] = value
        value = array
    return value


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # (np.matrix)
@pytest.mark.parametrize(
    "make",
    [
        lambda: collections.OrderedDict(a=_Liar()),
        lambda: collections.defaultdict(int, a=_Liar()),
        lambda: types.MappingProxyType({"a": _Liar()}),
        lambda: _nested(_Liar(), 5),
        lambda: _object_arrays(_Liar(), 5),  # each level compares equal through its one item
        lambda: np.asmatrix(np.array([[_Liar()]], dtype=object)),
    ],
    ids=["OrderedDict", "defaultdict", "mappingproxy", "list", "object arrays", "matrix"],
)
def test_what_a_container_holds_is_taken_at_its_exact_type_however_deep(make):
    with pytest.raises(core.Wrong, match="class made by your code"):
        core.exact("f()", make())


def test_plain_nested_values_and_cycles_are_taken():
    cycle = [1, 2.5]
    cycle.append(cycle)
    assert core.exact("f()", cycle) is cycle
    deep = _nested((1, {"a": np.arange(3)}), 50)
    assert core.exact("f()", deep) is deep


def test_a_huge_submission_is_a_row_and_is_not_read(tmp_path):
    path = tmp_path / "huge.ipynb"
    with path.open("wb") as file:
        file.truncate(grade._MAX_BYTES + 1)  # sparse: no disk used
    sub = grade._read(path, "huge")
    assert sub.text is None and sub.problem.startswith("too large"), sub.problem
    name, rows = grade.grade_submission(sub, {})
    assert rows[0].status == "error" and "too large" in rows[0].message, rows
