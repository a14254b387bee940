"""The op-repeat experiment: k chained ops, fused and unfused, against the roofline."""

import numpy as np
import pytest

import course_lib as cl
from conftest import needs_gxx
from course_lib.errors import GraphError, ParameterError, ShapeError
from course_lib.passes import Fused, fuse_elementwise
from course_lib.perf import (
    KernelPoint,
    OpRepeat,
    Roofline,
    arithmetic_intensity,
    chained_ops,
    measure_op_repeat,
)
from course_lib.viz import plot_op_repeat, plot_roofline

needs_compiler = needs_gxx("the fused C++ loop")
N = 1000


@pytest.mark.parametrize("k", [1, 2, 3, 64])
def test_the_chain_counts_k_flops_and_fusion_leaves_one_kernel_of_8_bytes_per_element(k):
    x = cl.variable("x", (N,), np.float32)
    unfused, fused = chained_ops(x, k), fuse_elementwise(chained_ops(x, k))
    assert isinstance(fused.op, Fused) == (k > 1)  # one op: nothing to fuse
    for report, kernels in ((arithmetic_intensity(unfused), k), (arithmetic_intensity(fused), 1)):
        assert report.flops == k * N and len(report.ops) == kernels
        assert report.bytes == 8 * N * kernels + 4 * (k if kernels == k else 0)  # + weak ½s


@needs_compiler
def test_the_fused_loop_computes_what_the_ops_compute_bit_for_bit():
    x = np.random.default_rng(1).standard_normal(N, dtype=np.float32) * 1e3
    x[:4] = [np.inf, -np.inf, np.nan, -0.0]
    node = cl.variable("x", (N,), np.float32)
    for k in (2, 7, 64):
        fused = fuse_elementwise(chained_ops(node, k))
        expected = chained_ops(x, k)
        assert expected.dtype == np.float32
        np.testing.assert_array_equal(fused.op.run_kernel(np, x, mode="cpu"), expected)
        np.testing.assert_array_equal(cl.evaluate(chained_ops(node, k), {node: x}), expected)


def test_out_receives_every_op_and_values_stay_normal():
    x = np.random.default_rng(2).standard_normal(N, dtype=np.float32) * 1e30
    out = np.full_like(x, np.nan)
    assert chained_ops(x, 64, out) is out
    np.testing.assert_array_equal(out, chained_ops(x, 64))
    assert np.all(np.isfinite(out)) and np.all(np.abs(out) >= np.finfo(np.float32).tiny)
    assert np.array_equal(chained_ops(x, 0), x) and chained_ops(x, 0) is x
    in_place = x.copy()
    chained_ops(in_place, 5, in_place)  # aliasing: each op reads what the last one wrote
    np.testing.assert_array_equal(in_place, chained_ops(x, 5))
    with pytest.raises(GraphError, match="np.multiply cannot compute on node x"):
        chained_ops(cl.variable("x", (3,), np.float32), 1, out=out)
    with pytest.raises(ParameterError, match="chained_ops: k counts ops"):
        chained_ops(x, -1)
    with pytest.raises(GraphError, match="chained_ops: k must be an integer"):
        chained_ops(x, 2.0)


def synthetic(in_cache_seconds, seconds=1e-3):
    """An OpRepeat with ks 1..64, 8 bytes per element fused, and the given in-cache times."""
    ks = (1, 2, 4, 8, 16, 32, 64)
    fused = tuple(KernelPoint(f"fused k={k}", k * N, 8 * N, seconds) for k in ks)
    unfused = tuple(KernelPoint(f"unfused k={k}", k * N, 8 * k * N, seconds) for k in ks)
    cached = tuple(
        KernelPoint(f"in cache k={k}", k * N, 8 * N, t) for k, t in zip(ks, in_cache_seconds)
    )
    return OpRepeat(ks, fused, unfused, cached)


