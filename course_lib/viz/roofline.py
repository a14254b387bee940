"""``plot_roofline``: measured kernels placed under the measured ceilings of this machine."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from ..perf import KernelPoint, Roofline


class RooflineFigure(Figure):
    """A matplotlib figure whose text form lists the points (rounded, so it is stable)."""

    summary = "roofline"

    def __repr__(self) -> str:
        return self.summary


def plot_roofline(points: Sequence[KernelPoint], roofline: Roofline, title: str = "") -> Figure:
    """Log-log roofline: attainable FLOP/s = min(peak, AI × bandwidth), and each kernel.

    The text form names the kernels in order of intensity and says which side of the
    ridge each one is on (memory- or compute-bound), not its noisy timings.
    """
    points = list(points)
    if not points:
        raise ValueError("plot_roofline needs at least one measured KernelPoint")
    for p in points:
        if not isinstance(p, KernelPoint):
            raise TypeError(f"plot_roofline takes KernelPoint values, got {type(p).__name__}")
    intensities = np.array([p.intensity for p in points])
    low = min(intensities.min(), roofline.ridge) / 4
    high = max(intensities.max(), roofline.ridge) * 4
    xs = np.geomspace(low, high, 200)
    fig = plt.figure(figsize=(6.8, 4.2), layout="constrained", FigureClass=RooflineFigure)
    plt.close(fig)
    ax = fig.add_subplot()
    ax.loglog(xs, roofline.attainable(xs) / 1e9, color="black", linewidth=2, label="roofline")
    ax.axvline(roofline.ridge, color="grey", linestyle=":", linewidth=1)
    for p in points:
        ax.loglog(p.intensity, p.flops_per_second / 1e9, "o", markersize=7, label=p.name)
    ax.set_xlabel("arithmetic intensity (FLOPs / byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title or f"Roofline of this machine ({roofline.describe()})", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    lines = [f"roofline with {len(points)} measured kernels (ridge between memory and compute):"]
    for p in sorted(points, key=lambda p: p.intensity):
        side = "memory-bound" if p.intensity < roofline.ridge else "compute-bound"
        lines.append(f"  {p.name}: AI {p.intensity:.3g} FLOPs/byte, {side}")
    fig.summary = "\n".join(lines)
    return fig
