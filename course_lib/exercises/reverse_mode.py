"""Notebook 03: the lecture's ``gradient(out)``, and one op's reverse-mode rule.

``03.gradient`` runs on probe graphs that single out the usual slips (a node used twice, the
seed, the order of the walk, an input the output does not use) and on random graphs with
broadcasting, matrix products and constants; its nodes are evaluated against ``cl.grad``.
``03.div_rule`` is compared with the partial adjoints of ``cl.div``'s own rule, and
differentiated again. ``03.vjp_rules``, the assignment, has the student write every op
family's rule in NumPy (:mod:`.op_rules` makes the cases), compared with ``cl.grad``.
"""

from __future__ import annotations

import operator

import numpy as np

from .. import GraphError, Node, constant, exp, grad, matmul, sin, tanh, topological_order, variable
from .. import sum as total
from .core import (
    DERIVATIVES,
    Mistake,
    Wrong,
    call,
    close,
    describe_error,
    exercise,
    mismatch,
    require,
    run_graph,
    show,
)
from .op_rules import (
    LOG_SOFTMAX_EXP,
    LOG_SOFTMAX_TRANSPOSED,
    MAX_TIES,
    MEAN_COUNT,
    NAIVE_SOFTMAX,
    OPS,
    REDUCTIONS,
    ROW_SUM_NOT_KEPT,
    SOFTMAX_DIAGONAL,
    SOFTMAX_TERM,
    Case,
    as_array,
    call_rule,
    cases,
    compare,
    count,
    engine_vjp,
    expanded,
    first_maximum,
    library_rules,
    naive_softmax,
    row_errors,
    row_sum,
    scattered,
    softmax_candidates,
    tie_weights,
)

NOT_SUMMED = Mistake(
    "partials-not-summed",
    "a node used by several consumers receives one partial adjoint from each: APPEND every "
    "v̄(k→i) to node_to_grad[k] and SUM the list when you reach k (cl.sum_n(*partials)).",
)
NO_SEED = Mistake(
    "no-seed",
    "start from node_to_grad = {out: [cl.ones_like(out)]}: the adjoint of the output is 1.",
)
SEED_NOT_A_NODE = Mistake(
    "seed-not-a-node",
    "the seed must be a node: cl.ones_like(out), so node_to_grad = {out: [cl.ones_like(out)]}, "
    "not {out: [1]} (every adjoint is a node of the backward graph).",
)
WALK_ORDER = Mistake(
    "walk-order",
    "a node's adjoint is complete only when every consumer has been visited: walk "
    "reversed(cl.topological_order(out)), and skip nodes that received no partial adjoint.",
)
UNUSED_INPUT = Mistake(
    "unused-input",
    "an input the output does not depend on has gradient zero: return cl.zeros_like(x) for it.",
)
NOT_NODES = Mistake(
    "numbers-not-nodes",
    "gradient builds the backward GRAPH: return the adjoint nodes themselves (no evaluate).",
)
LEAF_RULE = Mistake(
    "rule-of-a-leaf",
    "variables and constants have no inputs and no rule: call i.op.gradient only for nodes "
    "with inputs (if not i.inputs: continue).",
)
USES_GRAD = Mistake(
    "uses-cl-grad",
    "this calls cl.grad, the algorithm you are asked to write: use cl.topological_order, each "
    "node's rule i.op.gradient(i, adjoint, needs) and cl.sum_n.",
)


def _unused_lookups(answer, label: str, unused: list):
    """``answer``, with a KeyError for an input in ``unused`` (``out`` does not use it: the
    walk never reaches it) turned into :class:`Wrong` with the unused-input mistake, and one
    for ``out`` itself, where the seed is missing, with no-seed's; not walk-order's."""

    def gradient(out, wrt):
        try:
            return answer(out, wrt)
        except KeyError as error:
            missing = next((x for x in unused if error.args and error.args[0] is x), None)
            if missing is None and error.args and error.args[0] is out and _no_seed(answer):
                raise Wrong(f"{label} raised {describe_error(error)}: the output {out.name} "
                            "itself has no adjoint", NO_SEED) from None  # fmt: skip
            if missing is None:
                raise
            raise Wrong(f"{label} raised {describe_error(error)}: {missing.name} is an input "
                        "the output does not use, so the walk never gives it an adjoint",
                        UNUSED_INPUT) from None  # fmt: skip

    return gradient