def test_the_turn_is_the_first_k_whose_arithmetic_outlasts_its_bytes():
    roof = Roofline(bandwidth=8e9, peak_flops=1e12)  # 8 N bytes take 1 µs
    arithmetic = [k * N / 8e9 for k in (1, 2, 4, 8, 16, 32, 64)]  # the loop: 8 GFLOP/s
    result = synthetic(arithmetic)
    assert result.memory_seconds(roof) == pytest.approx([1e-6] * 7)
    assert result.loop_flops == pytest.approx(8e9)
    assert result.turn(roof) == 16  # k = 8 ties with its bytes, k = 16 is the first past
    assert synthetic([t / 1e6 for t in arithmetic]).turn(roof) is None  # never compute-bound
    assert synthetic([t * 1e6 for t in arithmetic]).turn(roof) == 1  # compute-bound at once
    noisy = [arithmetic[0], 1.0, *arithmetic[2:]]  # k = 2 slow in cache: a busy moment
    assert synthetic(noisy).turn(roof) == 16
    slow_long_chains = arithmetic[:4] + [2 * t for t in arithmetic[4:]]
    assert synthetic(slow_long_chains).loop_flops == pytest.approx(8e9)  # the best rate


@needs_compiler
def test_measure_op_repeat_counts_and_times_every_k():
    result = measure_op_repeat(ks=(1, 2, 4), n=2**12, repeats=1)
    assert result.ks == (1, 2, 4) and result.loop_flops > 0
    for fused, cached in zip(result.fused, result.in_cache):  # the same work, counted alike
        assert (cached.flops, cached.bytes) == (fused.flops, fused.bytes)
    assert [p.flops for p in result.fused] == [k * 2**12 for k in result.ks]
    assert [p.name for p in result.unfused] == ["unfused k=1", "unfused k=2", "unfused k=4"]
    assert [p.intensity for p in result.fused[1:]] == [2 / 8, 4 / 8]
    assert all(p.intensity == pytest.approx(1 / 8, rel=1e-3) for p in result.unfused)
    assert all(p.seconds > 0 for p in result.fused + result.unfused)


@pytest.mark.parametrize(
    ("ks", "n", "error"),
    [
        ((), 8, ParameterError),
        ((2, 1), 8, ParameterError),
        ((1, 1), 8, ParameterError),
        ((1, 65), 8, ParameterError),
        ((0, 1), 8, ShapeError),
        ((1.5,), 8, ShapeError),
        ((1,), 0, ShapeError),
        ((1,), np.nan, ShapeError),
    ],
)
def test_measure_op_repeat_refuses_bad_chains_and_sizes(ks, n, error):
    with pytest.raises(error, match="measure_op_repeat"):
        measure_op_repeat(ks=ks, n=n, repeats=1)


def test_plots_say_the_compute_ceiling_is_measured_blas_not_peak():
    roof = Roofline(bandwidth=8e9, peak_flops=64e9)
    assert "measured BLAS, not peak" in roof.describe()
    fig = plot_op_repeat(synthetic([k * N / 8e9 for k in (1, 2, 4, 8, 16, 32, 64)]), roof)
    assert repr(fig) == (
        "op repeat, k = 1, 2, 4, 8, 16, 32, 64: fused and unfused times against k, and the "
        "kernels on the roofline; the fused kernel is compute-bound from k = 16"
    )
    timing, roofline_axes = fig.axes
    ceiling = "matmul ceiling: measured BLAS, not peak"
    assert ceiling in roofline_axes.get_legend_handles_labels()[1]
    assert timing.get_xlabel() == "k, ops in the chain"
    points = [KernelPoint("add", 1e6, 1.2e7, 3e-4)]
    (axes,) = plot_roofline(points, roof).axes
    assert ceiling in axes.get_legend_handles_labels()[1] and "not peak" in axes.get_title()
    with pytest.raises(TypeError, match="OpRepeat"):
        plot_op_repeat(points, roof)
