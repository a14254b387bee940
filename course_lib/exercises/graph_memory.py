"""Notebook 01's assignment: run a graph as an executor does, freeing values after their last use.

``01.evaluate`` runs random graphs (elementwise ops, matmul, sums, reshapes, constants; shared
intermediates; several outputs, an output that feeds another, a variable as an output, an
output given twice). The values are compared with ``cl.evaluate``; the peak number of
elements held is compared exactly with this module's own reference of the rule the task
states. The library's executors are forbidden.
"""

from __future__ import annotations

import operator

import numpy as np

from .. import Node, constant, tanh, topological_order, variable
from .core import (
    CHANGED_INPUT,
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
    show,
)

NEVER_FREES = Mistake(
    "never-frees",
    "every value stays until the end, so the peak is the size of the whole graph. Find each "
    "value's last use (the last node in the order that takes it as an input) and `del` it right "
    "after that step.",
)
FREES_OUTPUTS = Mistake(
    "frees-outputs",
    "an output was deleted after its last use as an input (or never kept): outputs are held to "
    "the end, even when another node uses them, and a variable can be an output too.",
)
FREES_EARLY = Mistake(
    "frees-too-early",
    "a value was deleted while a later node still needs it: delete a value only after its LAST "
    "use (the last node in the order that takes it as an input), and only once, even when a "
    "node takes it twice (x * x).",
)
FEEDS_NOT_COUNTED = Mistake(
    "feeds-not-counted",
    "the peak leaves out the fed arrays (or the constants): every value held counts, fed or "
    "computed, from the step that makes it until it is deleted.",
)
FEEDS_FROM_START = Mistake(
    "feeds-from-the-start",
    "the fed arrays are counted from the start, but each value is held from its own step in "
    "the order: store feed[node] when the variable's turn comes, as every other value.",
)
PEAK_AFTER_FREES = Mistake(
    "peak-after-frees",
    "the peak is measured after deleting the step's inputs, but while a node is computed its "
    "inputs and its result are all held: measure right after storing the result, then delete.",
)
PEAK_UNITS = Mistake(
    "peak-not-elements",
    "the peak counts elements, the np.size of each value held, not how many values are held "
    "(len) nor their bytes (.nbytes): a (3, 4) array held counts 12.",
)
OUTPUT_ORDER = Mistake(
    "outputs-out-of-order",
    "return one value per entry of `outputs`, in that order (an output listed twice appears "
    "twice), not in the order the nodes ran.",
)


# -- the reference: the rule the task states -------------------------------------------------
def reference_peak(order, outputs, sizes, *, frees=True, counted=None, after_frees=False,
                   feeds_first=False) -> int:
    """The peak of elements held running ``order`` (``sizes``: {node: elements}): a value is
    held from its step to its last use, outputs to the end; measured after each step stores
    its value, before it deletes the values it used last. The keywords make the mistakes:
    never deleting, counting only the nodes ``counted`` accepts, measuring after deleting,
    holding every variable from the start."""
    last = {}
    for step, node in enumerate(order):
        for source in node.inputs:
            last[source] = step
    kept = set(outputs)
    held, peak = {}, 0
    if feeds_first:
        held = {node: sizes[node] for node in order if node.is_variable}
    for step, node in enumerate(order):
        held[node] = sizes[node] if counted is None or counted(node) else 0
        done = [s for s in set(node.inputs) if frees and s not in kept and last[s] == step]
        if after_frees:
            for source in done:
                del held[source]
        peak = max(peak, sum(held.values()))
        if not after_frees:
            for source in done:
                del held[source]
    return peak


# -- graphs -----------------------------------------------------------------------------------
class _Builder:
    """Variables of random values, and what is fed to them."""

    def __init__(self, rng):
        self.rng, self.feed, self.pool = rng, {}, []

    def variable(self, shape) -> object:
        node = variable(f"x{len(self.feed) + 1}", shape=shape)
        self.feed[node] = self.rng.standard_normal(shape).round(2)
        self.pool.append(node)
        return node

    def add(self, node):
        self.pool.append(node)
        return node


def _fixed(rng) -> list[tuple[str, list, dict]]:
    """Graphs in an order that tells the freeing mistakes apart: a shared intermediate before
    any output feeds another node; then a variable that comes after an op in the order,
    outputs listed out of order, an output feeding another, a variable as an output (used
    twice by one node), an output given twice."""
    cases = []
    b = _Builder(rng)
    x, w = b.variable((4, 3)), b.variable((3, 5))
    h = x @ w
    cases.append(("a chain with a shared intermediate", [(tanh(h) * h).sum(axis=0)], b.feed))
    b = _Builder(rng)
    y = tanh(b.variable((8, 8))).sum(axis=0)
    v = b.variable((8,))  # made after an op: it comes later in the order
    cases.append(("a variable that comes after an op", [y * v], b.feed))
    b = _Builder(rng)
    x, v = b.variable((6, 6)), b.variable((6,))
    first = x.sum(axis=0)
    second = ((x * 2.0) + constant(np.ones((6, 6)))).sum(axis=1) - v
    cases.append(("two outputs, listed out of order", [second, first], b.feed))
    b = _Builder(rng)
    x, w = b.variable((3, 4)), b.variable((4, 4))
    h = x @ w
    cases.append(("an output that feeds the other", [h, tanh(h @ w).sum()], b.feed))
    b = _Builder(rng)
    x = b.variable((5, 2))
    cases.append(("a variable as an output", [x, (x * x).reshape((10,)).sum()], b.feed))
    b = _Builder(rng)
    x, w = b.variable((2, 3)), b.variable((3, 3))
    h = tanh(x @ w)
    y = (h - x).sum(axis=1)
    cases.append(("an output given twice", [y, h, y], b.feed))
    return cases


