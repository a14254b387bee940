"""Rooflines: measured kernels placed under the measured ceilings of this machine
(``plot_roofline``), and the op-repeat experiment against them (``plot_op_repeat``)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..errors import GraphError
from ..perf import KernelPoint, OpRepeat, Roofline
from ..tables import counted
from .plots import CourseFigure


class RooflineFigure(CourseFigure):
    """A matplotlib figure whose text form lists the points (rounded, so it is stable)."""

    summary = "roofline"

    def __repr__(self) -> str:
        return self.summary


def plot_roofline(points: Sequence[KernelPoint], roofline: Roofline, title: str = "") -> Figure:
    """Log-log roofline: attainable FLOP/s = min(peak, AI × bandwidth), and each kernel.

    The ceilings are measured (a copy, a BLAS matmul), not the hardware's data-sheet peaks,
    and their legend says so; a kernel measured faster than they allow is ringed in red
    ("above the measured roof"). The text form names the kernels in order of intensity and
    says which side of the ridge each one is on (memory- or compute-bound), not their noisy
    timings.
    """
    _check_roofline(roofline, "plot_roofline")
    points = list(points)
    if not points:
        raise ValueError("plot_roofline needs at least one measured KernelPoint")
    for p in points:
        if not isinstance(p, KernelPoint):
            raise TypeError(f"plot_roofline takes KernelPoint values, got {type(p).__name__}")
    fig = plt.figure(figsize=(6.8, 4.2), layout="constrained", FigureClass=RooflineFigure)
    plt.close(fig)
    ax = fig.add_subplot()
    _ceilings(ax, roofline, [p.intensity for p in points])
    for p in points:
        ax.loglog(p.intensity, p.flops_per_second / 1e9, "o", markersize=7, label=p.name)
    _flag_above_roof(ax, roofline, points)
    ax.set_title(title or f"Roofline of this machine\n{roofline.describe()}", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    kernels = counted(len(points), "measured kernel")
    lines = [f"roofline with {kernels} (ridge between memory and compute):"]
    for p in sorted(points, key=lambda p: p.intensity):
        side = "memory-bound" if p.intensity < roofline.ridge else "compute-bound"
        lines.append(f"  {p.name}: AI {p.intensity:.3g} FLOPs/byte, {side}")
    fig.summary = "\n".join(lines)
    return fig


def plot_op_repeat(result: OpRepeat, roofline: Roofline) -> Figure:
    """The op-repeat experiment: time against k (left), and the kernels on the roofline (right).

    Left: fused and unfused times, the fused kernel's memory time (its bytes at the measured
    bandwidth) and arithmetic time (the same work in cache), with a dotted line at the first
    k whose arithmetic takes longer. Right: the machine's ceilings, the fused loop's
    arithmetic ceiling, the fused kernels climbing the bandwidth slope as k grows, and the
    unfused ones, all at 1/8 FLOP per byte; kernels measured faster than the ceilings allow
    are ringed in red ("above the measured roof").
    """
    if not isinstance(result, OpRepeat):
        raise TypeError(f"plot_op_repeat takes an OpRepeat, got {type(result).__name__}")
    _check_roofline(roofline, "plot_op_repeat")
    fig = plt.figure(figsize=(10, 4), layout="constrained", FigureClass=RooflineFigure)
    plt.close(fig)
    timing, roof = fig.subplots(1, 2)
    turn = result.turn(roofline)
    _time_against_k(timing, result, roofline, turn)
    _ceilings(roof, roofline, [p.intensity for p in result.fused])
    roof.axhline(result.loop_flops / 1e9, color="tab:green", linestyle="--", linewidth=1,
                 label="fused loop in cache (one core)")  # fmt: skip
    for name, points, style in (("fused", result.fused, "o-"), ("unfused", result.unfused, "o")):
        rates = [p.flops_per_second / 1e9 for p in points]
        roof.loglog([p.intensity for p in points], rates, style, label=name)
    for k, p in zip(result.ks, result.fused):
        roof.annotate(f"k={k}", (p.intensity, p.flops_per_second / 1e9), fontsize=7,
                      textcoords="offset points", xytext=(4, -10))  # fmt: skip
    _flag_above_roof(roof, roofline, [*result.fused, *result.unfused])
    roof.set_title("the fused kernels on the roofline", fontsize=9)
    roof.legend(fontsize=7, loc="lower right")
    bound = "every k memory-bound" if turn is None else f"compute-bound from k = {turn}"
    fig.summary = (
        f"op repeat, k = {', '.join(map(str, result.ks))}: fused and unfused times against k, "
        f"and the kernels on the roofline; the fused kernel is {bound}"
    )
    return fig


def _check_roofline(roofline, caller: str) -> None:
    if not isinstance(roofline, Roofline):
        raise GraphError(
            f"{caller}: roofline must be a Roofline (course_lib.perf.measure_roofline()), got a "
            f"{type(roofline).__name__}"
        )


def _flag_above_roof(ax: Axes, roofline: Roofline, points: Sequence[KernelPoint]) -> None:
    """Ring each kernel measured faster than ``roofline`` allows at its intensity, with one
    legend entry for all of them (rings, not text: the unfused op-repeat points share one
    intensity). The ceilings are measured, so such a point is shown, and said to be above."""
    above = [p for p in points if p.flops_per_second > roofline.attainable(p.intensity)]
    if above:
        ax.loglog([p.intensity for p in above], [p.flops_per_second / 1e9 for p in above], "o",
                  markersize=13, markerfacecolor="none", markeredgecolor="tab:red",
                  label="above the measured roof")  # fmt: skip


def _time_against_k(ax: Axes, result: OpRepeat, roofline: Roofline, turn: int | None) -> None:
    ks = np.array(result.ks)
    for name, points in (("fused (one kernel)", result.fused), ("unfused", result.unfused)):
        ax.loglog(ks, [p.seconds * 1e3 for p in points], "o-", label=name)
    ax.loglog(ks, np.array(result.memory_seconds(roofline)) * 1e3, "k--", linewidth=1,
              label="fused: bytes / measured bandwidth")  # fmt: skip
    ax.loglog(ks, [p.seconds * 1e3 for p in result.in_cache], "--", color="tab:green",
              linewidth=1, label="fused: same work in cache")  # fmt: skip
    if turn is not None:
        ax.axvline(turn, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="k, ops in the chain", ylabel="ms", title="time against k")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)


def _ceilings(ax: Axes, roofline: Roofline, intensities: Sequence[float]) -> None:
    """Draw the two measured ceilings over the intensities shown, and label the axes."""
    low = min(min(intensities), roofline.ridge) / 4
    high = max(max(intensities), roofline.ridge) * 4
    slope = np.geomspace(low, roofline.ridge, 100)
    ax.loglog(slope, slope * roofline.bandwidth / 1e9, color="black", linewidth=2,
              label="memory ceiling: measured copy bandwidth")  # fmt: skip
    ax.loglog([roofline.ridge, high], [roofline.peak_flops / 1e9] * 2, color="dimgrey",
              linewidth=2, label="matmul ceiling: measured BLAS, not peak")  # fmt: skip
    ax.axvline(roofline.ridge, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("arithmetic intensity (FLOPs / byte)")
    ax.set_ylabel("GFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