def _no_seed(answer) -> bool:
    """Whether ``answer`` looks up the output's adjoint before giving it one also on a graph
    whose output is not the first node of the walk (a walk in the wrong order fails on a leaf
    there instead)."""
    v = variable("v", shape=())
    out = sin(exp(v))
    try:
        answer(out, [v])
    except KeyError as error:
        return bool(error.args) and error.args[0] is out
    except Exception:  # any other failure: not recognisably the seed
        return False
    return False


def _gradients(answer, label: str, out: Node, wrt: list) -> list:
    errors = [(GraphError, "is not differentiable", LEAF_RULE), (KeyError, "", WALK_ORDER)]
    used = set(topological_order(out))
    unused = [x for x in wrt if x not in used]
    got = call(label, _unused_lookups(answer, label, unused), out, wrt, errors=errors)
    require(
        isinstance(got, list | tuple) and len(got) == len(wrt),
        f"{label} returned {show(got)}; it must return a list of {len(wrt)} nodes",
    )
    for node, x in zip(got, wrt):
        seed = x is out and isinstance(node, int | float)  # the pseudocode's {out: [1]}
        require(
            isinstance(node, Node),
            f"{label} returned {show(node)} for {x.name}; return a node for every input",
            SEED_NOT_A_NODE if seed else NOT_NODES if x in used else UNUSED_INPUT,
        )
    return list(got)


def _probe(answer, text: str, out: Node, wrt: list, feed: dict, wrong: dict | None = None) -> None:
    """Compare the answer's gradient nodes with cl.grad's; ``wrong``: mistake -> its values."""
    label = f"gradient({text}, [{', '.join(x.name for x in wrt)}])"
    got = _gradients(answer, label, out, wrt)
    values = call(f"evaluating the nodes of {label}", run_graph, got, feed)
    want = run_graph(grad(out, wrt), feed)
    for x, g, w in zip(wrt, values, want):
        if not close(g, w, rtol=1e-9, atol=1e-12):
            mistake = next((m for m, value in (wrong or {}).items() if close(g, value)), None)
            raise Wrong(f"{label}: the gradient for {x.name} {mismatch(g, w)}", mistake)


_RANDOM_OPS = (
    operator.add,
    operator.mul,
    operator.sub,
    lambda a, b: a / exp(tanh(b)),
    lambda a, b: sin(a) * b,
    lambda a, b: exp(tanh(a)),
)


def _random_graph(rng):
    """A scalar output of random ops on a scalar, a vector and a matrix, nodes reused."""
    s, v, m = variable("s", ()), variable("v", (3,)), variable("m", (2, 3))
    pool = [s, v, m, v * s, constant(rng.standard_normal(3)) * m]
    for _ in range(int(rng.integers(2, 7))):
        a, b = (pool[int(i)] for i in rng.integers(len(pool), size=2))
        pool.append(_RANDOM_OPS[int(rng.integers(len(_RANDOM_OPS)))](a, b))
    last = pool[-1] if pool[-1].shape == (2, 3) else pool[-1] * m
    out = total(matmul(last, constant(rng.standard_normal((3, 2))))) + total(pool[-2])
    feed = {
        s: float(rng.uniform(0.5, 1.5)),
        v: rng.uniform(-1, 1, 3),
        m: rng.uniform(-1, 1, (2, 3)),
    }
    return out, [s, v, m], feed


