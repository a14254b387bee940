"""FLOPs of a LLaMA-style model: the lecture's per-term table, and a count over a real graph.

Two ways to the same number:

* :func:`flops_table` writes the lecture's formulas down, one row per term of the forward pass
  (b batch, s sequence, n query heads, n_kv key/value heads, d head size, h = n·d hidden size,
  i SwiGLU size, v vocabulary, N layers). A matrix product of (m×k)·(k×p) counts 2·m·k·p
  (the exact m·p·(2k − 1), rounded up). The lecture's
  ``N·(6bsh² + 4bs²h + 3bs²n + 2bsh²) + N·6bshi + 2bshv`` is the sum of the big rows; the table
  also keeps the small ones (RoPE, Swish, the product, residual adds, RMSNorms).
* :func:`count_flops` walks a graph built from ``course_lib`` ops and adds every op's own
  ``Op.flops(out_shape, *in_shapes)`` (the walk of :func:`course_lib.perf.flops_by_node`).

Counting conventions (what the lecture leaves implicit, fixed here):

* A block has *two* RMSNorms and *two* residual adds (before/after attention and the MLP), and
  the model ends with one more RMSNorm before the LM head.
* The embedding is a gather: 0 FLOPs. The lecture's *training* breakdown instead prices it like
  the LM head, as a one-hot matrix product (2bshv); :func:`training_flops` does the same.
* Grouped-query attention: the K and V projections produce n_kv·d columns, 2bsh·(n_kv·d) each,
  which is the lecture's 2bsh² when n_kv = n. The scores and PV still cost 2bs²nd (every query
  head attends).
* Per-element costs (RoPE 3 per element of Q, softmax 3 per score, Swish 4, RMSNorm 4 per element
  plus 2 per row) are the lecture's; :class:`FlopConvention` holds them. Our ops charge the same
  costs, with one difference: the model rotates K as well as Q, so its RoPE costs
  3bs(n + n_kv)d. Under :data:`COURSE_LIB` (the lecture's convention with ``rope_on_keys``)
  ``count_flops`` of ``Llama``'s forward graph equals the table's total exactly, op kind by op
  kind (:func:`compare_with_graph`; each op names the rows it computes in ``Op.flop_rows``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from .. import params
from ..errors import GraphError, ParameterError
from ..graph import Node
from ..perf import flops_by_node
from ..tables import ShownAsTable, Table
from .config import LlamaConfig, positive_size, recompute_choice, require_config
from .crossover import first_seq_where

#: The groups of the breakdown, in the order the lecture lists them ("Linear" is the LM head).
GROUPS = ("embedding", "normalisation", "residual", "attention", "MLP", "LM head")

#: Training ≈ forward + backward, and the backward of a product costs two products.
TRAINING_FACTOR = 3


@dataclass(frozen=True)
class FlopConvention:
    """Per-element costs of the small terms (the matrix products are always 2·m·k·p).

    Parameters
    ----------
    rope_per_element : int
        FLOPs per rotated element (x·cos + rotate(x)·sin: 2 products and 1 sum).
    rope_on_keys : bool
        Rotate K as well as Q. The lecture's 3bsnd rotates one (b, s, n, d) tensor.
    softmax_per_score : int
        FLOPs per attention score besides QKᵀ (the lecture's 3bs²n: scale, exp, normalise).
    swish_per_element : int
        FLOPs of Swish(x) = x·sigmoid(x) per element.
    rms_per_element, rms_per_row : int
        RMSNorm: square, sum, scale by 1/rms and by γ per element; mean and root per row.
    embedding_as_matmul : bool
        Price the embedding lookup as a one-hot (bs × v)·(v × h) product, 2bshv.
    causal_half : bool
        Count only the query-key pairs the causal mask keeps, s(s+1)/2 per head, as a causal
        kernel (FlashAttention) computes them. The lecture counts the whole s × s score
        matrix, masked half included (as PaLM's MFU and Megatron's formulas do).
    """

    rope_per_element: int = 3
    rope_on_keys: bool = False
    softmax_per_score: int = 3
    swish_per_element: int = 4
    rms_per_element: int = 4
    rms_per_row: int = 2
    embedding_as_matmul: bool = False
    causal_half: bool = False

    def __post_init__(self):
        # a negative cost could keep attention below the MLP at every length: a search that
        # never ends; a float a fractional count; 2 for True a doubled embedding
        for field in ("rope_per_element", "softmax_per_score", "swish_per_element",
                      "rms_per_element", "rms_per_row"):  # fmt: skip
            if params.integer(getattr(self, field), f"FlopConvention.{field}") < 0:
                raise ParameterError(
                    f"FlopConvention.{field} must be >= 0 FLOPs, got {getattr(self, field)}"
                )
        for field in ("rope_on_keys", "embedding_as_matmul", "causal_half"):
            params.flag(getattr(self, field), f"FlopConvention.{field}")


LECTURE = FlopConvention()
#: What course_lib's ops charge in ``Llama``'s graph: RoPE on Q and K, the rest as the lecture.
COURSE_LIB = FlopConvention(rope_on_keys=True)


@dataclass(frozen=True)
class FlopRow:
    """One term of the table: FLOPs per occurrence, how often it occurs, and where."""

    term: str
    formula: str
    group: str
    flops: int
    repeats: int  # N for a term of every block, 1 for a term of the whole model

    @property
    def total(self) -> int:
        return self.flops * self.repeats


class FlopTable(ShownAsTable):
    """The forward FLOPs of a model, term by term (see :func:`flops_table`)."""

    def __init__(self, rows: Iterable[FlopRow], title: str):
        self.rows, self.title = list(rows), title

    @property
    def total(self) -> int:
        """Sum over all rows, layers included."""
        return sum(row.total for row in self.rows)

    def by_group(self) -> dict[str, int]:
        """FLOPs per group of :data:`GROUPS` (every group present, possibly 0)."""
        totals = dict.fromkeys(GROUPS, 0)
        for row in self.rows:
            totals[row.group] += row.total
        return totals

    def shares(self) -> dict[str, float]:
        """Each group's percentage of the total."""
        return {g: 100.0 * f / self.total for g, f in self.by_group().items()}

    def row(self, term: str) -> FlopRow:
        """The row called ``term``."""
        for row in self.rows:
            if row.term == term:
                return row
        raise KeyError(f"no row {term!r}; rows: {[r.term for r in self.rows]}")

    def table(self) -> Table:
        """The rows as a :class:`course_lib.tables.Table`, with a total line."""
        body = [
            [r.term, r.formula, r.group, format_flops(r.flops), f"× {r.repeats}",
             format_flops(r.total)]
            for r in self.rows
        ]
        body.append(["total", "", "", "", "", format_flops(self.total)])
        headers = ["term", "formula", "group", "FLOPs", "times", "total FLOPs"]
        return Table(headers, body, self.title)


def format_flops(flops: float) -> str:
    """``6.297e+13``: four significant digits, stable across platforms."""
    return f"{flops:.4g}" if abs(flops) < 1e4 else f"{flops:.3e}"


def flops_table(
    config: LlamaConfig,
    batch: int,
    seq: int,
    convention: FlopConvention = LECTURE,
    past: int = 0,
) -> FlopTable:
    """The lecture's forward FLOP table for ``config`` at batch ``batch``, sequence ``seq``.

    ``seq`` may exceed ``config.max_seq_len``: the formulas hold for any length, which is how
    the notebook extrapolates to long contexts. ``convention`` sets the small terms' costs.
    ``past`` tokens already in a KV cache (a decoding step: ``seq=1, past=p``) are attended
    to by the ``seq`` new tokens but cost nothing else: the scores and PV cover s·(p + s)
    query-key pairs per head, every other row only the s new tokens.

    Examples
    --------
    >>> round(flops_table(LlamaConfig.llama2_7b(), 1, 4096).total / 1e12, 1)
    63.0
    """
    b, s = positive_size(batch, "batch", "flops_table"), positive_size(seq, "seq", "flops_table")
    c, conv = require_config(config, "flops_table"), convention
    if not isinstance(conv, FlopConvention):
        raise GraphError(f"flops_table: convention must be a FlopConvention, got {conv!r}")
    p = params.integer(past, "flops_table: past")
    if p < 0:
        raise ParameterError(f"flops_table: past must be >= 0 tokens, got {past}")
    pairs, pairs_text = _attended_pairs(s, p, conv.causal_half)
    h, n, d, i, v, N = c.dim, c.n_heads, c.head_dim, c.ffn_dim, c.vocab_size, c.n_layers
    kv = c.n_kv_heads * d
    rms = FlopRow("RMSNorm", _rms_formula(conv), "normalisation",
                  conv.rms_per_element * b * s * h + conv.rms_per_row * b * s, N)
    residual = FlopRow("residual add", "bsh", "residual", b * s * h, N)
    rope_heads = n + c.n_kv_heads if conv.rope_on_keys else n
    rows = [
        FlopRow("embedding", "2bshv (one-hot matmul)" if conv.embedding_as_matmul else
                "0 (a gather)", "embedding", 2 * b * s * h * v * conv.embedding_as_matmul, 1),
        replace(rms, term="RMSNorm (attention)"),
        FlopRow("XW_Q, XW_K, XW_V", "3·2bsh²" if kv == h else "2bsh² + 2·2bsh·(n_kv·d)",
                "attention", 2 * b * s * h * (h + 2 * kv), N),
        FlopRow("RoPE", f"{conv.rope_per_element}bs{'(n+n_kv)' if conv.rope_on_keys else 'n'}d",
                "attention", conv.rope_per_element * b * s * rope_heads * d, N),
        FlopRow("softmax(QKᵀ/√d)", f"2b{pairs_text}nd + {conv.softmax_per_score}b{pairs_text}n",
                "attention", 2 * b * pairs * n * d + conv.softmax_per_score * b * pairs * n, N),
        FlopRow("PV", f"2b{pairs_text}nd", "attention", 2 * b * pairs * n * d, N),
        FlopRow("AW_O", "2bsh²", "attention", 2 * b * s * h * h, N),
        replace(residual, term="residual (attention)"),
        replace(rms, term="RMSNorm (MLP)"),
        FlopRow("XW_gate, XW_up", "2·2bshi", "MLP", 2 * 2 * b * s * h * i, N),
        FlopRow("Swish", f"{conv.swish_per_element}bsi", "MLP",
                conv.swish_per_element * b * s * i, N),
        FlopRow("element-wise ×", "bsi", "MLP", b * s * i, N),
        FlopRow("XW_down", "2bshi", "MLP", 2 * b * s * h * i, N),
        replace(residual, term="residual (MLP)"),
        replace(rms, term="RMSNorm (final)", repeats=1),
        FlopRow("LM head", "2bshv", "LM head", 2 * b * s * h * v, 1),
    ]
    title = f"forward FLOPs, b={b}, s={s}, h={h}, n={n}, n_kv={c.n_kv_heads}, i={i}, v={v}, N={N}"
    title += f", p={p}" * bool(p) + ", causal pairs only" * conv.causal_half
    return FlopTable(rows, title)


def _attended_pairs(s: int, p: int, causal_half: bool) -> tuple[int, str]:
    """Query-key pairs per head and sequence (and how the rows write them): all s·(p + s)
    scores, or only those the mask keeps, s·p + s(s+1)/2."""
    if causal_half:
        return s * p + s * (s + 1) // 2, "·(sp + s(s+1)/2)·" if p else "·s(s+1)/2·"
    return s * (p + s), "·s(p+s)·" if p else "s²"


def attention_overtakes_mlp(
    config: LlamaConfig, batch: int = 1, convention: FlopConvention = LECTURE
) -> int:
    """The shortest sequence at which the attention group of :func:`flops_table` costs more
    than the MLP group (LLaMA-2-7B: 8275; the big terms alone give s > (6i − 8h)/4 = 8320;
    16,548 when only the causal half of the scores is counted).

    The weight products grow like s, the scores and PV like s², so past this length they win.
    """
    require_config(config, "attention_overtakes_mlp")
    positive_size(batch, "batch", "attention_overtakes_mlp")

    def attention_wins(seq: int) -> bool:
        groups = flops_table(config, batch, seq, convention).by_group()
        return groups["attention"] > groups["MLP"]

    return first_seq_where(attention_wins)


#: Rows computed once per model, not once per block: what full recomputation does not redo.
_MODEL_TERMS = ("embedding", "RMSNorm (final)", "LM head")
#: The rows selective recomputation redoes: the attention's s² part (Korthikanti et al., 2022).
_SELECTIVE_TERMS = ("softmax(QKᵀ/√d)", "PV")


def recomputed_flops(
    config: LlamaConfig,
    batch: int,
    seq: int,
    recompute: str = "none",
    convention: FlopConvention = LECTURE,
) -> int:
    """Forward FLOPs that the backward pass computes a second time when activations are
    recomputed (:func:`~course_lib.models.memory.activation_elements`): 0 for ``"none"``; the
    scores, softmax and PV of every block for ``"selective"``; every block's forward for
    ``"full"`` (the LM head and the final norm are not redone).

    They are hardware FLOPs, not model FLOPs: MFU counts a step as 3 × forward whatever
    is recomputed, so recomputation lowers MFU for the same step time.
    """
    recompute = recompute_choice(recompute, "recomputed_flops")
    table = flops_table(config, batch, seq, convention)
    if recompute == "selective":
        return sum(table.row(term).total for term in _SELECTIVE_TERMS)
    if recompute == "full":
        return sum(row.total for row in table.rows if row.term not in _MODEL_TERMS)
    return 0


def _rms_formula(conv: FlopConvention) -> str:
    return f"{conv.rms_per_element}bsh + {conv.rms_per_row}bs"


@dataclass(frozen=True, repr=False)  # repr: the table
class TrainingFlops(ShownAsTable):
    """The lecture's training breakdown: every forward term × :data:`TRAINING_FACTOR`."""

    forward: FlopTable

    @property
    def total(self) -> int:
        return TRAINING_FACTOR * self.forward.total

    def shares(self) -> dict[str, float]:
        """Percent per group; a constant factor leaves the forward shares unchanged."""
        return self.forward.shares()

    def table(self) -> Table:
        """Training FLOPs and share per group, with a total line."""
        rows = [[g, format_flops(TRAINING_FACTOR * f), f"{p:.3f} %"]
                for (g, f), p in zip(self.forward.by_group().items(), self.shares().values())]
        rows.append(["total", format_flops(self.total), "100.000 %"])
        return Table(["group", "training FLOPs", "share"], rows, "training = 3 × forward")


def training_flops(config: LlamaConfig, batch: int, seq: int) -> TrainingFlops:
    """FLOPs of one training step, the lecture's way: 3 × forward, embedding as a matmul.

    The backward pass of ``Y = XW`` computes ``∂X = ∂Y·Wᵀ`` and ``∂W = Xᵀ·∂Y``: two products
    of the forward's size, so forward + backward ≈ 3 × forward. The lecture applies the same
    factor to every term and prices the embedding like the LM head (2bshv); for LLaMA-2-7B,
    b = 1, s = 4096 this gives 192.18 TFLOPs against its 192.17, and its percentages (see
    notebook 09 and ``tests/test_flops.py`` for the digits that differ, all below 0.005 points).
    """
    convention = replace(LECTURE, embedding_as_matmul=True)
    return TrainingFlops(flops_table(config, batch, seq, convention))


def training_flops_per_token(
    config: LlamaConfig, seq: int, convention: FlopConvention = LECTURE
) -> float:
    """Model FLOPs of training on one token in sequences of ``seq``: 3 × the forward table
    at b = 1 over s tokens. The popular 6·P counts only the weight products (and the
    embedding as one); this adds the attention scores (the s² rows) and the small terms.

    Examples
    --------
    >>> from course_lib.models.memory import param_count
    >>> c = LlamaConfig.llama2_7b()
    >>> round(training_flops_per_token(c, 4096) / (6 * param_count(c)), 3)
    1.141
    """
    s = positive_size(seq, "seq", "training_flops_per_token")
    return TRAINING_FACTOR * flops_table(config, 1, s, convention).total / s


# -- counting a real graph --------------------------------------------------------------------
@dataclass(frozen=True, repr=False)  # repr: the table
class FlopCount(ShownAsTable):
    """FLOPs of a graph: the total and the share of each op kind (largest first), and the
    rows of :func:`flops_table` each op kind computes (its ``Op.flop_rows``)."""

    total: int
    by_op: Mapping[str, int]
    nodes: int
    flop_rows: Mapping[str, tuple[str, ...]]

    def table(self) -> Table:
        """FLOPs and share per op kind, with a total line."""
        rows = [[op, format_flops(f), f"{100.0 * f / (self.total or 1):.2f} %"]
                for op, f in self.by_op.items()]
        rows.append(["total", format_flops(self.total), f"{self.nodes} ops"])
        return Table(["op", "FLOPs", "share"], rows)


def count_flops(outputs: Node | Iterable[Node]) -> FlopCount:
    """Add ``op.flops(out_shape, *in_shapes)`` over every op the outputs depend on, per op kind
    (:func:`course_lib.perf.flops_by_node`).

    Uses the static shapes recorded when the graph was built, so nothing runs: both branches of
    a ``cond`` are counted. Variables and constants cost nothing. Raises :class:`ShapeError`
    naming the op and the node when a shape is unknown (give the variables full shapes).
    """
    flops = flops_by_node(outputs)
    by_op: dict[str, int] = {}
    for node, node_flops in flops.items():
        by_op[node.op.name] = by_op.get(node.op.name, 0) + node_flops
    ordered = dict(sorted(by_op.items(), key=lambda item: (-item[1], item[0])))
    rows = {node.op.name: node.op.flop_rows for node in flops}
    return FlopCount(sum(ordered.values()), ordered, len(flops), rows)


def compare_with_graph(table: FlopTable, counted: FlopCount) -> Table:
    """Graph FLOPs against table FLOPs, grouped by the rows each op kind computes
    (``Op.flop_rows``; one line per group).

    Op kinds without rows (views, the gather) must cost nothing; one that does not gets
    its own line with no table FLOPs, so a disagreement always shows.
    """
    groups: dict[tuple[str, ...], list[str]] = {}
    for op in counted.by_op:
        if counted.flop_rows[op]:
            groups.setdefault(counted.flop_rows[op], []).append(op)
        elif counted.by_op[op]:
            groups[(f"(no row for {op})",)] = [op]
    rows = []
    for terms, ops in groups.items():
        graph = sum(counted.by_op[op] for op in ops)
        formula = sum(table.row(t).total for t in terms if not t.startswith("(no row"))
        rows.append([" + ".join(ops), ", ".join(terms), str(graph), str(formula),
                     str(graph == formula)])
    rows.append(["all ops", "total", str(counted.total), str(table.total),
                 str(counted.total == table.total)])
    return Table(["graph ops", "table rows", "graph FLOPs", "table FLOPs", "equal"], rows)
