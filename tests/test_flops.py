"""FLOP table, training breakdown and graph FLOP counts (course_lib.models.flops)."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.models import LlamaConfig
from course_lib.models.flops import (
    COURSE_LIB,
    GROUPS,
    LECTURE,
    FlopConvention,
    attention_overtakes_mlp,
    compare_with_graph,
    count_flops,
    flops_table,
    training_flops,
)
from course_lib.models.llama import Llama

LLAMA2_7B = LlamaConfig.llama2_7b()
SMALL_GQA = LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48,
                        vocab_size=50, max_seq_len=16)


def lecture_total(c: LlamaConfig, b: int, s: int) -> int:
    """The lecture's closed form N·(6bsh² + 4bs²h + 3bs²n + 2bsh²) + N·6bshi + 2bshv."""
    h, n, i, v, N = c.dim, c.n_heads, c.ffn_dim, c.vocab_size, c.n_layers
    return (N * (6 * b * s * h**2 + 4 * b * s**2 * h + 3 * b * s**2 * n + 2 * b * s * h**2)
            + N * 6 * b * s * h * i + 2 * b * s * h * v)


def test_llama2_7b_forward_is_63_tflops():
    table = flops_table(LLAMA2_7B, 1, 4096)
    assert table.total == pytest.approx(6.3e13, rel=0.01)


@pytest.mark.parametrize("b, s", [(1, 4096), (2, 128), (3, 17)])
def test_big_rows_are_the_lectures_closed_form_and_the_small_rows_are_the_rest(b, s):
    table = flops_table(LLAMA2_7B, b, s)
    big = ["XW_Q, XW_K, XW_V", "softmax(QKᵀ/√d)", "PV", "AW_O", "XW_gate, XW_up", "XW_down",
           "LM head"]
    assert sum(table.row(t).total for t in big) == lecture_total(LLAMA2_7B, b, s)
    h, i, N = LLAMA2_7B.dim, LLAMA2_7B.ffn_dim, LLAMA2_7B.n_layers
    small = (N * (3 * b * s * h + 4 * b * s * i + b * s * i + 2 * b * s * h)  # RoPE Swish × res
             + (2 * N + 1) * (4 * b * s * h + 2 * b * s))                   # RMSNorms
    assert table.total - lecture_total(LLAMA2_7B, b, s) == small


def test_grouped_query_attention_shrinks_only_the_kv_projections():
    mha = LlamaConfig(dim=64, n_layers=1, n_heads=8, n_kv_heads=8, ffn_dim=96, vocab_size=10,
                      max_seq_len=8)
    gqa = LlamaConfig(**{**mha.__dict__, "n_kv_heads": 2})
    b, s, h, d = 2, 8, 64, 8
    full, grouped = flops_table(mha, b, s), flops_table(gqa, b, s)
    assert full.row("XW_Q, XW_K, XW_V").formula == "3·2bsh²"
    assert full.row("XW_Q, XW_K, XW_V").flops == 3 * 2 * b * s * h * h
    assert grouped.row("XW_Q, XW_K, XW_V").flops == 2 * b * s * h * h + 2 * 2 * b * s * h * 2 * d
    assert full.total - grouped.total == 2 * 2 * b * s * h * (h - 2 * d)


def test_groups_partition_the_total_and_shares_add_to_100():
    table = flops_table(SMALL_GQA, 2, 16)
    groups = table.by_group()
    assert list(groups) == list(GROUPS)
    assert sum(groups.values()) == table.total
    assert sum(table.shares().values()) == pytest.approx(100.0)
    assert groups["embedding"] == 0  # a gather, in the forward table


def test_attention_share_grows_with_the_sequence():
    shares = [flops_table(LLAMA2_7B, 1, s).shares()["attention"] for s in (512, 4096, 32768)]
    assert shares[0] < shares[1] < shares[2]
    assert shares[2] > 50.0  # the s² terms overtake the MLP


def test_attention_overtakes_the_mlp_at_the_first_length_where_its_rows_cost_more():
    s = attention_overtakes_mlp(LLAMA2_7B)
    before = flops_table(LLAMA2_7B, 1, s - 1).by_group()
    at = flops_table(LLAMA2_7B, 1, s).by_group()
    assert before["attention"] <= before["MLP"] and at["attention"] > at["MLP"]
    h, i = LLAMA2_7B.dim, LLAMA2_7B.ffn_dim
    assert s == 8275 and s < (6 * i - 8 * h) / 4  # the softmax's 3bs²n tips it a little earlier
    assert attention_overtakes_mlp(LLAMA2_7B, batch=4) == s  # every term is linear in b


def test_attention_overtakes_at_length_one_when_the_mlp_is_tiny():
    c = LlamaConfig(dim=8, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=1, vocab_size=5,
                    max_seq_len=4)
    assert attention_overtakes_mlp(c) == 1


