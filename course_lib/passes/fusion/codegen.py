"""Code for a fused subgraph: a numexpr expression and a C++ loop (CPU), a CUDA C kernel (GPU).

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

from ...backend import host_array
from ...errors import GraphError, ParameterError, ShapeError
from ...graph import Node, is_weak_scalar, topological_order
from ...kernels import FusedElementwise

_FLOAT_LITERAL = re.compile(r"(?<![\w.])\d+(?:\.\d*(?:e[-+]?\d+)?|e[-+]?\d+)")
_CUDA_FLOAT_LITERAL = re.compile(rf"({_FLOAT_LITERAL.pattern})f")
_LITERAL_OR_EXACT_POWER = re.compile(rf"(?<=\*\* )(-1|0|1|2)\.0(?=\))|{_FLOAT_LITERAL.pattern}")


def cuda_float(value) -> str:
    """A float32 literal of CUDA C and C++ for ``value`` rounded to float32 as NumPy rounds it
    (the double's digits could round the other way, and 1e300f does not compile under NVRTC),
    infinities and NaN included; a negative one in parentheses (``(-{0})`` of -2.0 is
    ``(-(-2.0f))``, not the decrement ``(--2.0f)``)."""
    with np.errstate(over="ignore"):
        single = np.float32(float(value))
    if math.isnan(single):
        return "(0.0f / 0.0f)"
    if math.isinf(single):
        return "(1.0f / 0.0f)" if single > 0 else "(-1.0f / 0.0f)"
    text = f"{single!s}f"  # the shortest digits that read back as this float32
    return f"({text})" if math.copysign(1.0, single) < 0 else text


def render(params: Sequence[Node], body: Node, target: str, constant: Callable) -> str:
    """``body`` as one ``target`` expression; ``params[k]`` is written ``xk``.

    ``constant(value)`` returns how a scalar constant is written.
    """
    text = {p: f"x{k}" for k, p in enumerate(params)}
    for node in topological_order([body]):
        if node in text:
            continue
        if is_weak_scalar(node):
            text[node] = constant(node.op.value)
            continue
        expression = node.op.expression([text[i] for i in node.inputs], target)
        if expression is None:
            raise GraphError(
                f"{node.op.label()} at node {node.name} (shape {node.shape}, inputs "
                f"{[i.shape for i in node.inputs]}) has no {target} expression"
            )
        text[node] = expression
    return text[body]


@dataclass(frozen=True)
class NumexprProgram:
    """A numexpr expression over inputs ``x0 … xk`` and named scalar constants ``c0 …``."""

    text: str
    n_inputs: int
    constants: tuple[float, ...]

    def evaluate(
        self, arrays: Sequence, out: np.ndarray | None = None, exact: bool = False
    ) -> np.ndarray | None:
        """The result in one blocked pass over memory, or None when numexpr cannot run it.

        Constants and the result take the floating dtype of the inputs (float32 stays
        float32, as with NumPy's weak scalars); integer inputs are left to the op-by-op
        interpreter. ``out`` (optional: a writeable NumPy array of the result's shape and
        dtype, overlapping no input, else an error) receives the result instead of a new
        array, as in the lecture's preallocated programs. numexpr runs on the CPU: device
        arrays are refused with ``DeviceError``. ``exact``: None also for float32 inputs
        where the text calls ``maximum``, which numexpr computes in float64 only, and so
        every op after it (rounded once at the end, not op by op as NumPy rounds: the last
        bit of about one element in three differs).
        """
        import numexpr  # noqa: PLC0415  (a dependency; imported on first use)

        where = "an input of a numexpr program"
        arrays = [a if is_weak_value(a) else host_array(a, where) for a in arrays]
        dtype = np.result_type(*arrays)  # a Python number stays weak, as in NumPy's operators
        if dtype.kind != "f" or dtype.itemsize not in (4, 8):
            return None
        if exact and dtype == np.float32 and "maximum(" in self.text:
            return None
        if out is not None:
            _check_out(out, arrays, dtype)
        names = {f"x{k}": dtype.type(a) if is_weak_value(a) else a for k, a in enumerate(arrays)}
        names.update({f"c{j}": dtype.type(v) for j, v in enumerate(self.constants)})
        try:  # numexpr's maximum works in float64: same_kind casts it back into ``out``
            result = numexpr.evaluate(self.text, local_dict=names, out=out, casting="same_kind")
        except (TypeError, ValueError, NotImplementedError):  # e.g. a float where(cond)
            return None
        if result.shape != np.broadcast_shapes(*(np.shape(a) for a in arrays)):
            return None  # numexpr drops an axis of size 1 against an empty one: op by op
        return result.astype(dtype, copy=False)


def _check_out(out, arrays: Sequence, dtype: np.dtype) -> None:
    """``out`` of a numexpr program: a writeable host array of the result's shape and dtype
    that overlaps no input (numexpr reads its inputs block by block as it writes)."""
    host_array(out, "out of a numexpr program")  # a device array: DeviceError
    shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
    if not isinstance(out, np.ndarray) or out.dtype != dtype:
        raise GraphError(f"numexpr program: out must be a NumPy array of the result's dtype "
                         f"{dtype}, got {getattr(out, 'dtype', type(out).__name__)}")  # fmt: skip
    if out.shape != shape:
        raise ShapeError(f"numexpr program: out must be of shape {shape}, got {out.shape}")
    if not out.flags.writeable or any(
        not is_weak_value(a) and np.may_share_memory(out, a) for a in arrays
    ):
        raise ParameterError(
            "numexpr program: out must be writeable and overlap no input; pass a fresh array"
        )


def is_weak_value(value) -> bool:
    """Is ``value`` a Python number (an op such as ``count`` returns one), which NumPy's
    operators take in the array's dtype rather than as float64?"""
    return type(value) in (int, float)  # not bool, not NumPy scalars (they are strong)


def numexpr_program(params: Sequence[Node], body: Node) -> NumexprProgram:
    """Generate the numexpr expression of a fused body."""
    constants: list[float] = []

    def named(value) -> str:
        constants.append(float(value))
        return f"c{len(constants) - 1}"

    text = render(params, body, "numexpr", named)
    # float literals of the op templates become named constants too (a double literal
    # would make numexpr compute a float32 expression in float64), but for the exponents
    # of NumPy's exact powers, written as integers: numexpr too computes them as x * x,
    # 1 / x, ... (its pow would differ from those in the last bit)
    text = _LITERAL_OR_EXACT_POWER.sub(lambda m: m.group(1) or named(m.group()), text)
    return NumexprProgram(text, len(params), tuple(constants))


def cuda_kernel(params: Sequence[Node], body: Node) -> FusedElementwise:
    """Generate the CUDA C kernel (float32) of a fused body; named by its expression."""
    expression = render(params, body, "cuda", cuda_float)
    # float literals of the op templates (pow's exponent) rounded to float32 as constants are
    expression = _CUDA_FLOAT_LITERAL.sub(lambda m: cuda_float(m.group(1)), expression)
    digest = hashlib.sha256(expression.encode()).hexdigest()[:12]
    return FusedElementwise(
        f"fused_{digest}",
        inputs=tuple(f"x{k}" for k in range(len(params))),
        outputs=(("y", expression),),
    )


CPU_TEMPLATE = """\
// {name}: generated by course_lib.passes.fusion.codegen: one loop, one pass over memory,
// its parts on the threads of the CPU kernels' shared pool (kernels/cpu_pool.hpp)
#include <math.h>
{vector_math}
static inline float rsqrtf(float x) {{ return 1.0f / std::sqrt(x); }}
static inline float maximumf(float a, float b) {{ return (a > b || a != a) ? a : b; }}

// elements 0 .. n-1 of the arrays handed in
static void part({restrict_parameters}float* __restrict__ out_y, long long n) {{
    #pragma omp simd  // elementwise: the iterations are independent
    for (long long i = 0; i < n; ++i) {{
{loads}
        out_y[i] = {expression};
    }}
}}

struct Arrays {{ {fields}float* out_y; }};
typedef void (*Range)(void* arrays, long long lo, long long hi);
typedef void (*ParallelFor)(long long count, long long grain, long long align, Range body,
                            void* context);

static void range(void* context, long long lo, long long hi) {{
    const Arrays* a = (const Arrays*)context;
    part({offsets}a->out_y + lo, hi - lo);
}}

// Elements 0 .. n-1, split by `parallel_for` (the pool's pool_parallel_for: parts of whole
// 64-float blocks, so each element meets the same SIMD or scalar code on any number of
// threads), or all on this thread when it is null
extern "C" __attribute__((visibility("default")))
void {name}({parameters}float* out_y, long long n, void* parallel_for) {{
    Arrays arrays{{{names}out_y}};
    if (parallel_for) ((ParallelFor)parallel_for)(n, {min_part}, 64, range, &arrays);
    else range(&arrays, 0, n);
}}
"""


def cpu_source(kernel: FusedElementwise) -> str:
    """The CUDA kernel's expression as a plain C++ loop over float32 arrays (for g++), whose
    exported function takes the shared pool's ``pool_parallel_for`` (or null: one thread)."""
    from ...kernels import cpu_kernels, native  # noqa: PLC0415  (loaded on first use)

    ((_, expression),) = kernel.outputs
    return CPU_TEMPLATE.format(
        name=kernel.name,
        vector_math=native.VECTOR_MATH,
        restrict_parameters="".join(f"const float* __restrict__ in_{x}, " for x in kernel.inputs),
        loads="\n".join(f"        const float {x} = in_{x}[i];" for x in kernel.inputs),
        expression=expression,
        fields="".join(f"const float* in_{x}; " for x in kernel.inputs),
        offsets="".join(f"a->in_{x} + lo, " for x in kernel.inputs),
        parameters="".join(f"const float* in_{x}, " for x in kernel.inputs),
        names="".join(f"in_{x}, " for x in kernel.inputs),
        min_part=cpu_kernels.MIN_SIZE,
    )
