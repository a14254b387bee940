"""Notebook 01: the JIT's guards and a branch inside the graph.

``01.guard_key`` is checked against ``cl.jit`` itself (two calls share a trace, or not), and
``01.relu_cond`` by running the graph it builds, its gradient, and looking for the Merge that
``cl.cond`` puts in.
"""

from __future__ import annotations

import math

import numpy as np

from .. import Executor, GraphError, Node, grad, jit, topological_order, variable
from ..ops import sum as total
from ..ops import sum_n
from .core import Mistake, Wrong, call, exercise, require, show

KEYED_ON_VALUES = Mistake(
    "keyed-on-values",
    "the key changes when only the numbers change, so every new batch would trace again. A "
    "compiled graph fixes shapes and dtypes, not values: key on a.shape and a.dtype.",
)
IGNORES_DTYPE = Mistake(
    "ignores-dtype",
    "float32 and float64 inputs get the same key, but a graph traced for one dtype computes "
    "in that dtype: put a.dtype in the key.",
)
SIZE_NOT_SHAPE = Mistake(
    "size-not-shape",
    "arrays of the same size but different shapes ((2, 6) and (3, 4), or (12,) and (12, 1)) "
    "get the same key; the graph's shapes are fixed, so key on the whole a.shape.",
)
ORDER_LOST = Mistake(
    "order-lost",
    "swapping two arguments of different shapes keeps the key: each argument is a different "
    "variable of the graph, so keep the key in argument order (a tuple, not a set or a sort).",
)
KEYED_ON_LAYOUT = Mistake(
    "keyed-on-layout",
    "a transposed or sliced view of the same shape and dtype gets another key, but cl.jit "
    "runs it on the same trace (the graph fixes shapes and dtypes, not strides): leave "
    "a.strides and a.flags out of the key.",
)
UNHASHABLE = Mistake(
    "unhashable",
    "the cache is a dict, so the key must be hashable: a tuple (of tuples), not a list or an "
    "array.",
)


def _arrays(rng, *specs) -> tuple:
    """Random arrays, one per (shape, dtype)."""
    return tuple((rng.standard_normal(shape) * 10).astype(dtype) for shape, dtype in specs)


def _guard_pairs(rng) -> list[tuple[str, tuple, tuple]]:
    """(what differs, first arguments, second arguments)."""
    f64, f32, i64 = np.float64, np.float32, np.int64
    nan = np.full((3, 2), np.nan)
    pairs = [
        ("nothing", _arrays(rng, ((4, 8), f64), ((8, 3), f64)), None),
        (
            "values",
            _arrays(rng, ((4, 8), f64), ((8, 3), f64)),
            _arrays(rng, ((4, 8), f64), ((8, 3), f64)),
        ),
        ("values", (nan,), (nan.copy(),)),
        ("values", _arrays(rng, ((), f64)), _arrays(rng, ((), f64))),
        ("dtype", _arrays(rng, ((4, 8), f64)), _arrays(rng, ((4, 8), f32))),
        ("dtype", _arrays(rng, ((5,), i64)), _arrays(rng, ((5,), f64))),
        ("shape", _arrays(rng, ((2, 6), f64)), _arrays(rng, ((3, 4), f64))),
        ("shape", _arrays(rng, ((12,), f64)), _arrays(rng, ((12, 1), f64))),
        ("shape", _arrays(rng, ((0, 3), f64)), _arrays(rng, ((0, 4), f64))),
        (
            "order",
            _arrays(rng, ((2, 3), f64), ((3, 4), f64)),
            _arrays(rng, ((3, 4), f64), ((2, 3), f64)),
        ),
        ("count", _arrays(rng, ((2, 3), f64)), _arrays(rng, ((2, 3), f64), ((2, 3), f64))),
        ("layout", _arrays(rng, ((3, 4), f64)), (_arrays(rng, ((4, 3), f64))[0].T,)),
        ("layout", _arrays(rng, ((3, 4), f32)), (_arrays(rng, ((3, 8), f32))[0][:, ::2],)),
    ]
    return [(kind, a, a if b is None else b) for kind, a, b in pairs]


_MISTAKE_OF_KIND = {
    "nothing": KEYED_ON_VALUES,
    "values": KEYED_ON_VALUES,
    "dtype": IGNORES_DTYPE,
    "shape": SIZE_NOT_SHAPE,
    "order": ORDER_LOST,
    "layout": KEYED_ON_LAYOUT,
}


def _describe(args: tuple) -> str:
    inside = ", ".join(f"{a.dtype} array of shape {a.shape}" for a in args)
    return f"({inside},)" if len(args) == 1 else f"({inside})"


def _sum_all(*arrays):
    return sum_n(*(total(a) for a in arrays))


def _jit_reuses(first: tuple, second: tuple) -> bool:
    """Does cl.jit run ``second`` on the graph it traced for ``first``?"""
    compiled = jit(_sum_all)
    compiled(*first)
    compiled(*second)
    return compiled.stats["traces"] == 1


def _key(answer, args):
    label = f"guard_key({_describe(args)})"
    key = call(label, answer, args)
    try:
        hash(key)
    except TypeError:
        raise Wrong(f"{label} returned an unhashable {type(key).__name__}", UNHASHABLE) from None
    return key


