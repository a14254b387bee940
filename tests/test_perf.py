"""FLOP and traffic counts from graphs (the lecture's 1/3 and 3/5), ceilings, roofline."""

from fractions import Fraction

import numpy as np
import pytest

import course_lib as cl
from course_lib.errors import GraphError, ParameterError, ShapeError
from course_lib.passes import fuse_elementwise, merge_matmuls
from course_lib.perf import (
    KernelPoint,
    Roofline,
    arithmetic_intensity,
    best_seconds,
    flops_by_node,
    interleaved_medians,
    measure_bandwidth,
    measure_graph,
    measure_matmul_rate,
)
from course_lib.viz import plot_roofline

N = 1000


def vectors(names, dtype=np.float32):
    return [cl.variable(name, (N,), dtype) for name in names]


def test_vector_add_intensity_is_one_third():
    a, b = vectors("AB")
    report = arithmetic_intensity(a + b)
    assert report.intensity == Fraction(1, 3)
    assert (report.flops, report.elements, report.bytes) == (N, 3 * N, 12 * N)


def test_program_1_and_program_2_from_the_graphs():
    a, b, c, d = vectors("ABCD")
    e = d + (a + b) * c
    program_1, program_2 = arithmetic_intensity(e), arithmetic_intensity(fuse_elementwise(e))
    assert [op.intensity for op in program_1.ops] == [Fraction(1, 3)] * 3
    assert program_1.intensity == Fraction(1, 3) and program_1.elements == 9 * N
    assert program_2.intensity == Fraction(3, 5) and program_2.elements == 5 * N
    assert program_1.flops == program_2.flops == 3 * N
    assert program_1.bytes / program_2.bytes == pytest.approx(1.8)  # the byte model's speed-up
    assert "total" in program_1.table() and program_2.table().endswith("3/5")


def test_a_long_node_name_is_cut_so_the_op_label_stays_in_the_table():
    x = cl.variable("x", (N,), np.float32)
    chain = fuse_elementwise(((x * 0.5 + 0.5) * 0.5 + 0.5) * 0.5)
    row = arithmetic_intensity(chain).table().splitlines()[1]
    assert row[:28].endswith("… = fused[5 ops]") and row[:28].startswith("((((")
    short = arithmetic_intensity(x + x).table().splitlines()[1]
    assert short.startswith("(x+x) = add ")


def test_bytes_follow_the_dtype_and_weak_scalars():
    (x,) = vectors("x", np.float64)
    report = arithmetic_intensity(x * 2.0 - 1.0)
    assert report.elements == 2 * (2 * N + 1) and report.bytes == 8 * report.elements
    assert report.byte_intensity == pytest.approx(2 * N / report.bytes)


def test_matmul_counts_and_merged_qkv_has_higher_intensity():
    x = cl.variable("x", (64, 256), np.float32)
    ws = [cl.variable(f"W{k}", (256, 256), np.float32) for k in "qkv"]
    three = arithmetic_intensity([x @ w for w in ws])
    assert three.ops[0].flops == 2 * 64 * 256 * 256
    assert three.ops[0].bytes == 4 * (64 * 256 + 256 * 256 + 64 * 256)
    merged = arithmetic_intensity(merge_matmuls([x @ w for w in ws]))
    matmul = [c for c in merged.ops if c.node.op.name == "matmul"][0]
    assert matmul.flops == three.flops
    assert matmul.byte_intensity > three.byte_intensity  # x is read once, not three times
    slices = [c for c in merged.ops if c.node.op.name == "getitem"]
    assert len(slices) == 3 and all(c.bytes == 0 for c in slices)  # views move nothing


def test_views_move_nothing_and_gathers_copy():
    x = cl.variable("x", (4, 6), np.float32)
    assert arithmetic_intensity(cl.reshape(x, (6, 4))).bytes == 0
    assert arithmetic_intensity(cl.transpose(x)).bytes == 0
    assert arithmetic_intensity(x[[0, 2]]).elements == 2 * 2 * 6


def test_zero_traffic_has_zero_intensity_both_ways():
    report = arithmetic_intensity(cl.reshape(cl.variable("x", (4, 6), np.float32), (6, 4)))
    assert report.bytes == report.elements == report.flops == 0
    assert report.intensity == 0 and report.byte_intensity == 0.0


