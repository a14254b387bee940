"""Notebook 06's assignment: a fused op of the student's own, SwiGLU's gate ``silu(a) * b``.

``06.swiglu`` takes a class (an :class:`~course_lib.ops.elementwise.Elementwise` op) and checks
what the engine reads from it, by behaviour, against the unfused graph ``cl.silu(a) * b``:

* ``compute``: the same values on broadcast shapes, transposed and strided inputs, float32 and
  float64, NaN, ±inf and large magnitudes; inputs unchanged; one result array and no
  temporary the size of the output (NumPy's allocations, traced with :mod:`tracemalloc`);
* ``gradient``: ``cl.grad`` through the op equals ``cl.grad`` of the unfused graph, for
  broadcast inputs, for one variable used as both a and b, with respect to a or b alone
  (``needs`` not all true), and with the graph optimiser on and off;
* ``flops`` and ``accesses``: 5 FLOPs per output element, each input loaded once at its own
  size and the output stored once, so ``perf.arithmetic_intensity`` gives the fused kernel's.
"""

from __future__ import annotations

import math
import tracemalloc
from fractions import Fraction

import numpy as np

from .. import Executor, constant, grad, params, perf, silu, variable
from .. import sum as total
from ..graph import Op, apply
from .core import (
    DERIVATIVES,
    Mistake,
    Wrong,
    call,
    close,
    exercise,
    first_match,
    host,
    mismatch,
    require,
    run_graph,
)
from .fusion import OUTPUT_SIZED

SIGMOID_ONLY = Mistake(
    "silu-derivative-is-sigmoid",
    "silu(a) = a·σ(a) is a product, so its derivative has two terms: σ(a)·(1 + a·(1 − σ(a))), "
    "not σ(a) alone.",
)
SWAPPED_ADJOINTS = Mistake(
    "swapped-adjoints",
    "each input gets the derivative with respect to itself: ā = ḡ·b·silu′(a) and b̄ = ḡ·silu(a).",
)
IGNORES_ADJOINT = Mistake(
    "adjoint-ignored",
    "a partial adjoint is the output's adjoint times the local derivative (the chain rule): "
    "multiply by the `adjoint` argument, which is not all ones in general.",
)
NOT_UNBROADCAST = Mistake(
    "adjoint-not-unbroadcast",
    "an input stretched by broadcasting gets a partial of the output's shape: sum it back to "
    "the input's shape with unbroadcast(partial, node, k).",
)
NUMERICAL_GRADIENT = Mistake(
    "numerical-gradient",
    "the gradient is close but not exact, as finite differences are: build the exact "
    "derivative from nodes (cl.sigmoid, +, −, ×).",
)
TEMPORARIES = Mistake(
    "output-sized-temporaries",
    "a fused kernel keeps no intermediate arrays: allocate the result once (xp.empty) and "
    "compute into it in place (out=..., *=, +=), so no temporary the size of the output is made.",
)
DEFAULT_FLOPS = Mistake(
    "flops-not-counted",
    "that is Elementwise's default of 1 FLOP per element. Count as the lecture does: silu costs "
    "4 (sigmoid 3, multiply 1) and the gate's multiply 1, so 5 per output element.",
)
FLOPS_MISCOUNTED = Mistake(
    "flops-miscounted",
    "count per output element as the lecture does: silu costs 4 (sigmoid 3, multiply 1) and the "
    "gate's multiply 1, so 5 per output element.",
)
FLOPS_OF_AN_INPUT = Mistake(
    "flops-of-an-input",
    "the FLOPs are per OUTPUT element: a and b broadcast, so out_shape can hold more elements "
    "than either input: 5 · prod(out_shape).",
)
UNFUSED_TRAFFIC = Mistake(
    "unfused-traffic",
    "that is the traffic of the unfused chain, where silu stores a temporary that the multiply "
    "loads again; the fused kernel loads a and b once and stores the output once.",
)

_TEMPORARY_SIZE = 2**17  # elements of the forward whose allocations are traced (1 MiB float64)


def _unfused(a, b):
    return silu(a) * b


def _tolerances(dtype) -> dict:
    return {"rtol": 1e-10, "atol": 1e-12} if dtype == np.float64 else {"rtol": 2e-5, "atol": 1e-5}


