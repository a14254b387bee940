"""What an op declares once, and what follows from it: its attributes (key and label),
its linearity (its tangent rule), its FLOP count; and Node's operators, defined in graph.py."""

import inspect
import re

import numpy as np
import pytest
from op_specs import SPEC_BY_NAME, SPECS, UNARY_OPS

import course_lib as cl
from course_lib import graph
from course_lib.graph import Node, Op
from course_lib.models.flops import LECTURE
from course_lib.models.optim import AdamMoment, AdamWUpdate, SGDUpdate
from course_lib.ops.attention import CausalSoftmax
from course_lib.ops.control import DEAD
from course_lib.ops.elementwise import Cast, Power
from course_lib.ops.nn import CrossEntropy, LogSoftmax, Softmax
from course_lib.ops.reductions import LogSumExp, Sum
from course_lib.ops.shape import GetItem


def _shapes(spec) -> list:
    if spec.shape_kind == "fixed":
        return [tuple(s) for s in spec.extra["shapes"][0]]
    if spec.shape_kind == "matrix":
        return [(2, 2, 3), (3, 4)]
    if spec.shape_kind == "rows2":
        return [(3, 2)]
    if spec.broadcast:
        return [(2, 3), (3,)]
    return [(2, 3)] * spec.arity


def _extra_graphs():
    """Graphs with the ops the op table does not build (control flow, ids, casts, fills, the
    run-time shape forms); name -> (output, variables, feed)."""
    x, y = cl.variable("x", dtype=np.float64), cl.variable("y", (3,), np.float64)
    logits = cl.variable("logits", (4, 3), np.float64)
    return {
        "cond": (
            cl.cond(cl.sum(y) > 0.0, lambda a: a * 2.0, lambda a: cl.exp(a), y),
            [y],
            {y: np.array([1.0, -0.5, 2.0])},
        ),
        "cross_entropy": (
            cl.cross_entropy(logits, np.array([0, 2, 1, 1])),
            [logits],
            {logits: np.linspace(-1, 1, 12).reshape(4, 3)},
        ),
        "unknown shapes": (
            cl.sum(cl.reshape(x, (-1,)) * cl.cast(y > 0.0, np.float64) + y),
            [x, y],
            {x: np.ones((1, 3)), y: np.array([1.0, -2.0, 3.0])},
        ),
    }


def _graphs():
    """Every (output, variables, feed) the op table builds, and the extra ones."""
    found = {}
    for spec in SPECS:
        shapes = _shapes(spec)
        xs = [cl.variable(f"x{i}", s, np.float64) for i, s in enumerate(shapes)]
        rng = np.random.default_rng(0)
        feed = {x: np.abs(rng.standard_normal(s)) + 0.5 for x, s in zip(xs, shapes)}
        found[spec.name] = (spec.build(*xs), xs, feed)
    return found | _extra_graphs()


def _all_nodes():
    """Forward, backward and tangent nodes of every graph, with the feed to run them."""
    for name, (out, xs, feed) in _graphs().items():
        grads = cl.grad(cl.sum(out * out), xs)
        tangent = cl.jvp(out, {x: np.ones(v.shape) for x, v in feed.items()})
        for node in cl.topological_order([out, *grads, tangent]):
            if node.inputs:
                yield name, node, feed


OPS = {}
for _name, _node, _ in _all_nodes():
    OPS.setdefault(type(_node.op), _node.op)
OPS.update({SGDUpdate: SGDUpdate(0.1), AdamMoment: AdamMoment(0.9, 2),
            AdamWUpdate: AdamWUpdate(0.9, 0.99, 1e-8, 0.01)})  # fmt: skip


def test_the_collection_covers_the_op_library():
    names = {cls.__name__ for cls in OPS}
    expected = {"Add", "Mul", "Sum", "Unreduce", "SumTo", "BroadcastTo", "Reshape", "GetItem",
                "ScatterLike", "Take", "TakeAdjoint", "Concat", "ConcatPart", "Switch", "Merge",
                "Revive", "Cast", "Fill", "CrossEntropy", "OneHotLike", "Softmax", "RMSNorm",
                "RMSNormGradX", "RMSNormGradW", "Rope", "CausalSoftmax", "SoftmaxGrad"}  # fmt: skip
    assert expected <= names


