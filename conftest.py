"""Repository-wide pytest configuration.

Notebook outputs (nbval): compare the text of every output, but not rendered pictures.
Graphviz SVG and HTML renderings differ between Graphviz versions and fonts; every picture
we draw also has a deterministic ``text/plain`` summary, and that is what nbval compares.
"""


def pytest_collectstart(collector):
    if getattr(collector, "fspath", None) is not None and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("image/svg+xml", "text/html")