def _values(rng, shape, dtype, special: bool):
    """Normal numbers of spread 3; with ``special``, some NaN, ±inf, ±1e4 and zeros too."""
    x = np.array(3.0 * rng.standard_normal(shape))
    if special:
        picks = rng.choice([np.nan, np.inf, -np.inf, 1e4, -1e4, 0.0], x.size)
        chosen = rng.random(x.size) < 0.3
        x.flat[chosen] = picks[chosen]
    return x.astype(dtype)


def _layout(array, rng):
    """The same values as a transposed or strided view (a non-contiguous input), or as is."""
    kind = rng.integers(3) if array.ndim >= 1 and array.size > 1 else 0
    if kind == 1 and array.ndim >= 2:
        return np.ascontiguousarray(np.swapaxes(array, -1, -2)).swapaxes(-1, -2)
    if kind >= 1:
        wide = np.repeat(array, 2, axis=-1)
        wide[..., 1::2] = -7.0  # the elements a strided view skips
        return wide[..., ::2]
    return array


# -- the op from the answer -------------------------------------------------------------------
def _instance(answer) -> Op:
    op = call("SwiGLU()", answer)
    require(
        isinstance(op, Op),
        f"SwiGLU() made a {type(op).__name__}; the answer must be an op class (subclass "
        "Elementwise) that the engine can run",
    )
    return op


# -- forward ----------------------------------------------------------------------------------
_FORWARD_SHAPES = [((5,), (5,)), ((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)),
                   ((4,), (2, 3, 4)), ((), (3,)), ((2, 5), ()), ((1,), (6, 1))]  # fmt: skip


def _check_forward(op, rng) -> int:
    kinds = ((np.float64, False), (np.float64, True), (np.float32, True))  # (dtype, special)
    cases = [(a, b, dtype, special) for a, b in _FORWARD_SHAPES for dtype, special in kinds]
    for shape_a, shape_b, dtype, special in cases:
        a = _layout(_values(rng, shape_a, dtype, special), rng)
        b = _layout(_values(rng, shape_b, dtype, special), rng)
        _compare_forward(op, a, b)
    x = _values(rng, (7,), np.float64, True)
    _compare_forward(op, x, x)
    return len(cases) + 1


def _compare_forward(op, a, b) -> None:
    label = f"compute(np, a, b) for a {_describe(a)} and b {_describe(b)}"
    got = call(label, op.compute, np, a, b)
    A, B = variable("a", a.shape, a.dtype), variable("b", b.shape, b.dtype)
    want = host(run_graph([_unfused(A, B)], {A: a, B: b})[0])
    require(
        isinstance(got, np.ndarray),
        f"{label} returned {type(got).__name__}; it must return an array (of the xp it is given)",
    )
    require(got.shape == want.shape, f"{label}: the result {mismatch(got, want)}")
    require(got.dtype == want.dtype, f"{label}: the result is {got.dtype}, expected {want.dtype}")
    require(
        close(got, want, **_tolerances(want.dtype)),
        f"{label}: the result {mismatch(got, want)} (the unfused graph's)",
    )


def _describe(array) -> str:
    layout = "" if array.flags.c_contiguous else ", not contiguous"
    return f"{array.shape} {array.dtype}{layout}"


def _check_temporaries(op, rng) -> None:
    a, b = (rng.standard_normal(_TEMPORARY_SIZE) for _ in range(2))
    peaks = []

    def traced(xp, a, b):  # the bytes NumPy allocates while compute runs, at their peak
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = op.compute(xp, a, b)
        peaks.append(tracemalloc.get_traced_memory()[1] - before)
        return result

    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        call(f"compute(np, a, b) for a and b of {_TEMPORARY_SIZE} float64", traced, np, a, b)
    finally:
        if not tracing:
            tracemalloc.stop()
    extra = peaks[0] / a.nbytes - 1
    require(
        extra <= 0.25,
        f"compute(np, a, b) for a and b of {_TEMPORARY_SIZE} float64 allocated, at its peak, "
        f"{extra:.1f} output-sized arrays besides the result",
        TEMPORARIES,
    )