def _random(rng, index: int) -> tuple[str, list, dict]:
    """A random graph of 6 to 14 ops; its outputs: the last node and sometimes an earlier
    one, a variable or a repeat, shuffled."""
    b = _Builder(rng)
    for _ in range(int(rng.integers(1, 4))):
        b.variable(tuple(int(n) for n in rng.integers(1, 6, 2)))
    for _ in range(int(rng.integers(6, 15))):
        x = b.pool[-1] if rng.random() < 0.5 else b.pool[int(rng.integers(len(b.pool)))]
        b.add(_op(b, rng, x))
    outputs = [b.pool[-1]]
    if rng.random() < 0.6:
        outputs.append(b.pool[int(rng.integers(len(b.pool) - 1))])
    if rng.random() < 0.3:
        outputs.append(next(iter(b.feed)))
    if rng.random() < 0.3:
        outputs.append(outputs[int(rng.integers(len(outputs)))])
    outputs = [outputs[k] for k in rng.permutation(len(outputs))]
    used = set(topological_order(outputs))
    feed = {v: a for v, a in b.feed.items() if v in used}
    return f"random graph {index}", outputs, feed


def _op(b: _Builder, rng, x):
    """One random op on ``x``: elementwise with a partner of its shape (a node, a new
    variable or constant, a number), tanh, matmul, a sum, a reshape."""
    kind = ("binary", "scalar", "tanh", "matmul", "sum", "reshape")[int(rng.integers(6))]
    shape = tuple(x.shape)
    if kind == "binary":
        same = [n for n in b.pool if tuple(n.shape) == shape]
        if rng.random() < 0.3:
            same = [b.variable(shape) if rng.random() < 0.5
                    else constant(rng.standard_normal(shape).round(2))]  # fmt: skip
        other = same[int(rng.integers(len(same)))]
        return (x + other, x * other, x - other)[int(rng.integers(3))]
    if kind == "scalar":
        return x * 0.5 if rng.random() < 0.5 else x - 1.0
    if kind == "matmul" and len(shape) == 2:
        fits = [n for n in b.pool if n.shape is not None and len(n.shape) == 2
                and n.shape[0] == shape[1]]  # fmt: skip
        if not fits or rng.random() < 0.4:
            fits = [b.variable((shape[1], int(rng.integers(1, 6))))]
        return x @ fits[int(rng.integers(len(fits)))]
    if kind == "sum" and shape:
        return x.sum(axis=int(rng.integers(len(shape)))) if rng.random() < 0.7 else x.sum()
    if kind == "reshape" and shape:
        size = int(np.prod(shape))
        return x.reshape((size,)) if len(shape) != 1 else x.reshape((1, size))
    return tanh(x)


# -- checking one graph -----------------------------------------------------------------------
def _refers_to_output(key, outputs) -> bool:
    """Whether a KeyError's key names an output (by node, id or name)."""
    return any(key is o or (type(key) is int and key == id(o))
               or (type(key) is str and key == o.name) for o in outputs)  # fmt: skip


def _call(answer, label: str, outputs: list, feed: dict):
    """The answer's result; a KeyError is a value deleted too early, an output deleted, or a
    constant looked up in feed."""
    missing = []

    def run():
        try:
            return answer(list(outputs), feed)
        except KeyError as error:
            missing.append(error.args[0] if error.args else None)
            raise

    try:
        return call(label, run, errors=[(TypeError, "NoneType", FREES_EARLY)])
    except Wrong as wrong:
        if missing and isinstance(missing[0], Node) and missing[0].is_constant:
            raise Wrong(f"{wrong.message}; the constant {missing[0].name} is not in feed, which "
                        "holds only the variables: a constant's value is node.op.compute(np), as "
                        "for every node that is not a variable (test node.is_variable)"
                        ) from None  # fmt: skip
        if missing and wrong.mistake is None:
            mistake = FREES_OUTPUTS if _refers_to_output(missing[0], outputs) else FREES_EARLY
            raise Wrong(wrong.message, mistake) from None
        raise


def _is_number(value) -> bool:
    return isinstance(value, np.ndarray | np.generic | int | float) and not isinstance(value, bool)


