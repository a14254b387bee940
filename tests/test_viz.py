"""Graph pictures: deterministic DOT, the step-through, and life without ``dot``."""

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from IPython.core.formatters import DisplayFormatter

import course_lib as cl
from course_lib.viz import StepThrough, draw_graph, draw_step

SCRIPT = textwrap.dedent(
    """
    import course_lib as cl
    from course_lib.viz import draw_graph, draw_step
    v1 = cl.variable("v1", shape=())
    v2 = cl.exp(v1)
    v3 = v2 + 1
    v4 = v2 * v3
    grads, trace = cl.gradient_trace(v4, v1)
    print(draw_graph(v4, {"v1": 0.5}, backward=grads, trace=trace).source)
    print(draw_graph(v4, {"v1": 0.5}, tangents={v1: 1.0}).source)
    print(draw_step(trace, 4, feed={"v1": 0.5}).source)
    """
)


def _run(script, env=None):
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )


def test_dot_is_byte_identical_across_processes(worked_example):
    first, second = _run(SCRIPT), _run("x = [object() for _ in range(999)]\n" + SCRIPT)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert "0x" not in first.stdout  # no memory addresses
    v1, v4, grads, trace = worked_example
    expected = [
        draw_graph(v4, {"v1": 0.5}, backward=grads, trace=trace).source,
        draw_graph(v4, {"v1": 0.5}, tangents={v1: 1.0}).source,
        draw_step(trace, 4, feed={"v1": 0.5}).source,
    ]
    assert first.stdout.strip() == "\n".join(expected).strip()


def test_draw_graph_labels_stages_and_values(worked_example):
    v1, v4, grads, _ = worked_example
    fig = draw_graph(v4, {v1: 0.5}, backward=grads)
    text = repr(fig)
    assert text.startswith("graph with 9 nodes (4 forward, 5 backward)")
    assert "v̄2 = v̄(2→4) + v̄3" in text  # named by the run that built it, without a trace
    assert "v4 = v2 × v3" in text and "= 4.367" in fig.source
    assert "dashed" in fig.source  # backward style
    assert fig.svg().lstrip().startswith("<?xml")


def _cluster_members(source: str) -> dict[str, set[str]]:
    """{stage: ids of the nodes declared in its cluster} from DOT text."""
    members = {}
    for stage, body in re.findall(r"subgraph cluster_(\w+) \{(.*?)\n\t\}", source, re.S):
        members[stage] = set(re.findall(r"^\t\t(n\d+) \[", body, re.M))
    return members


def test_clusters_put_each_stage_in_its_own_labelled_box(worked_example):
    v1, v4, grads, trace = worked_example
    update = v1 - 0.1 * grads
    plain = draw_graph(v4, backward=grads, update=update, trace=trace, rankdir="TB")
    boxed = draw_graph(v4, backward=grads, update=update, trace=trace, rankdir="TB", clusters=True)
    members = _cluster_members(boxed.source)
    assert list(members) == ["forward", "backward", "update"]  # no empty tangent box
    assert members["forward"] == {"n0", "n1", "n2", "n3"}  # v1 (a variable) … v4
    every = set(re.findall(r"^\t(n\d+) \[", plain.source, re.M))
    last = len(every) - 1
    assert members["update"] == {f"n{last - 1}", f"n{last}"}  # 0.1 × v̄1 and v1 − that
    assert sum(map(len, members.values())) == len(every)  # each node in exactly one box
    assert set().union(*members.values()) == every
    for stage in members:
        assert f"label={stage}" in boxed.source
    assert repr(boxed) == repr(plain) and "rankdir=TB" in boxed.source
    assert "cluster" not in plain.source
    assert boxed.svg().lstrip().startswith("<?xml")
    tangents = _cluster_members(draw_graph(v4, tangents={v1: 1.0}, clusters=True).source)
    assert list(tangents) == ["forward", "tangent"] and tangents["forward"] == members["forward"]


def test_an_unknown_layout_direction_is_refused(worked_example):
    _, v4, _, _ = worked_example
    with pytest.raises(cl.ParameterError, match="rankdir must be one of"):
        draw_graph(v4, rankdir="top-down")