# -- attributes: declared once; key and label follow -------------------------------------------
@pytest.mark.parametrize("op", list(OPS.values()), ids=lambda op: type(op).__name__)
def test_every_attribute_is_stored_once_and_declared(op):
    assert set(vars(op)) == set(op.attributes)
    assert op.attrs == {a: getattr(op, a) for a in op.attributes}


@pytest.mark.parametrize("op", list(OPS.values()), ids=lambda op: type(op).__name__)
def test_an_op_is_its_class_and_its_attributes(op):
    twin = type(op)(**op.attrs)
    assert twin is not op and twin.key() == op.key() and twin.label() == op.label()
    assert hash(op.key()) == hash(twin.key())
    if "label" not in vars(type(op)) and op.attributes:  # the label spells the attributes out
        assert op.label() == f"{op.name}({', '.join(f'{k}={v}' for k, v in op.attrs.items())})"


@pytest.mark.parametrize(
    "a, b",
    [
        (Sum(0), Sum(1)),
        (Sum(0), Sum(0, keepdims=True)),
        (Cast(np.float32), Cast(np.float64)),
        (Power(2), Power(3)),
        (GetItem(np.array([0, 1])), GetItem(np.array([1, 0]))),
        (GetItem(np.array([0, 1])), GetItem(np.array([0, 1], dtype=np.int32))),
        (GetItem((slice(None), None)), GetItem((slice(None), 0))),
        (Sum(0), cl.ops.reductions.Mean(0)),
    ],
)
def test_different_attributes_give_different_keys(a, b):
    assert a.key() != b.key()


def test_cast_holds_one_dtype():
    op = Cast("float32")
    assert op.dtype is np.dtype(np.float32) and op.attrs == {"dtype": np.dtype(np.float32)}
    assert op.label() == "cast(dtype=float32)" and op.infer_dtype(np.dtype(bool)) is op.dtype
    assert op.compute(np, np.array([True])).dtype == op.dtype


@pytest.mark.parametrize("values", [{"axis": 0, "keepdims": False, "axes": 1}, {"axis": 0}])
def test_op_init_sets_exactly_the_declared_attributes(values):
    with pytest.raises(TypeError, match=r"Sum declares the attributes \('axis', 'keepdims'\)"):
        Op.__init__(Sum(0), **values)


# -- linearity: declared once; the tangent rule follows ----------------------------------------
def _op_classes():
    found, todo = set(), [Op]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("course_lib.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return sorted(found, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", [c for c in _op_classes() if c.linear], ids=lambda c: c.__name__)
def test_linear_ops_take_their_tangent_rule_from_op(cls):
    assert cls.jvp is Op.jvp


def test_no_op_repeats_the_linear_tangent_rule():
    """``return None if dx is None else apply(self, dx, ...)`` is Op's rule for linear ops."""
    for cls in _op_classes():
        source = inspect.getsource(cls.jvp) if "jvp" in vars(cls) else ""
        assert not re.search(r"return None if (\w+) is None else apply\(self, \1\b", source), cls


LINEAR_NODES = [(name, node, feed) for name, node, feed in _all_nodes() if node.op.linear]


@pytest.mark.parametrize("case", LINEAR_NODES, ids=lambda c: f"{c[0]}:{c[1].op.name}")
def test_ops_declared_linear_are_linear_in_their_first_input(case):
    name, node, feed = case
    try:
        values = cl.Executor(list(node.inputs)).run(feed, allow_unused=True)
    except cl.GraphError as exc:
        assert "not taken" in str(exc)
        pytest.skip("an untaken branch")
    if any(v is DEAD for v in values):
        pytest.skip("an untaken branch")
    first, *rest = [cl.to_numpy(v) for v in values]  # the op's own NumPy code runs below
    rng = np.random.default_rng(1)
    u, v = rng.standard_normal(np.shape(first)), rng.standard_normal(np.shape(first))
    u, v = u.astype(np.asarray(first).dtype), v.astype(np.asarray(first).dtype)
    combined = node.op.compute(np, 2.0 * u - 3.0 * v, *rest)
    if combined is DEAD:
        pytest.skip("an untaken branch")
    expected = 2.0 * node.op.compute(np, u, *rest) - 3.0 * node.op.compute(np, v, *rest)
    np.testing.assert_allclose(combined, expected, rtol=1e-12, atol=1e-12)