def test_one_walk_gives_every_op_its_flops_once():
    x, w = cl.variable("x", (4, 6), np.float32), cl.variable("w", (6, 3), np.float32)
    y = cl.exp(x) @ w
    outputs = [y + y, cl.sum(y), y]  # y is shared and an output: counted once
    by_node = flops_by_node(outputs)
    assert list(by_node) == [n for n in cl.topological_order(outputs) if n.inputs]
    assert by_node == {c.node: c.flops for c in arithmetic_intensity(outputs).ops}
    assert by_node[y] == 2 * 4 * 6 * 3 and sum(by_node.values()) == 24 + 144 + 12 + 12
    assert flops_by_node([]) == {} and flops_by_node(x) == {}  # leaves are not ops
    assert list(flops_by_node(cl.variable("e", (0, 3)) * 2.0).values()) == [0]  # empty arrays
    with pytest.raises(GraphError, match="graph nodes, got a ndarray"):
        flops_by_node([y, np.zeros(3)])


def test_timing_helpers_count_their_runs_and_take_any_keys():
    calls = []
    assert best_seconds(lambda: calls.append(1), repeats=4) >= 0.0
    assert len(calls) == 1 + 4  # one warm-up, then each repeat once (no warm-up per repeat)
    medians = interleaved_medians({("a", 1): lambda: None, ("b", 2): lambda: None}, repeats=2)
    assert set(medians) == {("a", 1), ("b", 2)}


def test_counting_needs_static_shapes_and_dtypes():
    with pytest.raises(ShapeError, match=r"shapes of \(x\+1\), x .*static shapes"):
        arithmetic_intensity(cl.variable("x") + 1.0)
    with pytest.raises(GraphError, match=r"dtype of \(x\+1\) is not known"):
        arithmetic_intensity(cl.variable("x", (3,)) + 1.0)
    with pytest.raises(ShapeError, match="itemsizes"):
        cl.Op().memory_bytes((3,), (3,), itemsizes=[4])


def test_roofline_ceilings_and_attainable_rate():
    roof = Roofline(bandwidth=50e9, peak_flops=200e9)
    assert roof.ridge == 4.0
    assert roof.attainable(1 / 12) == pytest.approx(50e9 / 12)
    assert roof.attainable(100.0) == 200e9
    with pytest.raises(ParameterError, match="Roofline: bandwidth must be finite and above 0"):
        Roofline(0.0, 1.0)


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf, -np.inf])
def test_ceilings_and_kernel_points_refuse_non_positive_and_non_finite_numbers(bad):
    with pytest.raises(ParameterError, match=r"Roofline: peak_flops must be finite and above 0"):
        Roofline(1e9, bad)
    for i, field in enumerate(("flops", "bytes", "seconds")):
        numbers = [1.0, 1.0, 1.0]
        numbers[i] = bad
        with pytest.raises(ParameterError, match=f"kernel point 'k': {field} must be finite"):
            KernelPoint("k", *numbers)


def test_ceilings_and_kernel_points_refuse_what_is_not_a_number():
    with pytest.raises(GraphError, match="Roofline: bandwidth must be a real number"):
        Roofline(True, 1e9)
    with pytest.raises(GraphError, match="kernel point 'k': seconds must be a real number"):
        KernelPoint("k", 1.0, 1.0, "1")
    assert KernelPoint("k", 2, np.float32(4.0), np.float64(0.5)).intensity == 0.5


def test_measured_ceilings_and_points_are_positive():
    assert measure_bandwidth(2**20, repeats=3) > 1e8
    assert measure_matmul_rate(64, repeats=3) > 1e6
    a, b = vectors("AB")
    feed = {a: np.ones(N, np.float32), b: np.ones(N, np.float32)}
    point = measure_graph("add", a + b, feed, repeats=3)
    assert point.intensity == pytest.approx(1 / 12) and point.flops_per_second > 0
    with pytest.raises(ValueError, match="at least 8 bytes"):
        measure_bandwidth(4)


def test_plot_roofline_text_is_stable():
    roof = Roofline(bandwidth=50e9, peak_flops=200e9)
    points = [KernelPoint("matmul", 2e9, 1e7, 0.02), KernelPoint("add", 1e6, 1.2e7, 3e-4)]
    fig = plot_roofline(points, roof)
    assert repr(fig).splitlines() == [
        "roofline with 2 measured kernels (ridge between memory and compute):",
        "  add: AI 0.0833 FLOPs/byte, memory-bound",
        "  matmul: AI 200 FLOPs/byte, compute-bound",
    ]
    assert len(fig.axes) == 1
    with pytest.raises(ValueError, match="at least one"):
        plot_roofline([], roof)
    with pytest.raises(TypeError, match="KernelPoint"):
        plot_roofline([(1.0, 2.0)], roof)
    with pytest.raises(ValueError, match="flops must be finite and above 0"):
        KernelPoint("empty", 0, 1, 1)
