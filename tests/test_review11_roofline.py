"""Review 11 of the roofline and counting helpers: broadcast views counted at the memory they
read, points above the roof labelled, and the emulator profile's scaling and bound checked."""

import os

import numpy as np
import pytest

import course_lib as cl
from course_lib.errors import GraphError, ParameterError
from course_lib.kernels import emulator, launch, profile
from course_lib.perf import KernelPoint, Roofline, arithmetic_intensity
from course_lib.viz import plot_roofline

needs_emulator = pytest.mark.skipif(  # CI has g++: fail there rather than skip
    not emulator.emulator_available() and not os.environ.get("CI"),
    reason="the CUDA emulator needs g++ on PATH",
)


def test_an_explicit_broadcast_reads_its_source_once_as_an_implicit_one_does():
    """``x + broadcast_to(v, x.shape)`` charged the add 128 loads of the stride-0 view; the
    same kernel written ``x + v`` loads v's 16 elements (the course's "one load, not 1000")."""
    x = cl.variable("x", (8, 16), np.float32)
    v = cl.variable("v", (16,), np.float32)
    implicit = arithmetic_intensity(x + v)
    explicit = arithmetic_intensity(x + cl.broadcast_to(v, (8, 16)))
    assert implicit.elements == 128 + 16 + 128 and implicit.bytes == 4 * implicit.elements
    assert (explicit.flops, explicit.elements, explicit.bytes) == (
        implicit.flops, implicit.elements, implicit.bytes)  # fmt: skip
    s = cl.variable("s", (), np.float32)
    scaled = arithmetic_intensity(cl.broadcast_to(cl.broadcast_to(s, (10,)), (100, 10)) * x[0, 0])
    assert scaled.elements == 1 + 1 + 1000 and scaled.flops == 1000
    b, w = cl.variable("b", (3, 8, 16), np.float32), cl.variable("w", (16, 4), np.float32)
    batched = arithmetic_intensity(b @ cl.broadcast_to(w, (3, 16, 4)))
    assert batched.bytes == arithmetic_intensity(b @ w).bytes == 4 * (3 * 128 + 64 + 3 * 32)
    assert batched.flops == 2 * 3 * 8 * 4 * 16


def test_hand_counts_of_each_op_family():
    """matmul 2mnk, elementwise one per element, a reduction one per input element, softmax
    3 per element (the course's convention), bytes by dtype."""
    x, w = cl.variable("x", (8, 16), np.float32), cl.variable("w", (16, 4), np.float32)
    mm = arithmetic_intensity(x @ w)
    assert (mm.flops, mm.bytes) == (2 * 8 * 4 * 16, 4 * (128 + 64 + 32))
    assert mm.byte_intensity == pytest.approx(1024 / 896)
    h = cl.variable("h", (8, 16), np.float16)
    assert arithmetic_intensity(h + h).bytes == 2 * 3 * 128
    assert arithmetic_intensity(cl.sum(x, axis=1)).flops == 128
    soft = arithmetic_intensity(cl.softmax(x))
    assert (soft.flops, soft.bytes) == (3 * 128, 4 * 2 * 128)
    flags = cl.variable("flags", (8, 16), np.bool_)
    assert arithmetic_intensity(cl.sum(flags)).bytes == 128 + 8  # bools in, an int64 out


def test_a_point_above_the_measured_roof_is_labelled_not_hidden():
    roof = Roofline(bandwidth=50e9, peak_flops=200e9)
    above = KernelPoint("copy beats the copy", 1e6, 1.2e7, 1e-4)  # 10 GFLOP/s at AI 1/12
    below = KernelPoint("add", 1e6, 1.2e7, 3e-4)
    assert above.flops_per_second > roof.attainable(above.intensity)
    fig = plot_roofline([above, below], roof)
    (ax,) = fig.axes
    rings = [line for line in ax.get_lines() if line.get_label() == "above the measured roof"]
    assert len(rings) == 1
    assert list(rings[0].get_xdata()) == [above.intensity]
    assert list(rings[0].get_ydata()) == [above.flops_per_second / 1e9]
    assert "above the measured roof" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert above.flops_per_second / 1e9 <= ax.get_ylim()[1]  # on the plot, not clipped
    assert "above" not in repr(fig)  # the text form stays free of timings
    quiet = plot_roofline([below], roof).axes[0]
    assert all(line.get_label() != "above the measured roof" for line in quiet.get_lines())


@needs_emulator
@pytest.mark.parametrize("factor", [0, -1, 2.5, True])
def test_scaled_refuses_a_factor_that_is_not_a_count_of_copies(factor):
    with profile() as p:
        launch.vector_add(np.ones(256, np.float32), np.ones(256, np.float32), mode="emulator")
    with pytest.raises((ParameterError, GraphError), match="Profile.scaled: factor"):
        p.scaled(factor)


@needs_emulator
def test_scaled_says_it_over_counts_sectors_that_blocks_share():
    """4x the blocks of a tiled matmul read the same rows of A: the larger problem touches
    fewer distinct sectors than 4x the small one's, as the docstring now says."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 32, 32), dtype=np.float32)
    with profile() as small:
        launch.matmul_tiled(a, b, mode="emulator")
    with profile() as large:
        launch.matmul_tiled(a, np.tile(b, 4), mode="emulator")
    scaled = small.scaled(4)
    assert scaled.launches[0].grid == large.launches[0].grid
    assert scaled.global_loads == large.global_loads and scaled.flops == large.flops
    assert scaled.dram_bytes > large.dram_bytes
    assert "too high" in type(small).scaled.__doc__


@needs_emulator
def test_the_bound_of_a_profile_of_no_launch_is_an_error_not_compute():
    with profile() as p:
        launch.vector_add(np.ones(0, np.float32), np.ones(0, np.float32), mode="emulator")
    assert p.launches == [] and p.predicted_seconds("A100") == 0
    with pytest.raises(ParameterError, match="no launch was counted"):
        p.bound("A100")


@pytest.mark.parametrize("itemsize", [4, 16, 64, 96, 128])
def test_sectors_touched_counts_every_sector_a_wide_read_spans(itemsize):
    """Only each read's first and last sector were counted: a 96-byte read at 0 touched 2,
    not 3 (notebook 07's warp picture shaded 96 sectors and labelled the row 64)."""
    from course_lib.kernels.analysis import SECTOR_BYTES, sectors_touched, warp_addresses

    for stride in (1, 2, 3):
        reads = warp_addresses(stride, itemsize)
        spanned = {byte // SECTOR_BYTES for a in reads for byte in range(a, a + itemsize)}
        assert sectors_touched(reads, itemsize) == len(spanned)
