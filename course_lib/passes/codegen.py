"""Code for a fused subgraph: a numexpr expression (CPU) and a CUDA C kernel (GPU).

The subgraph is the fused node's *body*: elementwise nodes over placeholder variables
``x0, x1, ...`` (one per input of the fused node) and inline scalar constants. Each op
writes itself as an expression (:meth:`Op.expression`); the generators nest them.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..graph import Node, topological_order
from ..kernels.fused import FusedElementwise

_FLOAT_LITERAL = re.compile(r"(?<![\w.])\d+(?:\.\d*(?:e[-+]?\d+)?|e[-+]?\d+)")


def is_inline_constant(node: Node) -> bool:
    """A weakly typed finite scalar constant (``2.0`` in ``x * 2.0``): written into the code."""
    if not node.is_constant or node.dtype is not None:
        return False
    value = node.op.value
    return isinstance(value, (bool, int, float)) and math.isfinite(value)


def render(params: Sequence[Node], body: Node, target: str, constant: Callable) -> str:
    """``body`` as one ``target`` expression; ``params[k]`` is written ``xk``.

    ``constant(value)`` returns how a scalar constant is written.
    """
    text = {p: f"x{k}" for k, p in enumerate(params)}
    for node in topological_order([body]):
        if node in text:
            continue
        if is_inline_constant(node):
            text[node] = constant(node.op.value)
            continue
        expression = node.op.expression([text[i] for i in node.inputs], target)
        if expression is None:
            raise ValueError(f"{node.op.label()} has no {target} expression")
        text[node] = expression
    return text[body]


@dataclass(frozen=True)
class NumexprProgram:
    """A numexpr expression over inputs ``x0 … xk`` and named scalar constants ``c0 …``."""

    text: str
    n_inputs: int
    constants: tuple[float, ...]

    def evaluate(self, arrays: Sequence) -> np.ndarray | None:
        """The result in one blocked pass over memory, or None when numexpr cannot run it.

        Constants and the result take the floating dtype of the inputs (float32 stays
        float32, as with NumPy's weak scalars); integer inputs are left to the op-by-op
        interpreter.
        """
        import numexpr  # noqa: PLC0415  (a dependency; imported on first use)

        dtype = np.result_type(*arrays)
        if dtype.kind != "f" or dtype.itemsize not in (4, 8):
            return None
        names = {f"x{k}": a for k, a in enumerate(arrays)}
        names.update({f"c{j}": dtype.type(v) for j, v in enumerate(self.constants)})
        try:
            result = numexpr.evaluate(self.text, local_dict=names)
        except (TypeError, ValueError, NotImplementedError):  # e.g. a float where(cond)
            return None
        return result.astype(dtype, copy=False)  # numexpr's maximum works in float64


def numexpr_program(params: Sequence[Node], body: Node) -> NumexprProgram:
    """Generate the numexpr expression of a fused body."""
    constants: list[float] = []

    def named(value) -> str:
        constants.append(float(value))
        return f"c{len(constants) - 1}"

    text = render(params, body, "numexpr", named)
    # float literals of the op templates become named constants too (a double literal
    # would make numexpr compute a float32 expression in float64)
    text = _FLOAT_LITERAL.sub(lambda m: named(m.group()), text)
    return NumexprProgram(text, len(params), tuple(constants))


def cuda_kernel(params: Sequence[Node], body: Node) -> FusedElementwise:
    """Generate the CUDA C kernel (float32) of a fused body; named by its expression."""
    expression = render(params, body, "cuda", lambda v: f"{float(v)!r}f")
    digest = hashlib.sha256(expression.encode()).hexdigest()[:12]
    return FusedElementwise(
        f"fused_{digest}",
        inputs=tuple(f"x{k}" for k in range(len(params))),
        outputs=(("y", expression),),
    )