@exercise(
    "03.gradient", "gradient(out, wrt) -> list[Node]: reverse mode with node_to_grad",
    mistakes=(NO_SEED, SEED_NOT_A_NODE, WALK_ORDER, NOT_SUMMED, LEAF_RULE, UNUSED_INPUT,
              NOT_NODES, USES_GRAD),  # fmt: skip
    forbidden=DERIVATIVES,
)
def check_gradient(answer) -> str:
    x, y, z = (variable(name, shape=()) for name in "xyz")
    _probe(answer, "x", x, [x], {x: 2.0}, {NO_SEED: 0.0})
    _probe(answer, "sin(exp(x))", sin(exp(x)), [x], {x: 0.5}, {WALK_ORDER: 0.0, NO_SEED: 0.0})
    _probe(answer, "x * x", x * x, [x], {x: 3.0}, {NOT_SUMMED: 3.0})
    # x + x: add's rule gives the same node twice, which a set of partials keeps once
    _probe(answer, "x + x", x + x, [x], {x: 3.0}, {NOT_SUMMED: 1.0})
    reused = sin(x) + x * 2.0
    _probe(answer, "sin(x) + x * 2", reused, [x], {x: 1.0}, {NOT_SUMMED: 2.0})
    _probe(answer, "x * y", x * y, [x, z, y], {x: 2.0, y: 5.0, z: 1.0}, {UNUSED_INPUT: 0.0})
    rng = np.random.default_rng(30)
    for _ in range(24):
        out, wrt, feed = _random_graph(rng)
        _probe(answer, "a random graph", out, wrt, feed)
    return (
        f"agrees with cl.grad on {6 + 24} graphs: nodes used several times, an input out "
        "does not use, constants, broadcasting and matrix products"
    )


# -- div_rule ---------------------------------------------------------------------------------
FORGOT_ADJOINT = Mistake(
    "local-derivative-only",
    "a partial adjoint is v̄(k→i) = v̄i · ∂vi/∂vk: multiply the local derivative by the adjoint.",
)
QUOTIENT_SIGN = Mistake("sign", "∂(x/y)/∂y = −x / y²: the y partial is negative.")
QUOTIENT_FORM = Mistake("y-partial", "∂(x/y)/∂y = −x / y², so ȳ = −v̄ · x / y² (x over y SQUARED).")
SWAPPED = Mistake("swapped", "return the partials in the order of node.inputs: [x̄, ȳ].")
NUMBERS = Mistake(
    "numbers-not-nodes",
    "a rule builds NODES from node.inputs, adjoint and cl ops; it never sees numbers.",
)


def _div_mistake(values: list, x, y, g) -> Mistake | None:
    wrong = [
        (FORGOT_ADJOINT, [1 / y, -x / y**2]),
        (QUOTIENT_SIGN, [g / y, g * x / y**2]),
        (QUOTIENT_FORM, [g / y, -g / y**2]),
        (QUOTIENT_FORM, [g / y, -g * x / y]),
        (SWAPPED, [-g * x / y**2, g / y]),
    ]
    for mistake, partials in wrong:
        if all(v is None or close(v, p) for v, p in zip(values, partials)):
            return mistake
    return None


def _rule_nodes(answer, label: str, node: Node, g: Node, needs: list) -> list:
    got = call(label, answer, node, g, needs)
    require(
        isinstance(got, list | tuple) and len(got) == 2,
        f"{label} returned {show(got)}; it must return a list of two partial adjoints",
    )
    for name, partial, needed in zip("xy", got, needs):
        require(
            partial is not None or not needed, f"{label} returned None for {name}, which is needed"
        )
        require(
            partial is None or isinstance(partial, Node),
            f"{label} returned {type(partial).__name__} for {name}",
            NUMBERS,
        )
    return list(got)


def _second_derivatives(first: list, x: Node, y: Node, feed: dict) -> list:
    return run_graph(grad(total(first[0] * first[1]), [x, y]), feed)


@exercise(
    "03.div_rule", "div_rule(node, adjoint, needs) -> [x̄, ȳ] for node = x / y, as nodes",
    mistakes=(FORGOT_ADJOINT, QUOTIENT_SIGN, QUOTIENT_FORM, SWAPPED, NUMBERS),
    forbidden=("course_lib.ops.elementwise.Div.gradient", *DERIVATIVES),
)
def check_div_rule(answer) -> str:
    rng = np.random.default_rng(31)
    for shape in [(), (3,), (2, 3)]:
        x, y, g = (variable(name, shape) for name in ("x", "y", "adjoint"))
        node = x / y
        signs = rng.choice([-1.0, 1.0], shape)
        feed = {
            x: rng.uniform(-2, 2, shape),
            y: rng.uniform(0.5, 2, shape) * signs,
            g: rng.uniform(-2, 2, shape),
        }
        reference = node.op.gradient(node, g, [True, True])
        want = run_graph(reference, feed)
        for needs in ([True, True], [True, False], [False, True]):
            label = f"div_rule(x / y, adjoint, needs={needs}) for shape {shape}"
            nodes = _rule_nodes(answer, label, node, g, needs)
            values = [None if p is None else call(label, run_graph, p, feed) for p in nodes]
            for name, value, w in zip("xy", values, want):
                if value is not None and not close(value, w, rtol=1e-9, atol=1e-12):
                    raise Wrong(
                        f"{label}: the partial adjoint of {name} {mismatch(value, w)}",
                        _div_mistake(values, feed[x], feed[y], feed[g]),
                    )
            if all(needs):
                both, both_label = nodes, label
        again = call(both_label, _second_derivatives, both, x, y, feed)
        require(
            all(close(a, b) for a, b in zip(again, _second_derivatives(reference, x, y, feed))),
            f"{both_label}: the partial adjoints have the right values, but differentiating them "
            "again gives wrong numbers",
            NUMBERS,
        )
    return (
        "right partial adjoints for scalars, vectors and matrices, None allowed where not "
        "needed, and nodes that differentiate again"
    )