# -- gradient ---------------------------------------------------------------------------------
_GRADIENT_SHAPES = [((6,), (6,)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((5,), (2, 1)),
                    ((), (4,)), ((3, 4), None)]  # fmt: skip


def _check_gradients(op, rng) -> int:
    checks = 0
    for dtype in (np.float64, np.float32):
        for shape_a, shape_b in _GRADIENT_SHAPES:
            twice = shape_b is None  # one variable as both a and b
            a = _layout(_values(rng, shape_a, dtype, False), rng)
            feed_a = variable("a", shape_a, dtype)
            inputs = [feed_a] if twice else [feed_a, variable("b", shape_b, dtype)]
            feed = {feed_a: a}
            if not twice:
                feed[inputs[1]] = _layout(_values(rng, shape_b, dtype, False), rng)
            for optimize in (False, True):
                _compare_gradients(op, inputs, feed, rng, optimize)
                checks += 1
    return checks


def _compare_gradients(op, inputs, feed, rng, optimize: bool) -> None:
    a, b = inputs if len(inputs) == 2 else inputs * 2
    names = "a, b" if len(inputs) == 2 else "x, x"
    where = (f"cl.grad through SwiGLU()({names}) for {names[0]} of shape {a.shape}"
             + ("" if a is b else f" and b of shape {b.shape}")
             + f", {a.dtype}, optimize={optimize}")  # fmt: skip
    fused = call("building SwiGLU()(a, b)", apply, op, a, b)
    w = rng.standard_normal(fused.shape).astype(a.dtype)
    weights = constant(w, name="w")
    grads = call(where, grad, total(fused * weights), inputs)
    got = call(where, lambda: Executor(grads, optimize=optimize).run(feed))
    want = Executor(grad(total(_unfused(a, b) * weights), inputs)).run(feed)
    arrays = {node: host(value) for node, value in feed.items()}
    for k, (got_k, want_k) in enumerate(zip(got, want)):
        got_k, want_k = host(got_k), host(want_k)
        label = f"{where}: the gradient of {'ab'[k] if a is not b else 'x'}"
        if np.shape(got_k) != want_k.shape:
            stretched = np.shape(got_k) == fused.shape  # the partial kept the output's shape
            mistake = NOT_UNBROADCAST if stretched else None
            raise Wrong(f"{label} {mismatch(got_k, want_k)}", mistake)
        if not close(got_k, want_k, **_tolerances(want_k.dtype)):
            error = np.nanmax(np.abs(got_k.astype(float) - want_k), initial=0.0)
            raise Wrong(f"{label} {mismatch(got_k, want_k)}; off by up to {error:.2g}",
                        _gradient_mistake(arrays, inputs, w, k, got_k, want_k))  # fmt: skip
    if len(inputs) == 2 and not optimize:
        _compare_one_gradient(fused, weights, inputs, feed, where)


def _compare_one_gradient(fused, weights, inputs, feed, where: str) -> None:
    """``cl.grad`` with respect to a alone and to b alone (``needs`` [True, False] and
    [False, True]) equals the unfused graph's: the partial asked for is not None."""
    a, b = inputs
    for k, wrt in enumerate(inputs):
        grads = call(where, grad, total(fused * weights), [wrt])
        got = host(call(where, run_graph, grads, feed)[0])
        want = host(run_graph(grad(total(_unfused(a, b) * weights), [wrt]), feed)[0])
        needs = [j == k for j in range(2)]
        require(np.shape(got) == want.shape and close(got, want, **_tolerances(want.dtype)),
                f"{where}, with respect to {'ab'[k]} alone (needs = {needs}): the gradient of "
                f"{'ab'[k]} {mismatch(got, want)}; return its partial wherever needs[k] is True, "
                "None only where it is False")  # fmt: skip


def _sum_to(x, shape):
    """``x`` summed over the axes broadcasting stretched to ``shape``."""
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1)
    return x.sum(axis=axes, keepdims=True).reshape(shape)


def _gradient_mistake(arrays, inputs, w, k, got, want) -> Mistake | None:
    """The mistake whose gradient (NumPy, float64) ``got`` is, for input ``k``."""
    a = arrays[inputs[0]].astype(np.float64)
    b = arrays[inputs[-1]].astype(np.float64)
    g = w.astype(np.float64)
    s = 0.5 * (np.tanh(0.5 * a) + 1.0)
    silu_prime = s * (1.0 + a * (1.0 - s))

    def adjoints(da, db):  # the partials for a and b, summed back (x·x: both go to x)
        parts = [_sum_to(da, a.shape), _sum_to(db, b.shape)]
        return parts[0] + parts[1] if len(inputs) == 1 else parts[k]

    candidates = [
        (SIGMOID_ONLY, lambda: adjoints(g * b * s, g * a * s)),
        (SWAPPED_ADJOINTS, lambda: adjoints(g * a * s, g * b * silu_prime)),
        (IGNORES_ADJOINT, lambda: adjoints(np.broadcast_to(b * silu_prime, g.shape),
                                            np.broadcast_to(a * s, g.shape))),
    ]
    tolerance = _tolerances(want.dtype)
    found = first_match(got, candidates, lambda x, y: close(x, y, **tolerance))
    if found is None and close(got, want, rtol=1e-3, atol=1e-4):
        return NUMERICAL_GRADIENT
    return found


