"""Pictures: computational graphs, the backward algorithm step by step, traces and plots."""

from .access import plot_decode_steps, plot_warp_sectors
from .figure import GraphFigure
from .graphs import draw_graph
from .layout import plot_layout
from .player import StepThrough
from .plots import (
    plot_attention,
    plot_breakdown,
    plot_curve,
    plot_difference_errors,
    plot_grouped_bars,
    plot_stacked_bars,
)
from .roofline import plot_op_repeat, plot_roofline
from .steps import draw_step
from .tables import Table, adjoint_trace, evaluation_trace

__all__ = [
    "GraphFigure",
    "StepThrough",
    "Table",
    "adjoint_trace",
    "draw_graph",
    "draw_step",
    "evaluation_trace",
    "plot_attention",
    "plot_breakdown",
    "plot_curve",
    "plot_decode_steps",
    "plot_difference_errors",
    "plot_layout",
    "plot_op_repeat",
    "plot_roofline",
    "plot_grouped_bars",
    "plot_stacked_bars",
    "plot_warp_sectors",
]
