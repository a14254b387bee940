from .layout import plot_layout as plot_layout