def test_draw_step_highlights_current_node_edge_and_new_partial(worked_example):
    *_, trace = worked_example
    fig = draw_step(trace, 4, feed={"v1": 0.5})  # i = 3, k = 2
    assert repr(fig).splitlines() == [
        "gradient(out) step 5/8: i = 3, k = 2: append v̄(2→3) = v̄3·∂v3/∂v2 = v̄3 = 1.649 "
        "to node_to_grad[2] — reused: no new node (v̄(2→3) is the node v̄3)",
        "node_to_grad = {4: [v̄4], 3: [v̄(3→4)], 2: [v̄(2→4), v̄(2→3)]}",
    ]
    src = fig.source
    assert 'f1 -> f2 [color="#dc2626" penwidth=3]' in src  # the edge k=2 -> i=3
    assert "v̄(2→3) = v̄3" in src and 'style="rounded,filled,dotted"' in src  # reused, not new
    assert 'fillcolor="#fde047"' in draw_step(trace, 1, feed={"v1": 0.5}).source  # new: yellow
    assert "v̄(2→3) = 1.649" in src  # numeric node_to_grad entry
    assert "v4 = v2 × v3" in src and 'fillcolor="#e5e7eb"' in src  # v4 is done: grey


def test_draw_step_rejects_bad_step(worked_example):
    *_, trace = worked_example
    with pytest.raises(IndexError, match="8 steps"):
        draw_step(trace, 8)


def test_step_through_is_one_self_contained_html_output(worked_example):
    *_, trace = worked_example
    player = StepThrough(trace, feed={"v1": 0.5}, interval_ms=700)
    assert len(player) == 8
    bundle, _ = DisplayFormatter().format(player)
    assert set(bundle) == {"text/plain", "text/html"}  # no widget view to outrank the page
    assert bundle["text/plain"].splitlines()[0] == "StepThrough: 8 steps of gradient(out)"
    page = bundle["text/html"]
    assert page == player.html() and 'data-interval="700"' in page
    frames = re.findall(
        r'<figure class="cl-step"[^>]*><figcaption>(.*?)</figcaption>(.*?)</figure>', page, re.S
    )
    assert [picture for _, picture in frames] == player.pages  # each step drawn once
    assert [picture.count("<svg") for picture in player.pages] == [1] * 8
    assert frames[4][0].startswith("<b>step 5 / 8</b> &#160; <code>i = 3, k = 2: append v̄(2→3)")
    assert frames[1][0].endswith(  # the step worked out with the forward values, v1 = 0.5
        "v̄(2→4) = v̄4·∂v4/∂v2 = v̄4 × v3 = 1.000 × 2.649 = 2.649 to node_to_grad[2]</code>"
    )
    assert (
        bundle["text/plain"].splitlines()[2].endswith("= 1.000 × 2.649 = 2.649 to node_to_grad[2]")
    )
    assert ">[v̄(2→4) = 2.649, <b style=\"color:#b45309\">v̄(2→3) = 1.649</b>]<" in (
        player.pages[4]  # node_to_grad beside the picture, the entry just appended in bold
    )
    scripts = re.findall(r"<script(.*?)>(.*?)</script>", page, re.S)
    assert len(scripts) == 1 and scripts[0][0] == ""  # inline: nothing to fetch
    assert page.endswith("</script></div>")  # the script finds the player as its parent
    assert "http" not in scripts[0][1] and "require(" not in scripts[0][1]
    assert ' id="' not in page  # a page shows many players and pictures: no id can repeat


def _chain_trace(ops: int):
    x = cl.variable("x", shape=())
    y = x
    for i in range(ops):
        y = [cl.sin, cl.exp, lambda v: v * 0.5, cl.cos][i % 4](y)
    return cl.gradient_trace(y, [x])[1], x


