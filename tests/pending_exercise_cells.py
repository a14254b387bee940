"""The exercise cells of notebooks 02, 03, 04 and 07, waiting to be inserted.

Other work is still changing those four notebooks, so their exercises are kept here until it
has landed; then they move into the notebooks (right after the cell that ``after`` starts
with) and this file goes. Until then ``tests/exercise_notebooks.py`` takes the reference
solutions of these exercises from here, as it takes the others from the notebooks.
"""

PENDING = {
    "02_forward_mode": [
        {
            "after": "right = eps >= 1e-4",
            "cells": [
                (
                    "markdown",
                    """### Exercise 02.central_difference

Write `central_difference(f, x, eps)`, the central difference of a function `f` of one float
at `x` with step `eps` (error $O(\\varepsilon^2)$). `check` tries cubics, whose central
difference is known exactly ($f'(x) + f'''(x)\\,\\varepsilon^2/6$), `sin` and `exp`.""",
                ),
                (
                    "code",
                    '''def central_difference(f, x, eps):
    """(f(x + eps) - f(x - eps)) / (2 eps)."""
    # BEGIN SOLUTION
    return (f(x + eps) - f(x - eps)) / (2 * eps)
    # END SOLUTION''',
                ),
                ("code", 'check("02.central_difference", central_difference)'),
            ],
        },
        {
            "after": "d1, d2 = cl.Dual(2.0, 1.0), cl.Dual(5.0, 0.0)",
            "cells": [
                (
                    "markdown",
                    """### Exercise 02.dual

Complete your own dual numbers. `Dual(val, dot)` holds $v$ and $\\dot v$; addition is given.
Write subtraction, multiplication and division, with a plain float on either side (a float is a
constant: `lift(c)` is `Dual(c, 0.0)`; `2.0 - u` calls `u.__rsub__(2.0)`), and the functions
`sin`, `exp` and `log`, which take and return a `Dual`. The answer is a namespace with the
attributes `Dual`, `sin`, `exp` and `log`. `check` tries every rule, then random compositions
of them, against the tangents `cl.jvp` builds.""",
                ),
                (
                    "code",
                    '''class Dual:
    """v + v̇ε with ε² = 0: the value val and the tangent dot."""

    def __init__(self, val, dot=0.0):
        self.val, self.dot = float(val), float(dot)

    def __repr__(self):
        return f"Dual({self.val:.4g}, {self.dot:.4g})"

    def __add__(self, other):  # given: (u + w)˙ = u̇ + ẇ
        other = lift(other)
        return Dual(self.val + other.val, self.dot + other.dot)

    __radd__ = __add__  # 2.0 + u

    def __sub__(self, other):
        # BEGIN SOLUTION
        other = lift(other)
        return Dual(self.val - other.val, self.dot - other.dot)
        # END SOLUTION

    def __rsub__(self, other):  # other - self
        # BEGIN SOLUTION
        return lift(other) - self
        # END SOLUTION

    def __mul__(self, other):
        # BEGIN SOLUTION
        other = lift(other)
        return Dual(self.val * other.val, self.dot * other.val + self.val * other.dot)
        # END SOLUTION

    __rmul__ = __mul__  # 3.0 * u

    def __truediv__(self, other):
        # BEGIN SOLUTION
        other = lift(other)
        dot = (self.dot * other.val - self.val * other.dot) / other.val**2
        return Dual(self.val / other.val, dot)
        # END SOLUTION

    def __rtruediv__(self, other):  # other / self
        # BEGIN SOLUTION
        return lift(other) / self
        # END SOLUTION


def lift(x):
    """A plain number as a Dual: a constant, with tangent 0."""
    return x if isinstance(x, Dual) else Dual(x, 0.0)''',
                ),
                (
                    "code",
                    """import math
from types import SimpleNamespace


def sin(u):
    # BEGIN SOLUTION
    return Dual(math.sin(u.val), math.cos(u.val) * u.dot)
    # END SOLUTION


def exp(u):
    # BEGIN SOLUTION
    return Dual(math.exp(u.val), math.exp(u.val) * u.dot)
    # END SOLUTION


def log(u):
    # BEGIN SOLUTION
    return Dual(math.log(u.val), u.dot / u.val)
    # END SOLUTION""",
                ),
                ("code", 'check("02.dual", SimpleNamespace(Dual=Dual, sin=sin, exp=exp, log=log))'),
            ],
        },
    ],
    "03_reverse_mode": [
        {
            "after": "player = viz.StepThrough(steps, feed={w1: 0.5})",
            "cells": [
                (
                    "markdown",
                    """### Exercise 03.div_rule

Every op carries its reverse-mode rule: `op.gradient(node, adjoint, needs)` returns one
partial adjoint $\\bar v_{k\\to i} = \\bar v_i\\,\\partial v_i/\\partial v_k$ per input, as
**nodes**, and may return `None` for an input whose `needs[k]` is False. Write the rule of
division: `div_rule(node, adjoint, needs)` for `node = x / y` (same shapes) returns
`[x̄, ȳ]`. `check` compares with `cl.div`'s own rule, and differentiates your nodes again.""",
                ),
                (
                    "code",
                    '''def div_rule(node, adjoint, needs):
    """[x̄, ȳ] for node = x / y, built from course_lib ops."""
    x, y = node.inputs
    # BEGIN SOLUTION
    x_bar = adjoint / y if needs[0] else None
    y_bar = -adjoint * x / (y * y) if needs[1] else None
    return [x_bar, y_bar]
    # END SOLUTION''',
                ),
                ("code", 'check("03.div_rule", div_rule)'),
                (
                    "markdown",
                    """### Exercise 03.gradient

Write the lecture's algorithm: `gradient(out, wrt)` returns the list of adjoint nodes of the
nodes in `wrt`, built with `node_to_grad`, `cl.topological_order(out)`, each node's rule
`i.op.gradient(i, v̄i, needs)` and `cl.sum_n` for the sums (not `cl.grad`). An input that
`out` does not use gets `cl.zeros_like(x)`. `check` evaluates your nodes against `cl.grad` on
graphs with nodes used several times, constants, broadcasting and matrix products.""",
                ),
                (
                    "code",
                    '''def gradient(out, wrt):
    """The adjoints of the nodes in wrt, as nodes of the backward graph."""
    # BEGIN SOLUTION
    node_to_grad = {out: [cl.ones_like(out)]}
    adjoint = {}
    for i in reversed(cl.topological_order(out)):
        if i not in node_to_grad:
            continue  # i does not lead to out
        adjoint[i] = cl.sum_n(*node_to_grad[i])  # v̄i = sum(node_to_grad[i])
        if not i.inputs:
            continue  # a variable or a constant: no rule
        for k, partial in zip(i.inputs, i.op.gradient(i, adjoint[i], [True] * len(i.inputs))):
            node_to_grad.setdefault(k, []).append(partial)  # v̄(k→i) = v̄i · ∂vi/∂vk
    return [adjoint.get(x, cl.zeros_like(x)) for x in wrt]
    # END SOLUTION''',
                ),
                ("code", 'check("03.gradient", gradient)'),
            ],
        },
    ],
    "04_training": [
        {
            "after": "lr = 0.1",
            "cells": [
                (
                    "markdown",
                    """### Exercise 04.mlp_grads

Do by hand what `grad` just did: write `mlp_grads(x, y, w1, w2)` returning `(dw1, dw2)`, the
gradients of $L = \\mathrm{mean}((\\mathrm{ReLU}(x W_1) W_2 - y)^2)$ in NumPy, going backwards
through the graph above. `check` compares with `cl.grad` on networks of several sizes.""",
                ),
                (
                    "code",
                    '''def mlp_grads(x, y, w1, w2):
    """(dL/dw1, dL/dw2) for L = mean((relu(x @ w1) @ w2 - y) ** 2)."""
    # BEGIN SOLUTION
    pre = x @ w1
    hidden = np.maximum(pre, 0.0)
    delta = 2 * (hidden @ w2 - y) / y.size  # dL/dŷ
    dw2 = hidden.T @ delta
    dw1 = x.T @ ((delta @ w2.T) * (pre > 0))  # back through ReLU: its slope is 0 or 1
    return dw1, dw2
    # END SOLUTION''',
                ),
                ("code", 'check("04.mlp_grads", mlp_grads)'),
            ],
        },
        {
            "after": 'logits = cl.variable("logits", shape=(5,))',
            "cells": [
                (
                    "markdown",
                    """### Exercise 04.softmax_ce_grad

Write the gradient a framework uses for a batch: `softmax_ce_grad(logits, targets)` in NumPy,
for logits of shape `(N, C)` and integer class ids `targets` of shape `(N,)`, returns
$\\partial L/\\partial\\,\\mathrm{logits}$ of the **mean** cross-entropy over the N rows. It
must stay finite for logits of size 1000. `check` compares with central differences of the
loss.""",
                ),
                (
                    "code",
                    '''def softmax_ce_grad(logits, targets):
    """d mean(cross-entropy) / d logits, for class ids targets."""
    # BEGIN SOLUTION
    n = len(targets)
    shifted = logits - logits.max(axis=-1, keepdims=True)  # exp never overflows
    probs = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    probs[np.arange(n), targets] -= 1.0  # y - t, with t one-hot
    return probs / n
    # END SOLUTION''',
                ),
                ("code", 'check("04.softmax_ce_grad", softmax_ce_grad)'),
            ],
        },
    ],
    "07_gpu_kernels": [
        {
            "after": "**Answer:** one element each.",
            "cells": [
                (
                    "markdown",
                    """### Exercise 07.scale_add

Write your first kernel, in CUDA C: `scale_add(x, y, out, a, n)` computes
`out[i] = a * x[i] + y[i]` for every `i < n`, one thread per element, keeping the signature
below. `check` compiles it and runs it (on the GPU, or in the CPU emulator) for ragged `n` and
several grids and blocks — with a spare block, too.""",
                ),
                (
                    "code",
                    '''scale_add_source = r"""
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, float a, int n) {
    // BEGIN SOLUTION
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = a * x[i] + y[i];
    }
    // END SOLUTION
}
"""''',
                ),
                ("code", 'check("07.scale_add", scale_add_source)'),
            ],
        },
        {
            "after": "**Answer:** with a tree through shared memory",
            "cells": [
                (
                    "markdown",
                    """### Exercise 07.softmax_rows

A simpler softmax kernel: **one thread per row** of a row-major `(rows, cols)` matrix (no
shared memory). Write `softmax_rows(x, out, rows, cols)`: the thread of row `r` finds the row's
maximum, sums the shifted exponentials and writes the row of `out`. `check` runs it on ragged
shapes and on logits up to $10^4$.""",
                ),
                (
                    "code",
                    '''softmax_rows_source = r"""
extern "C" __global__ void softmax_rows(const float* x, float* out, int rows, int cols) {
    // BEGIN SOLUTION
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = x + r * cols;
    float m = row[0];
    for (int j = 1; j < cols; j++) m = fmaxf(m, row[j]);
    float sum = 0.0f;
    for (int j = 0; j < cols; j++) sum += expf(row[j] - m);
    for (int j = 0; j < cols; j++) out[r * cols + j] = expf(row[j] - m) / sum;
    // END SOLUTION
}
"""''',
                ),
                ("code", 'check("07.softmax_rows", softmax_rows_source)'),
            ],
        },
    ],
}