# -- one FLOP convention per op ----------------------------------------------------------------
def test_softmax_costs_what_the_lecture_and_the_flop_table_charge():
    assert Softmax.flops_per_element == CausalSoftmax.flops_per_element == LECTURE.softmax_per_score
    x = cl.variable("x", (4, 5))
    assert cl.models.count_flops(cl.softmax(x)).total == 3 * 20
    assert cl.models.count_flops(cl.causal_softmax(x, 0.5)).total == 3 * 20


def test_the_log_sum_exp_family_derives_its_costs():
    assert LogSoftmax.flops_per_element == LogSumExp.flops_per_element + 1
    assert CrossEntropy.flops_per_element == LogSoftmax.flops_per_element + 1 == 6  # notebook 08
    x = cl.variable("x", (4, 5))
    counts = cl.models.count_flops([cl.logsumexp(x, -1), cl.log_softmax(x)]).by_op
    assert counts == {"log_softmax": 5 * 20, "logsumexp": 4 * 20}
    ce = cl.models.count_flops(cl.cross_entropy(x, cl.variable("t", (4,), np.int64)))
    assert ce.total == 6 * 20


def test_log_sum_exp_is_one_formula_for_all_three_ops():
    rows = np.array([[1000.0, 1000.0, -np.inf], [-1e308, 0.0, 1.0], [-745.0, -746.0, -800.0]])
    x = cl.variable("x", rows.shape, np.float64)
    targets = np.array([1, 2, 0])
    lse, log_probs, ce = map(cl.to_numpy, cl.evaluate(
        [cl.logsumexp(x, -1, True), cl.log_softmax(x), cl.cross_entropy(x, targets)], {x: rows}
    ))  # fmt: skip
    assert np.isfinite(lse).all() and lse[0, 0] == pytest.approx(1000.0 + np.log(2.0))
    np.testing.assert_allclose(log_probs, rows - lse, rtol=1e-12)
    assert log_probs[0, 2] == -np.inf and np.isfinite(log_probs[1:]).all()
    assert ce == pytest.approx(-np.mean(log_probs[np.arange(3), targets]))


# -- Node's operators are defined in graph.py --------------------------------------------------
OPERATORS = {
    "__add__": "add", "__radd__": "add", "__sub__": "sub", "__rsub__": "sub",
    "__mul__": "mul", "__rmul__": "mul", "__truediv__": "div", "__rtruediv__": "div",
    "__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "power", "__rpow__": "power",
    "__neg__": "neg", "__lt__": "less", "__le__": "less_equal", "__gt__": "greater",
    "__ge__": "greater_equal", "__getitem__": "getitem", "T": "transpose", "reshape": "reshape",
    "sum": "sum", "mean": "mean",
}  # fmt: skip


@pytest.mark.parametrize("method, op", OPERATORS.items())
def test_node_operators_are_defined_in_graph_py_and_name_their_op(method, op):
    member = Node.__dict__[method]
    function = member.fget if isinstance(member, property) else member
    assert function.__module__ == "course_lib.graph"
    assert f":func:`course_lib.ops.{op}`" in function.__doc__


def test_the_op_library_fills_the_operators_registry_with_its_public_functions():
    assert {op: graph._OPS[op] for op in set(OPERATORS.values())} == {
        op: getattr(cl.ops, op) for op in set(OPERATORS.values())
    }
    for extra in ("__iter__", "__pos__", "__array_ufunc__"):
        assert Node.__dict__[extra].__module__ == "course_lib.graph"


def test_every_unary_op_is_exported_under_its_name_and_has_an_op_spec():
    """What the tests that enumerate UNARY_OPS need of an op added to the library."""
    assert {name for name, function in UNARY_OPS.items() if function is None} == set()
    assert set(UNARY_OPS) <= set(SPEC_BY_NAME), "add an OpSpec to tests/op_specs.py"


def test_the_op_library_exports_what_it_imports_and_registers_it_all():
    imported = {
        name for name, value in vars(cl.ops).items()
        if callable(value) and not name.startswith("_") and name != "register_ops"
    }  # fmt: skip
    assert sorted(cl.ops.__all__) == sorted(imported)
    assert {name: graph._OPS[name] for name in cl.ops.__all__} == graph._OPS
