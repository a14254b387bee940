"""Every per-op fact lives on its op: its GPU kernel hook, how its nodes are written in
pictures, its compute family and the LLaMA FLOP-table rows it computes. These tests fail if a
fact moves back into a table keyed by op names."""

import re
import types

import numpy as np
import pytest
from op_specs import subclasses

import course_lib as cl
from conftest import needs_gxx
from course_lib import passes
from course_lib.graph import Op, apply
from course_lib.kernels import dispatch
from course_lib.models import LlamaConfig, flops_table
from course_lib.models.compute import FAMILIES
from course_lib.models.optim import AdamMoment, AdamWUpdate
from course_lib.ops.attention import CausalSoftmax, SoftmaxGrad
from course_lib.ops.control import Switch
from course_lib.ops.elementwise import Exp
from course_lib.ops.linalg import MatMul
from course_lib.ops.nn import Softmax
from course_lib.ops.norms import RMSNorm, RMSNormGradW, RMSNormGradX
from course_lib.ops.rope import Rope, _tables
from course_lib.ops.shape import ScatterLike
from course_lib.viz.labels import definition

needs_emulator = needs_gxx("the CUDA emulator")


def _op_classes() -> list[type[Op]]:
    """Every subclass of Op defined so far (course_lib, its passes and its models)."""
    return subclasses(Op)


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# -- GPU kernels ----------------------------------------------------------------------------
@needs_emulator
def test_each_kernel_hook_computes_what_its_op_computes(rng):
    """The op's own hook, run in the emulator, equals its NumPy code (what a GPU runs)."""
    x, w = _f32(rng, 6, 40), _f32(rng, 40)
    a, b = _f32(rng, 5, 7), _f32(rng, 7, 3)
    q = _f32(rng, 2, 3, 7, 8)  # (batch, heads, positions, head_dim)
    cos, sin = _tables(np, 0, 7, 8, 10000.0, np.dtype(np.float32), False)
    cases = [  # op, the inputs of its compute, the arrays its kernel takes
        (Softmax(axis=-1), (x,), (x,)),
        (Softmax(axis=1), (x,), (x,)),
        (MatMul(), (a, b), (a, b)),
        (RMSNorm(1e-5), (x, w), (x, w)),
        (Rope(seq_axis=-2), (q,), (q, cos, sin)),
        (Rope(seq_axis=2, inverse=True), (q,), (q, cos, -sin)),
        (Rope(seq_axis=1), (q.swapaxes(1, 2),), (q.swapaxes(1, 2), cos, sin)),  # (B, T, H, d)
        (CausalSoftmax(0.3), (q,), (q,)),  # 7 queries, 8 keys
        (SoftmaxGrad(0.5), (x, x[::-1]), (x, x[::-1])),
        (RMSNormGradX(1e-5), (x[::-1], x, w), (x[::-1], x, w)),
        (RMSNormGradW(1e-5), (x[::-1], x, w), (x[::-1], x, w)),
        (AdamMoment(0.9, 1), (x, x[::-1]), (x, x[::-1])),
        (AdamMoment(0.95, 2), (x, x[::-1]), (x, x[::-1])),
    ]
    v, lr, step = np.abs(x[::-1]) + 0.1, np.array(3e-3), np.array(7)  # lr float64, step int64
    for decay in (0.0, 0.1):
        update = AdamWUpdate(0.9, 0.95, 1e-8, decay)
        cases.append((update, (x, x[::-1], v, lr, step), (x, x[::-1], v, lr, step)))
    for op, inputs, arrays in cases:
        expected = op.compute(np, *inputs)
        hooked = op.gpu_kernel(dispatch.Launcher("emulator"), *arrays)
        np.testing.assert_allclose(hooked, expected, rtol=1e-5, atol=1e-6, err_msg=op.label())
        routed = dispatch.kernel_result(op, *arrays, mode="emulator")
        np.testing.assert_array_equal(routed, hooked, err_msg=op.label())


@needs_emulator
def test_kernel_hooks_agree_on_nan_inf_and_empty_rows():
    x = np.array([[1, 2, np.nan, 0], [-np.inf, 0, 1, 2], [np.inf, 0, 1, 2], [-np.inf] * 4])
    x, w = x.astype(np.float32), np.ones(4, np.float32)
    launch = dispatch.Launcher("emulator")
    with np.errstate(all="ignore"):
        for op, arrays in [(Softmax(), (x,)), (RMSNorm(1e-5), (x, w))]:
            expected = op.compute(np, *arrays)
            np.testing.assert_allclose(op.gpu_kernel(launch, *arrays), expected, rtol=1e-6)
    empty = np.zeros((0, 4), np.float32)
    assert Softmax().gpu_kernel(launch, empty).shape == (0, 4)
    assert MatMul().gpu_kernel(launch, empty, np.zeros((4, 2), np.float32)).shape == (0, 2)


def test_kernel_hooks_decline_what_their_kernel_cannot_do(rng):
    """None (the op's own code runs) for other axes, ranks and dtypes; no kernel is launched,
    so this needs no compiler."""
    launch = dispatch.Launcher("emulator")
    x, q = _f32(rng, 4, 6), _f32(rng, 2, 3, 7, 8)
    assert Softmax(axis=0).gpu_kernel(launch, x) is None
    assert Softmax().gpu_kernel(launch, np.float32(1.0)) is None  # 0-d
    assert MatMul().gpu_kernel(launch, x[None], x.T[None]) is None  # batched
    assert RMSNorm().gpu_kernel(launch, np.float32(1.0), np.ones((), np.float32)) is None
    assert Rope(seq_axis=0).gpu_kernel(launch, q[0, 0, 0], q, q) is None  # no position axis
    for adjoint in (RMSNormGradX(), RMSNormGradW()):  # a broadcast g, a weight of another size
        assert adjoint.gpu_kernel(launch, x[:1], x, x[0]) is None, adjoint.name
        assert adjoint.gpu_kernel(launch, x, x, x[0, :5]) is None, adjoint.name
    assert dispatch.kernel_result(Softmax(), x.astype(np.float64), mode="emulator") is None
    assert dispatch.kernel_result(Softmax(), x.astype(np.float16), mode="emulator") is None
    assert dispatch.kernel_result(Exp(), x, mode="emulator") is None  # no kernel: Op's default


