"""The node a fusion leaves behind: one op that computes a whole elementwise subgraph.

``Fused`` keeps the subgraph it replaced (its *body*, over placeholder variables ``x0 …``),
so it can compute it in one pass over memory, count its cost, draw itself as a formula, and
differentiate: its gradient and tangent are built from the body, then wired to the fused
node's real inputs. Where it runs:

* GPU: the generated CUDA kernel (float32; other dtypes op by op);
* CPU, large float32 arrays of one shape with g++ present: the same expression as a C++
  loop compiled for this CPU (:mod:`.cpu_loop`), which runs at memory speed;
* CPU otherwise: the numexpr expression (float32/float64, broadcasting, no compiler), but
  op by op for float32 where it calls ``maximum`` (numexpr's is float64 only).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from ... import kernels
from ...autodiff import grad, jvp
from ...backend import device_of, host_array, is_gpu, on_host
from ...errors import DeviceError, GraphError, ParameterError, ShapeError
from ...graph import Node, Op, interpret, is_weak_scalar, rebuild, topological_order, variable
from ...ops.elementwise import Add, AddN
from .codegen import NumexprProgram, cuda_kernel, is_weak_value, numexpr_program
from .cpu_loop import loop_worthy, run_cpu_loop, try_cpu_loop

_DISPLAY = {"+": 1, "-": 1, "*": 2, "/": 2}  # precedence of infix symbols in formulas


def _check_out(name: str, out, shape: tuple, mode: str) -> None:
    """``out`` for a fused kernel's result: float32, of the broadcast shape, writeable, and
    where the kernel writes (a device array for "gpu", a host array for the emulator)."""
    if mode == "gpu" and device_of(out) != "gpu":
        where = "a NumPy array" if isinstance(out, np.ndarray) else f"{type(out).__name__}"
        raise DeviceError(
            f"{name}: out is {where}, but the GPU kernel's result is a device array; "
            "pass a CuPy array (or copy the result with .get())"
        )
    if mode != "gpu":
        host_array(out, f"out of {name} ({mode})")
    if getattr(out, "dtype", None) != np.float32:
        raise GraphError(f"{name}: out must be float32, got {getattr(out, 'dtype', type(out))}")
    if tuple(out.shape) != tuple(shape):
        raise ShapeError(f"{name}: out must be of shape {tuple(shape)}, got {tuple(out.shape)}")
    if not getattr(getattr(out, "flags", None), "writeable", True):
        raise ParameterError(f"{name}: out is read-only; pass a writeable array")


def _one_dtype(body: Node, params: Sequence[Node], examples: list) -> bool:
    """Does NumPy, computing ``body`` op by op on ``examples``, keep every value in the
    result's float dtype or bool, and add no booleans (``True + True`` is True in NumPy, 2
    in generated code)?"""
    try:
        with np.errstate(all="ignore"):  # per thread, unlike warnings.catch_warnings
            values = interpret(body, dict(zip(params, examples)), np)
    except Exception:  # noqa: BLE001  (the example fails: the run reports it, op by op)
        return False
    dtype = np.asarray(values[body]).dtype
    return dtype.kind == "f" and all(
        np.asarray(v).dtype in (dtype, np.bool_)
        and not (isinstance(n.op, (Add, AddN)) and np.asarray(v).dtype == np.bool_)
        for n, v in values.items() if n.inputs or n in params and not is_weak_value(v)
    )  # fmt: skip


class Fused(Op):
    """A fused elementwise kernel computing ``body`` (a graph over ``params``)."""

    name = "fused"
    elementwise = True

    def written(self, args):
        return f"fused: {self.formula(args, pretty=True)}"

    def __init__(self, params: Sequence[Node], body: Node):
        super().__init__()
        self.params, self.body = tuple(params), body

    # -- forward ---------------------------------------------------------------------------
    def infer_shape(self, *shapes):
        return self._propagate(shapes)[self.body]

    def infer_dtype(self, *dtypes):
        return self.body.dtype

    def compute(self, xp, *arrays):
        if not self.one_dtype(arrays):  # NumPy would change dtype on the way: op by op
            return self.interpret(xp, *arrays)
        if on_host(xp):
            result = None
            if loop_worthy(arrays):
                contiguous = [np.ascontiguousarray(a) for a in arrays]  # views: copied
                result = try_cpu_loop(self.kernel, contiguous)
            if result is None:  # numexpr, where it rounds as NumPy does
                result = self.numexpr.evaluate(arrays, exact=True)
            if result is not None:  # 0-d: a NumPy scalar, as the ops' ufuncs give one
                return result[()] if result.ndim == 0 else result
        elif is_gpu(xp) and all(getattr(a, "dtype", None) == np.float32 for a in arrays):
            return self.run_kernel(xp, *arrays, mode="gpu")
        return self.interpret(xp, *arrays)

    def run_kernel(self, xp, *arrays, mode: str | None = None, out=None):
        """Run the generated CUDA kernel on float32 arrays (broadcast here).

        ``mode``: "gpu" (CuPy arrays; ``xp`` is CuPy), "emulator" (CUDA threads on the CPU),
        or "cpu": the kernel's expression as a plain C++ loop compiled for this CPU
        (vectorised, one pass over memory; see :func:`run_cpu_loop`). The last two run on the
        CPU whatever the current device: they take NumPy arrays (``xp`` is not used) and
        refuse device arrays with ``DeviceError``. ``out`` (optional, float32 of the
        broadcast shape) receives the result: the C++ loop writes into it directly.
        """
        if mode in ("cpu", "emulator"):  # both run on the CPU: host arrays only
            xp = np
            arrays = [host_array(a, f"an input of {self.kernel.name} ({mode})") for a in arrays]
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        # reshaped: ascontiguousarray makes a 0-d array 1-d
        full = [xp.ascontiguousarray(xp.broadcast_to(a, shape)).reshape(shape) for a in arrays]
        if mode == "cpu":
            return run_cpu_loop(self.kernel, full, out=out)  # its checks: native.loop_arrays
        if out is not None:
            where = kernels.default_mode() if mode is None else mode
            _check_out(self.kernel.name, out, shape, where)  # before the kernel runs
        (result,) = kernels.fused(self.kernel, *full, mode=mode)
        if out is None:
            return result
        out[...] = result
        return out

    def one_dtype(self, arrays: Sequence) -> bool:
        """Does NumPy compute the whole body in the dtype of its result for inputs like these
        (booleans aside: comparisons, masks)? Only then may one expression in that dtype
        stand for it. ``int32 + float32`` is float64, ``int8 + 100`` stays int8 and ``mask *
        1.0`` is float64 in NumPy; one float32 expression would round, not wrap, or not
        promote. Asked of NumPy on one element of each input's dtype, once per dtypes."""
        key = tuple(type(a) if is_weak_value(a) else np.dtype(a.dtype) for a in arrays)
        if key not in self._dtypes_checked:
            examples = [a if is_weak_value(a) else np.ones(1, a.dtype) for a in arrays]
            self._dtypes_checked[key] = _one_dtype(self.body, self.params, examples)
        return self._dtypes_checked[key]

    @functools.cached_property
    def _dtypes_checked(self) -> dict:
        return {}

    def interpret(self, xp, *arrays):
        """Compute the body op by op (the unfused reference, and the fallback)."""
        return interpret(self.body, dict(zip(self.params, arrays)), xp)[self.body]

    @functools.cached_property
    def numexpr(self) -> NumexprProgram:
        """The CPU code: one numexpr expression."""
        return numexpr_program(self.params, self.body)

    @functools.cached_property
    def kernel(self) -> kernels.FusedElementwise:
        """The GPU code: a generated CUDA C kernel (see ``.kernel.source``)."""
        return cuda_kernel(self.params, self.body)

    # -- derivatives: built from the body, then placed on the real inputs ------------------
    def gradient(self, node, g, needs):
        seed = variable("g", self.body.shape, self.body.dtype)
        # an integer or boolean input (a cast, a mask) has none: its own rule gives zeros
        needs = [need and (p.dtype is None or p.dtype.kind in "fc")
                 for p, need in zip(self.params, needs)]  # fmt: skip
        wanted = [p for p, need in zip(self.params, needs) if need]
        partials = iter(rebuild(grad(self.body, wanted, seed=seed),
                                {**dict(zip(self.params, node.inputs)), seed: g}))  # fmt: skip
        return [next(partials) if need else None for need in needs]

    def jvp(self, node, *tangents):
        seeds = {
            p: variable(f"t{k}", p.shape, p.dtype)
            for k, (p, t) in enumerate(zip(self.params, tangents))
            if t is not None
        }
        if not seeds:
            return None
        tangent = jvp(self.body, seeds)
        replace = dict(zip(self.params, node.inputs))
        replace.update({seeds[p]: t for p, t in zip(self.params, tangents) if p in seeds})
        return rebuild([tangent], replace)[0]

    # -- cost: the body's flops; traffic is the default (inputs read once, output once) ---
    def flops(self, out_shape, *in_shapes):
        shapes = self._propagate(in_shapes)
        return sum(n.op.flops(shapes[n], *(shapes[i] for i in n.inputs)) for n in self.members())

    def members(self) -> list[Node]:
        """The original ops inside the fused node, in order."""
        return [n for n in topological_order([self.body]) if n.inputs and n not in self.params]

    def _propagate(self, shapes) -> dict:
        """The shape of every body node when the inputs have ``shapes``."""
        known = dict(zip(self.params, shapes))
        for node in topological_order([self.body]):
            if node in known:
                continue
            if not node.inputs:
                known[node] = node.shape
            else:
                ins = [known[i] for i in node.inputs]
                known[node] = None if None in ins else node.op.infer_shape(*ins)
        return known

    # -- display ---------------------------------------------------------------------------
    def formula(self, args: Sequence[str], pretty: bool = False) -> str:
        """The body written over ``args`` with infix precedence: ``v4 + (v1 + v2) * v3``
        (``pretty``: with the ops' glyphs, ``v4 + (v1 + v2) × v3``)."""
        text = {p: (a, 9) for p, a in zip(self.params, args)}
        for node in topological_order([self.body]):
            if node in text:
                continue
            if is_weak_scalar(node) or not node.inputs:
                text[node] = (node.name, 9)
                continue
            symbol, parts = node.op.symbol, [text[i] for i in node.inputs]
            glyph = node.op.glyph if pretty and node.op.glyph else symbol
            level = _DISPLAY.get(symbol) if len(parts) == 2 else None
            if symbol and len(parts) == 1:  # a prefix symbol binds tighter than any infix one
                a, pa = parts[0]
                text[node] = (f"{glyph}{a}" if pa == 9 else f"{glyph}({a})", 9)
            elif level is None:
                text[node] = (f"{node.op.name}({', '.join(t for t, _ in parts)})", 9)
            else:
                (a, pa), (b, pb) = parts
                left = a if pa >= level else f"({a})"
                right = b if pb > level or (pb == level and symbol in "+*") else f"({b})"
                text[node] = (f"{left} {glyph} {right}", level)
        return text[self.body][0]

    def label(self) -> str:
        return f"fused[{len(self.members())} ops]"

    def key(self) -> tuple:
        return (Fused, id(self))