def test_crossover_checks_its_arguments():
    with pytest.raises(cl.ShapeError, match="attention_overtakes_mlp: batch must be a positive"):
        attention_overtakes_mlp(LLAMA2_7B, batch=0)
    with pytest.raises(TypeError, match="attention_overtakes_mlp needs a LlamaConfig"):
        attention_overtakes_mlp(None)


def test_lecture_training_breakdown():
    """3 × forward with the embedding priced as a one-hot matmul: the lecture's 192.17 TFLOPs.

    Total, embedding, normalisation, attention and LM head agree to every printed digit; MLP
    (55.364 vs 55.361) and residual (0.002 vs 0.003) differ in the third decimal: the slide
    prices the backward of some elementwise terms differently and does not say how.
    """
    train = training_flops(LLAMA2_7B, 1, 4096)
    assert train.total == 3 * flops_table(LLAMA2_7B, 1, 4096).total + 3 * 2 * 4096 * 4096 * 32000
    assert train.total / 1e12 == pytest.approx(192.17, abs=0.015)
    lecture = {"embedding": 1.676, "normalisation": 0.007, "residual": 0.003,
               "attention": 41.276, "MLP": 55.361, "LM head": 1.676}
    shares = train.shares()
    for group in ("embedding", "normalisation", "attention", "LM head"):
        assert round(shares[group], 3) == lecture[group], group
    for group, percent in lecture.items():
        assert shares[group] == pytest.approx(percent, abs=0.005), group


def test_convention_changes_only_the_small_terms():
    ours = FlopConvention(rope_on_keys=True, softmax_per_score=7, embedding_as_matmul=True)
    b, s = 2, 16
    c = SMALL_GQA
    table, lecture = flops_table(c, b, s, ours), flops_table(c, b, s, LECTURE)
    rope = table.row("RoPE")
    assert rope.formula == "3bs(n+n_kv)d"
    assert rope.flops == 3 * b * s * (c.n_heads + c.n_kv_heads) * c.head_dim
    assert table.row("softmax(QKᵀ/√d)").flops - lecture.row("softmax(QKᵀ/√d)").flops == (
        4 * b * s * s * c.n_heads)
    assert table.row("embedding").flops == 2 * b * s * c.dim * c.vocab_size


def test_table_repr_is_stable_text_and_html():
    table = flops_table(SMALL_GQA, 1, 8)
    text = repr(table)
    assert text.splitlines()[0].startswith("forward FLOPs, b=1, s=8, h=32, n=4, n_kv=2")
    assert text == repr(flops_table(SMALL_GQA, 1, 8))
    assert text.splitlines()[-1].split() == ["total", f"{table.total:.3e}"]
    assert "× 2" in text and "<table>" in table._repr_html_()
    train = training_flops(SMALL_GQA, 1, 8)
    assert repr(train).splitlines()[0] == "training = 3 × forward"
    assert "<td>LM head</td>" in train._repr_html_()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_batch_or_sequence_is_a_shape_error(bad):
    with pytest.raises(cl.ShapeError, match="flops_table: batch must be a positive integer"):
        flops_table(SMALL_GQA, bad, 8)
    with pytest.raises(cl.ShapeError, match="flops_table: seq"):
        flops_table(SMALL_GQA, 1, bad)


def test_a_config_is_required():
    with pytest.raises(TypeError, match="flops_table needs a LlamaConfig, got dict"):
        flops_table({"dim": 8}, 1, 8)


def test_a_convention_is_required():
    with pytest.raises(TypeError, match="flops_table: convention must be a FlopConvention"):
        flops_table(SMALL_GQA, 1, 8, "lecture")


def test_unknown_row_names_the_rows():
    with pytest.raises(KeyError, match="RoPE"):
        flops_table(SMALL_GQA, 1, 8).row("dropout")


# -- counting a real graph ---------------------------------------------------------------------
def test_count_flops_on_a_matmul_is_2mnh_and_the_exact_count_is_close():
    m, n, h = 3, 4, 5
    x, w = cl.variable("x", (m, n)), cl.variable("w", (n, h))
    counted = count_flops(x @ w)
    assert counted.total == 2 * m * n * h
    assert dict(counted.by_op) == {"matmul": 2 * m * n * h} and counted.nodes == 1
    assert counted.total - m * h * (2 * n - 1) == m * h  # one addition fewer per output


def test_count_flops_on_a_swiglu_block_equals_the_tables_mlp_rows():
    b, s = 2, 5
    c = SMALL_GQA
    x = cl.variable("x", (b, s, c.dim))
    w_gate = cl.variable("w_gate", (c.dim, c.ffn_dim))
    w_up = cl.variable("w_up", (c.dim, c.ffn_dim))
    w_down = cl.variable("w_down", (c.ffn_dim, c.dim))
    out = x + (cl.silu(x @ w_gate) * (x @ w_up)) @ w_down
    counted = count_flops([out])
    table = flops_table(c, b, s)
    rows = ["XW_gate, XW_up", "Swish", "element-wise ×", "XW_down", "residual (MLP)"]
    assert counted.total == sum(table.row(r).flops for r in rows)
    assert counted.by_op["silu"] == table.row("Swish").flops
    assert counted.by_op["add"] == table.row("residual (MLP)").flops
    assert list(counted.by_op)[0] == "matmul"  # largest first