def _check_values(label: str, outputs: list, values, want: list) -> None:
    require(type(values) in (list, tuple), f"{label} returned values of type "
            f"{type(values).__name__}; return a list, one value per output")  # fmt: skip
    if len(values) != len(outputs):
        distinct = len(set(outputs))
        raise Wrong(f"{label} returned {len(values)} values for {len(outputs)} outputs",
                    OUTPUT_ORDER if len(values) == distinct < len(outputs) else None)  # fmt: skip
    for k, (got, right) in enumerate(zip(values, want)):
        name = outputs[k].name
        require(got is not None, f"{label}: the value of output {k} ({name}) is None",
                FREES_OUTPUTS)  # fmt: skip
        require(_is_number(got), f"{label}: the value of output {k} ({name}) is a "
                f"{type(got).__name__}, not an array")  # fmt: skip
        if not close(got, right):
            shuffled = all(any(close(g, w) for w in want) for g in values)
            raise Wrong(f"{label}: the value of output {k} ({name}) {mismatch(got, right)}",
                        OUTPUT_ORDER if shuffled else None)  # fmt: skip


def _check_peak(label: str, order: list, outputs: list, sizes: dict, nbytes: dict,
                peak) -> None:
    require(isinstance(peak, int | np.integer) and not isinstance(peak, bool),
            f"{label} returned the peak {show(peak)} ({type(peak).__name__}); it must be an int, "
            "a number of elements")  # fmt: skip
    right = reference_peak(order, outputs, sizes)
    if int(peak) != right:
        candidates = [
            (NEVER_FREES, lambda: reference_peak(order, outputs, sizes, frees=False)),
            (FEEDS_NOT_COUNTED, lambda: reference_peak(
                order, outputs, sizes, counted=lambda n: not n.is_variable)),
            (FEEDS_NOT_COUNTED, lambda: reference_peak(
                order, outputs, sizes, counted=lambda n: bool(n.inputs))),
            (PEAK_AFTER_FREES, lambda: reference_peak(order, outputs, sizes, after_frees=True)),
            (FEEDS_FROM_START, lambda: reference_peak(order, outputs, sizes, feeds_first=True)),
            (PEAK_UNITS, lambda: reference_peak(order, outputs, dict.fromkeys(sizes, 1))),
            (PEAK_UNITS, lambda: reference_peak(order, outputs, nbytes)),
        ]  # fmt: skip
        raise Wrong(f"{label}: the peak is {int(peak)} elements, expected {right}",
                    first_match(int(peak), candidates, operator.eq))  # fmt: skip


def _check_graph(answer, what: str, outputs: list, feed: dict) -> None:
    names = ", ".join(o.name for o in outputs)
    label = f"evaluate(outputs, feed) on {what} (outputs: {names})"
    order = topological_order(outputs)
    everything = dict(zip(order, run_graph(order, feed)))
    sizes = {node: int(np.size(host(value))) for node, value in everything.items()}
    nbytes = {node: int(np.asarray(host(value)).nbytes) for node, value in everything.items()}
    given, copies = dict(feed), {v: a.copy() for v, a in feed.items()}
    result = _call(answer, label, outputs, given)
    for node, array in feed.items():
        require(np.array_equal(array, copies[node]), f"{label} changed the array fed to "
                f"{node.name} in place", CHANGED_INPUT)  # fmt: skip
    require(given.keys() == feed.keys() and all(given[v] is a for v, a in feed.items()),
            f"{label} changed the feed dict; keep your values in a dict of your own "
            "(values = {}), not in feed")  # fmt: skip
    require(type(result) in (tuple, list) and len(result) == 2, f"{label} returned "
            f"{type(result).__name__}; return a pair (values, peak)")  # fmt: skip
    values, peak = result
    _check_values(label, outputs, values, [everything[o] for o in outputs])
    _check_peak(label, order, outputs, sizes, nbytes, peak)


@exercise(
    "01.evaluate",
    "evaluate(outputs, feed) -> (values, peak): run the graph freeing each value after its "
    "last use; the outputs' values and the most elements held at once",
    mistakes=(NEVER_FREES, FREES_OUTPUTS, FREES_EARLY, FEEDS_NOT_COUNTED, FEEDS_FROM_START,
              PEAK_AFTER_FREES, PEAK_UNITS, OUTPUT_ORDER),  # fmt: skip
    points=5.0,
    forbidden=("course_lib.runtime.executor.Executor", "course_lib.runtime.executor.evaluate",
               "course_lib.graph.interpret", "course_lib.exercises.core.run_graph"),  # fmt: skip
)
def check_evaluate(answer) -> str:
    rng = np.random.default_rng(10)
    cases = _fixed(rng) + [_random(rng, k) for k in range(1, 21)]
    for what, outputs, feed in cases:
        _check_graph(answer, what, outputs, feed)
    return (
        f"right values and peak on {len(cases)} graphs: shared intermediates, several outputs "
        "(out of order, one feeding another, a variable, one given twice), matmuls, sums, "
        "reshapes and constants"
    )