# -- vjp_rules: the assignment ------------------------------------------------------------------
NOT_UNBROADCAST = Mistake(
    "not-unbroadcast",
    "an input that broadcasting stretched gets an adjoint of ITS shape: sum the output-shaped "
    "partial adjoint over the leading axes the input lacks and (keepdims=True) over the axes "
    "where it has length 1.",
)
UNBROADCAST_SHAPE = Mistake(
    "unbroadcast-shape",
    "the right sums, the wrong shape: drop the leading axes the input lacks, but keep its axes "
    "of length 1 (np.sum(..., axis=..., keepdims=True)).",
)
PRODUCT_PARTIALS = Mistake(
    "product-partials",
    "each factor's adjoint reads the OTHER factor: for x·y, x̄ = ḡ·y and ȳ = ḡ·x; for x / y, "
    "x̄ = ḡ / y and ȳ = −ḡ·x / y².",
)
MATMUL_ORDER = Mistake(
    "matmul-transpose-order",
    "for out = x @ y: x̄ = ḡ @ yᵀ and ȳ = xᵀ @ ḡ, where ᵀ swaps the LAST TWO axes only "
    "(np.swapaxes(y, -1, -2); .T reverses every axis of a batched array).",
)
NOT_EXPANDED = Mistake(
    "reduced-axes-not-restored",
    "with keepdims=False the adjoint lacks the reduced axes: put them back with length 1 "
    "(np.expand_dims(adjoint, axes)) before broadcasting it to x's shape.",
)
MAX_NOT_ROUTED = Mistake(
    "max-not-routed",
    "only the elements equal to the maximum affect it: the adjoint goes to them (shared among "
    "ties), and every other element gets 0.",
)


def _sum_to(a: np.ndarray, shape: tuple, keep: bool = True, stretched: bool = True):
    """``a`` summed over the leading axes ``shape`` lacks and the axes where it has length 1
    (``keep``: keeping those; ``stretched=False``: over the leading axes only)."""
    a = np.sum(a, axis=tuple(range(a.ndim - len(shape))))
    if not stretched:
        return a
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and a.shape[i] != 1)
    return np.sum(a, axis=axes, keepdims=keep)


def _swap(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a, -1, -2)


def _partial(case: Case, g: np.ndarray, k: int) -> np.ndarray:
    """The output-shaped partial adjoint of input k of an elementwise op or matmul."""
    x, y = case.inputs
    if case.op == "matmul":
        return g @ _swap(y) if k == 0 else _swap(x) @ g
    if case.op == "mul":
        return g * (x if k else y)
    if case.op == "div":
        return -g * x / y**2 if k else g / y
    return -g if case.op == "sub" and k else g