def test_count_flops_counts_a_shared_node_once_and_ignores_leaves():
    x = cl.variable("x", (4, 4))
    y = cl.exp(x)
    counted = count_flops([y + y, y * 2.0])
    assert counted.total == 16 + 16 + 16 and counted.nodes == 3


def test_count_flops_unknown_shape_names_op_and_node():
    x = cl.variable("x", (None, 3))
    w = cl.variable("w", (3, 2))
    with pytest.raises(cl.ShapeError, match=r"op matmul at node \(x@w\).*x: \(None, 3\)"):
        count_flops(x @ w)


def test_count_flops_rejects_non_nodes():
    with pytest.raises(cl.GraphError, match="ndarray"):
        count_flops([np.zeros(3)])


def test_count_flops_repr_lists_ops_and_total():
    x = cl.variable("x", (2, 3))
    text = repr(count_flops(cl.exp(x) @ cl.variable("w", (3, 3))))
    assert text.splitlines()[2].split()[0] == "matmul"
    assert text.splitlines()[-1].split() == ["total", "42", "2", "ops"]


# -- the model's graph against the table ---------------------------------------------------------
def _config(n_kv_heads: int) -> LlamaConfig:
    return LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads, ffn_dim=48,
                       vocab_size=50, max_seq_len=16)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("b, s", [(1, 2), (2, 8), (3, 16)])
def test_model_graph_flops_equal_the_table_under_the_course_lib_convention(n_kv_heads, b, s):
    config = _config(n_kv_heads)
    graph = Llama(config, seed=0).forward_graph(b, s)
    counted = count_flops(graph.logits)
    table = flops_table(config, b, s, COURSE_LIB)
    assert counted.total == table.total
    for op, terms in counted.flop_rows.items():
        if not terms or op in ("head_scores", "causal_softmax"):
            continue  # free ops, checked below; two ops share the softmax(QKᵀ/√d) row
        assert counted.by_op[op] == sum(table.row(t).total for t in terms), op
    scores = counted.by_op["head_scores"] + counted.by_op["causal_softmax"]
    assert scores == table.row("softmax(QKᵀ/√d)").total
    free = {op for op, terms in counted.flop_rows.items() if not terms}
    assert free and all(counted.by_op[op] == 0 for op in free)  # views and the gather


def test_count_flops_groups_the_one_walk_by_op_kind():
    graph = Llama(_config(2), seed=0).forward_graph(2, 8)
    by_node = cl.perf.flops_by_node(graph.loss)
    counted = count_flops(graph.loss)
    assert counted.nodes == len(by_node) and counted.total == sum(by_node.values())
    for op, flops in counted.by_op.items():
        assert flops == sum(f for n, f in by_node.items() if n.op.name == op), op
        assert counted.flop_rows[op] == next(n.op for n in by_node if n.op.name == op).flop_rows
    empty = count_flops([])
    assert (empty.total, dict(empty.by_op), empty.nodes) == (0, {}, 0)
    assert repr(empty).splitlines()[-1].split() == ["total", "0", "0", "ops"]


def test_lecture_convention_differs_only_by_rope_on_the_keys():
    config = _config(2)
    b, s = 2, 8
    counted = count_flops(Llama(config, seed=0).forward_graph(b, s).logits)
    lecture = flops_table(config, b, s)
    keys = 3 * b * s * config.n_kv_heads * config.head_dim * config.n_layers
    assert counted.total - lecture.total == keys


def test_compare_with_graph_shows_agreement_and_disagreement():
    config = _config(2)
    graph = Llama(config, seed=0).forward_graph(2, 8)
    agree = compare_with_graph(flops_table(config, 2, 8, COURSE_LIB), count_flops(graph.logits))
    assert set(agree.column("equal")) == {"True"}
    assert agree.rows[-1][:2] == ["all ops", "total"]
    disagree = compare_with_graph(flops_table(config, 2, 8), count_flops(graph.loss))
    equal = dict(zip(disagree.column("graph ops"), disagree.column("equal")))
    assert equal["rope"] == equal["cross_entropy"] == equal["all ops"] == "False"
    assert equal["matmul"] == "True"
    assert "(no row for cross_entropy)" in disagree.column("table rows")


@pytest.mark.parametrize("config, b, s", [(_config(2), 2, 8), (LlamaConfig.tiny(), 4, 64)])
def test_backward_graph_costs_about_twice_the_forward(config, b, s):
    """Training ≈ 3 × forward, measured on the real gradient graph of the loss."""
    graph, grads = Llama(config, seed=0).loss_graph(b, s)
    forward = count_flops(graph.loss).total
    training = count_flops([graph.loss, *grads.values()]).total
    assert training / forward == pytest.approx(3.0, abs=0.05)