def test_run_on_gpu_follows_the_switches(monkeypatch):
    calls = []

    def kernel_result(op, *arrays, mode):
        calls.append((op.name, mode))
        return "kernel"

    monkeypatch.setattr(dispatch, "kernel_result", kernel_result)
    on_gpu = types.SimpleNamespace(__name__="cupy")  # what run_on_gpu knows of CuPy: its name
    x = np.ones((2, 2), np.float32)
    assert dispatch.run_on_gpu(Softmax(), np, x) is None  # NumPy: the op's own code
    assert dispatch.run_on_gpu(Softmax(), on_gpu, x) == "kernel"
    assert dispatch.run_on_gpu(MatMul(), on_gpu, x, x) is None  # off by default (cuBLAS)
    dispatch.use_kernel("matmul", True)
    try:
        assert dispatch.kernel_enabled("matmul")
        assert dispatch.run_on_gpu(MatMul(), on_gpu, x, x) == "kernel"
    finally:
        dispatch.use_kernel("matmul", False)
    dispatch.use_kernel("softmax", False)
    try:
        assert dispatch.run_on_gpu(Softmax(), on_gpu, x) is None
    finally:
        dispatch.use_kernel("softmax", True)
    assert dispatch.run_on_gpu(Exp(), on_gpu, x) is None  # no hook, no switch
    assert calls == [("softmax", "gpu"), ("matmul", "gpu")]


def test_the_kernel_switches_are_the_ops_with_a_hook():
    hooked = sorted({cls.name for cls in _op_classes() if "gpu_kernel" in vars(cls)})
    assert hooked == ["adam_moment", "adamw_update", "causal_softmax", "matmul", "rms_norm",
                      "rms_norm_grad_w", "rms_norm_grad_x", "rope", "softmax",
                      "softmax_grad"]  # fmt: skip
    with pytest.raises(KeyError, match=re.escape(f"hooks exist for {hooked}")):
        dispatch.use_kernel("conv2d")
    enabled = [dispatch.kernel_enabled(name) for name in hooked]
    assert enabled == [True, True, True, False, True, True, True, True, True, True]


# -- pictures ---------------------------------------------------------------------------------
X, Y = cl.variable("x", (2, 3)), cl.variable("y", (2, 3))

WRITTEN = [  # node, how it is written over its inputs a, b, c
    (X * Y, "a × b"),
    (X - Y, "a − b"),
    (X + Y, "a + b"),
    (X / Y, "a / b"),
    (-X, "−a"),
    (X < Y, "a < b"),
    (X @ cl.transpose(Y), "a @ b"),
    (X**2, "a²"),
    (X**3, "a^3"),
    (X**-0.5, "a^-0.5"),
    (cl.log(X), "ln(a)"),
    (cl.exp(X), "exp(a)"),
    (cl.sum_n(X, Y, X), "a + b + c"),
    (cl.ones_like(X), "1"),
    (cl.zeros_like(X), "zeros_like(a, value=0)"),
    (X[0, 1:], "a[0, 1:]"),
    (apply(ScatterLike((0, slice(1, None))), X[0, 1:], X), "scatter[0, 1:](a into b)"),
    (cl.sum(X, axis=1), "sum(a, axis=1)"),  # keepdims=False is left out
    (apply(Switch(True), X, cl.variable("p", ())), "switch(a, b) → true"),
    (apply(Switch(False), X, cl.variable("p", ())), "switch(a, b) → false"),
]


@pytest.mark.parametrize("node, text", WRITTEN, ids=[t for _, t in WRITTEN])
def test_each_op_writes_its_nodes(node, text):
    assert node.op.written(["a", "b", "c"][: len(node.inputs)]) == text


def test_a_fused_node_writes_its_body_with_glyphs():
    (fused,) = [n for n in cl.topological_order(passes.fuse_elementwise(-(X - Y) * X)) if n.inputs]
    assert fused.op.written(["a", "b"]) == "fused: −(a − b) × a"
    assert fused.op.formula(["a", "b"]) == "-(a - b) * a"


def test_pictures_write_a_node_the_way_its_op_says():
    class Halve(Op):
        name = "halve"

        def written(self, args):
            return f"{args[0]}/2"

    node = apply(Halve(), X)
    assert definition(node, {X: "v1", node: "v2"}) == "v2 = v1/2"
    assert definition(X, {X: "v1"}) == "v1 = x"  # a variable is written as its name


# -- compute families and FLOP-table rows -------------------------------------------------------
def test_every_flop_table_row_is_declared_by_the_ops_that_compute_it():
    declared = {row for cls in _op_classes() for row in cls.flop_rows}
    terms = {row.term for row in flops_table(LlamaConfig.tiny(), 1, 8).rows}
    assert declared == terms - {"embedding"}  # a gather: no op's FLOPs


def test_the_families_are_the_ones_ops_declare():
    declared = {cls.family for cls in _op_classes()} - {None}
    assert declared == set(FAMILIES)
    assert MatMul.family == "products" and Exp.family is None