def test_step_through_work_grows_linearly_with_its_steps(monkeypatch):
    """Graphviz runs three times (sizes, one layout, one drawing) whatever the number of
    steps, and each label is written once for the steps that show it: a layout per step
    took 3.6 s for 81 steps, 19 s for 121, 216 s for 161."""
    from graphviz.backend import execute

    from course_lib.viz import steps

    calls = {"graphviz": 0, "labels": 0}
    run_check, node_text = execute.run_check, steps.node_text

    def counted(key, function):
        def call(*args, **kwargs):
            calls[key] += 1
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(execute, "run_check", counted("graphviz", run_check))
    monkeypatch.setattr(steps, "node_text", counted("labels", node_text))
    work = {}
    for ops in (8, 32):
        trace, x = _chain_trace(ops)
        calls.update(graphviz=0, labels=0)
        player = StepThrough(trace, feed={x: 0.3})
        assert [page.count("<svg") for page in player.pages] == [1] * len(trace.steps)
        work[len(trace.steps)] = dict(calls)
    (short, few), (long, many) = work.items()
    assert (short, long) == (17, 65)
    assert few["graphviz"] == many["graphviz"] == 3
    assert many["labels"] / few["labels"] < 1.5 * long / short  # per step: ~2 labels


def test_step_through_keeps_every_node_where_it_is(worked_example):
    *_, trace = worked_example
    pages = StepThrough(trace, feed={"v1": 0.5}).pages
    for label in ["v2 = exp(v1)", "v3 = v2 + 1", "v4 = v2 × v3", "v̄4 = 1"]:
        at = rf'x="([\d.-]+)" y="([\d.-]+)"[^>]*>{re.escape(label)}<'
        places = {re.search(at, page) for page in pages}
        places = {m.groups() for m in places if m}
        assert len(places) == 1, (label, places)  # one place, in every step that shows it


def _node_texts(svg: str, named: str = r"[^<]*") -> list[str]:
    """The text lines of the nodes (whose title matches ``named``) of an SVG, sorted."""
    nodes = re.findall(rf'class="node">\s*<title>{named}</title>(.*?)</g>', svg, re.S)
    return sorted(t for node in nodes for t in re.findall(r"<text[^>]*>(.*?)</text>", node))


def test_each_step_shows_the_nodes_draw_step_draws(worked_example):
    *_, trace = worked_example
    player = StepThrough(trace, feed={"v1": 0.5})
    for step, page in enumerate(player.pages):
        drawn = draw_step(trace, step, feed={"v1": 0.5}).svg()
        assert _node_texts(page) == _node_texts(drawn, r"[fb]\d+"), step  # not the panels
    assert 'background:#fee2e2">v3:</td>' in player.pages[4]  # node i = 3 in node_to_grad
    assert player.pages[0].count("background:#fde047") == 2  # its two lines of pseudo-code


def test_without_dot_a_clear_message_and_the_source():
    script = SCRIPT.split("print(")[0] + textwrap.dedent(
        """
        fig = draw_step(trace, 2)
        print(fig._repr_mimebundle_()["text/plain"])
        print("HTML:", "conda install" in fig.html())
        from course_lib.viz import StepThrough
        pages = StepThrough(trace, {"v1": 0.5}).pages
        print("PLAYER:", [("conda install" in p, "v̄(3→4) = 1.649" in p) for p in pages])
        """
    )
    env = {**os.environ, "PATH": "/nonexistent"}
    result = _run(script, env)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    out = result.stdout
    hints = [
        "Graphviz's 'dot' program is not installed",
        "conda install -c conda-forge graphviz",
        "apt-get install graphviz",
        "brew install graphviz",
        "digraph {",
    ]
    for hint in hints:
        assert hint in out
    assert "HTML: True" in out
    assert "PLAYER: " + str([(True, False)] * 2 + [(True, True)] * 6) in out  # and the panels


def test_large_graphs_are_refused_with_advice():
    x = cl.variable("x")
    y = x
    for _ in range(30):
        y = cl.sin(y)
    with pytest.raises(cl.GraphError, match="max_nodes=10"):
        draw_graph(y, max_nodes=10)


def test_array_values_are_summarised():
    x = cl.variable("x", shape=(2, 3))
    fig = draw_graph(cl.sum(x * 2.0), {x: np.ones((2, 3))})
    assert "shape 2×3" in fig.source and "= 12.000" in fig.source