def _vjp_candidates(case: Case, g: np.ndarray, k: int) -> list:
    """(mistake, a function computing its wrong adjoint of input k)."""
    op, inputs, out = case.op, case.inputs, case.output
    if op in REDUCTIONS:
        spread = lambda: expanded(case, g)  # noqa: E731
        wrong = [(NOT_EXPANDED, lambda: np.broadcast_to(g, inputs[0].shape)
                  / (count(case) if op == "mean" else 1))]  # fmt: skip
        if op == "mean":
            wrong += [(MEAN_COUNT, spread), (MEAN_COUNT, lambda: spread() / inputs[0].size)]
        if op == "max":
            wrong += [(MAX_NOT_ROUTED, spread),
                      (MAX_TIES, lambda: spread() * (tie_weights(case) > 0)),
                      (MAX_TIES, lambda: spread() * first_maximum(case))]  # fmt: skip
        return wrong
    if op == "softmax":
        return softmax_candidates(case, g)
    if op == "log_softmax":
        x = inputs[0]
        return [(LOG_SOFTMAX_EXP, lambda: g - np.exp(x) * row_sum(g)),
                (LOG_SOFTMAX_EXP, lambda: g - out * row_sum(g)),
                (LOG_SOFTMAX_TRANSPOSED, lambda: g - row_sum(np.exp(out) * g)),
                (ROW_SUM_NOT_KEPT, lambda: g - np.exp(out) * row_sum(g, keep=False)),
                (NAIVE_SOFTMAX, lambda: g - naive_softmax(x) * row_sum(g))]  # fmt: skip
    shape, partial = inputs[k].shape, lambda: _partial(case, g, k)
    wrong = [(NOT_UNBROADCAST, partial),
             (UNBROADCAST_SHAPE, lambda: _sum_to(partial(), shape, keep=False)),
             (UNBROADCAST_SHAPE, lambda: _sum_to(partial(), shape, stretched=False))]  # fmt: skip
    a, b = inputs
    swapped = {  # each factor's adjoint from the wrong operands, before unbroadcasting
        "mul": [lambda: g * a, lambda: g * b],
        "div": [lambda: g * b, lambda: g * a / b**2, lambda: -g / b**2, lambda: -g * a / b],
        "matmul": [lambda: g @ b, lambda: _swap(b) @ g, lambda: g.T @ b.T] if k == 0
        else [lambda: a @ g, lambda: g @ _swap(a), lambda: _swap(g) @ a],
    }.get(op, [])
    mistake = MATMUL_ORDER if op == "matmul" else PRODUCT_PARTIALS
    return wrong + [(mistake, lambda f=f: _sum_to(f(), shape)) for f in swapped]


def _vjp_errors(case: Case) -> list:
    if case.op == "matmul":
        return [(ValueError, "", MATMUL_ORDER)]
    if case.op in REDUCTIONS:
        return [(ValueError, "broadcast", NOT_EXPANDED)]
    return row_errors(case)


@exercise(
    "03.vjp_rules",
    "vjp_rule(op, inputs, output, adjoint, axis=None, keepdims=False) -> tuple: the inputs' "
    "adjoints, in NumPy",
    mistakes=(NOT_UNBROADCAST, UNBROADCAST_SHAPE, PRODUCT_PARTIALS, MATMUL_ORDER, NOT_EXPANDED,
              MEAN_COUNT, MAX_NOT_ROUTED, MAX_TIES, SOFTMAX_TERM, SOFTMAX_DIAGONAL,
              ROW_SUM_NOT_KEPT, LOG_SOFTMAX_EXP, LOG_SOFTMAX_TRANSPOSED,
              NAIVE_SOFTMAX),  # fmt: skip
    points=5.0,
    forbidden=library_rules(),
)
def check_vjp_rules(answer) -> str:
    rng = np.random.default_rng(32)
    found = cases(rng)
    for case in found:
        g = scattered(rng, rng.standard_normal(case.output.shape))
        want = engine_vjp(case, g)
        label = case.label("vjp_rule")
        got = call_rule(answer, case, "vjp_rule", g, errors=_vjp_errors(case))
        require(
            type(got) in (tuple, list) and len(got) == len(want),
            f"{label} returned {show(got)}; return a tuple with one adjoint per input, "
            f"{len(want)} here ((x̄,) for one input)",
        )
        for k, (value, w) in enumerate(zip(got, want)):
            what = f"{label}: the adjoint of input {k + 1}"
            compare(what, as_array(what, value, w.shape), w, _vjp_candidates(case, g, k))
    return (
        f"agrees with cl.grad on {len(found)} cases of {len(OPS)} ops: broadcasting, batched "
        "matmul, reductions over any axes, ties for max, softmax rows near ±1000, "
        "non-contiguous and 0-d arrays"
    )