@exercise(
    "01.guard_key", "guard_key(args) -> hashable: equal exactly when cl.jit reuses a trace",
    mistakes=(KEYED_ON_VALUES, IGNORES_DTYPE, SIZE_NOT_SHAPE, ORDER_LOST, KEYED_ON_LAYOUT,
              UNHASHABLE),
    forbidden=("course_lib.runtime.jit.JitFunction",),
)  # fmt: skip
def check_guard_key(answer) -> str:
    pairs = _guard_pairs(np.random.default_rng(1))
    for kind, first, second in pairs:
        first_key, second_key = _key(answer, first), _key(answer, second)
        try:
            same = bool(first_key == second_key)
        except Exception as error:  # keys whose == gives an array, say
            raise Wrong(
                f"comparing two of your keys with == raised {error!r}", UNHASHABLE
            ) from None
        if same != _jit_reuses(first, second):
            shared = "the same key" if same else "different keys"
            reuse = "reuses one trace" if not same else "traces twice"
            raise Wrong(
                f"guard_key gave {shared} to {_describe(first)} and {_describe(second)}, "
                f"but cl.jit {reuse}",
                _MISTAKE_OF_KIND.get(kind),
            )
    return (
        f"agrees with cl.jit on {len(pairs)} pairs of calls: new values (NaN too), "
        "dtypes, shapes of the same size, swapped and extra arguments, 0-d and empty arrays, "
        "transposed and sliced views"
    )


# -- relu_cond --------------------------------------------------------------------------------
PYTHON_IF = Mistake(
    "python-if",
    "Python's `if` needs a value, and a node has none while the graph is built: write "
    "cl.cond(x > 0, lambda: ..., lambda: ...).",
)
NOT_FUNCTIONS = Mistake(
    "branches-not-functions",
    "cl.cond takes two FUNCTIONS, called while the graph is built: "
    "cl.cond(pred, lambda: x, lambda: ...), not cl.cond(pred, x, ...).",
)
NO_COND = Mistake(
    "no-cond",
    "the values are right, but the graph has no branch: cl.relu, cl.maximum or cl.where compute "
    "everything. The point is a branch inside the graph, cl.cond (Switch and Merge), of which "
    "only the taken side runs.",
)
SWAPPED = Mistake(
    "swapped-branches",
    "the branches are swapped: cl.cond(pred, true_fn, false_fn) runs true_fn when pred holds.",
)
AT_ZERO = Mistake(
    "takes-x-at-zero",
    "at x = 0 the branch taken decides the gradient: with x >= 0 the x branch runs there (slope "
    "1); relu takes x only when x > 0, so its slope at 0 is 0.",
)
TIMES_ZERO = Mistake(
    "times-zero",
    "x · 0 and x − x are NaN for x = -inf (inf · 0 and inf − inf are undefined): return the "
    "constant 0.0 from the false branch instead of computing 0 from x.",
)


@exercise(
    "01.relu_cond", "relu_cond(x) -> Node: x if x > 0 else 0, as a branch in the graph",
    mistakes=(PYTHON_IF, NOT_FUNCTIONS, NO_COND, SWAPPED, AT_ZERO, TIMES_ZERO),
)
def check_relu_cond(answer) -> str:
    x = variable("x", shape=())
    errors = [(GraphError, "truth value", PYTHON_IF), (TypeError, "not callable", NOT_FUNCTIONS)]
    out = call("relu_cond(x)", answer, x, errors=errors)
    require(
        isinstance(out, Node),
        f"relu_cond(x) returned {type(out).__name__}; it must return a node of the graph",
    )
    require(
        "merge" in {n.op.name for n in topological_order(out)},
        "relu_cond(x) builds a graph without a cl.cond",
        NO_COND,
    )
    run = call("building the gradient of relu_cond(x)", lambda: Executor([out, grad(out, x)]))
    values = [3.0, -2.0, 0.0, -0.0, 1e-300, -1e-300, math.inf, -math.inf]
    values += [float(v) for v in np.random.default_rng(2).standard_normal(19)]

    def at(value: float) -> tuple:
        return tuple(
            float(v) for v in call(f"running relu_cond(x) at x = {value}", run.run, {x: value})
        )

    for value in values:
        got, slope = at(value)
        want = value if value > 0 else 0.0
        if got != want and not (math.isnan(got) and math.isnan(want)):
            # swapped: 0 for x > 0 and x for x < 0, on both sides (not a wrong threshold)
            swapped = all(at(v)[0] == (0.0 if v > 0 else v) for v in (3.0, -2.0))
            mistake = SWAPPED if swapped else None
            mistake = TIMES_ZERO if math.isnan(got) and value == -math.inf else mistake
            raise Wrong(
                f"relu_cond(x) at x = {value} gives {show(got)}, expected {show(want)}", mistake
            )
        want_slope = 1.0 if value > 0 else 0.0
        require(
            slope == want_slope,
            f"the gradient of relu_cond(x) at x = {value} is {show(slope)}, expected {want_slope}",
            AT_ZERO if value == 0.0 and slope == 1.0 else None,
        )
    return (
        f"a branch in the graph, right values and gradients at {len(values)} points (±0, ±inf too)"
    )
