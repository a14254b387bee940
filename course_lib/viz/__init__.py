"""Pictures: computational graphs and the backward algorithm step by step (graphviz)."""

from .figure import GraphFigure
from .graphs import draw_graph
from .steps import StepThrough, draw_step

__all__ = ["GraphFigure", "StepThrough", "draw_graph", "draw_step"]