# -- cost facts -------------------------------------------------------------------------------
def _check_costs(op) -> int:
    cases = [((1024,), (1024,)), ((64, 1), (1, 32)), ((8, 16), (16,)), ((1,), (100,))]
    for shape_a, shape_b in cases:
        out = np.broadcast_shapes(shape_a, shape_b)
        n, n_a, n_b = math.prod(out), math.prod(shape_a), math.prod(shape_b)
        label = f"for a {shape_a} and b {shape_b}"
        shapes = (out, shape_a, shape_b)
        flops = call(f"flops{shapes}", op.flops, *shapes)
        if flops != 5 * n:
            wrong = {**{k * n: FLOPS_MISCOUNTED for k in (2, 3, 4, 6, 7)},
                     5 * n_a: FLOPS_OF_AN_INPUT, 5 * n_b: FLOPS_OF_AN_INPUT, n: DEFAULT_FLOPS}
            mistake = wrong.get(flops) if params.is_real(flops) else None  # np.int64 too
            raise Wrong(f"flops {label} is {flops!r}, expected {5 * n}", mistake)
        require(isinstance(flops, int | np.integer), f"flops {label} is {flops!r}, the right "
                f"count as a {type(flops).__name__}: return an int (FLOPs are counted, and "
                "perf's exact intensities need whole numbers: 5 * math.prod(out_shape))")
        loads, stores = call(f"accesses{shapes}", op.accesses, *shapes)
        unfused = 3 * n_a + n_b + n  # silu loads a, stores t; the multiply loads t and b
        if (tuple(loads), stores) != ((n_a, n_b), n):
            mistake = {unfused: UNFUSED_TRAFFIC}.get(sum(loads) + stores)
            if tuple(loads) == (n, n) != (n_a, n_b):  # right loads are no such mistake
                mistake = OUTPUT_SIZED
            raise Wrong(f"accesses {label} are loads {tuple(loads)}, stores {stores}; expected "
                        f"loads ({n_a}, {n_b}), stores {n}", mistake)  # fmt: skip
        a, b = variable("a", shape_a, np.float32), variable("b", shape_b, np.float32)
        report = perf.arithmetic_intensity(apply(op, a, b))
        want = Fraction(5 * n, n_a + n_b + n)
        require(report.intensity == want, f"perf.arithmetic_intensity {label} gives "
                f"{report.intensity}, expected {want}")  # fmt: skip
    return len(cases)


@exercise(
    "06.swiglu",
    "SwiGLU -> an Elementwise op class: silu(a) * b in one kernel (compute, gradient, flops)",
    mistakes=(SIGMOID_ONLY, SWAPPED_ADJOINTS, IGNORES_ADJOINT, NOT_UNBROADCAST,
              NUMERICAL_GRADIENT, TEMPORARIES, DEFAULT_FLOPS, FLOPS_MISCOUNTED, FLOPS_OF_AN_INPUT,
              UNFUSED_TRAFFIC, OUTPUT_SIZED),
    points=5.0,
    forbidden=("course_lib.ops.elementwise.Silu", *DERIVATIVES,
               "course_lib.passes.fusion.regions.fuse_elementwise",
               "course_lib.passes.fusion.op.Fused"),
)  # fmt: skip
def check_swiglu(answer) -> str:
    rng = np.random.default_rng(62)
    op = _instance(answer)
    forward = _check_forward(op, rng)
    _check_temporaries(op, rng)
    gradients = _check_gradients(op, rng)
    costs = _check_costs(op)
    return (
        f"the forward equals silu(a) * b on {forward} cases (broadcast, transposed and strided "
        f"inputs, NaN, ±inf, float32), with no output-sized temporary; cl.grad equals the "
        f"unfused graph's on {gradients} graphs (x as both inputs, optimize on and off); FLOPs, "
        f"loads and stores right on {costs} shapes"
    )
