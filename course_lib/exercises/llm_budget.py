"""Notebook 09: the forward FLOPs, the parameters and the training memory of a LLaMA-style
model, on paper, on one GPU and split over several.

Checked against ``flops_table`` (the lecture's convention), ``param_count`` (Hugging Face's
``LlamaForCausalLM``), ``training_memory``, ``kv_cache_bytes`` and ``parallel_memory`` on
LLaMA-2-7B, the demo model and random configurations with multi-head, grouped-query and
multi-query attention. A mistake is recognised when the answer equals the mistake's value on
every configuration. Activations that match no mistake are split by stage (per block, and
once: the answer asked again with one more layer), each stage's difference written in b·s·h,
b·s·i, ... where one whole-number sum fits every configuration.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .core import Mistake, Wrong, call, exercise, require


def _configs(rng) -> list:
    from ..models import LlamaConfig  # noqa: PLC0415  (models loads on first use only)

    configs = [LlamaConfig.llama2_7b(), LlamaConfig.tiny()]
    while len(configs) < 30:
        n_heads = int(rng.choice([1, 2, 4, 8]))
        n_kv = int(rng.choice([k for k in (1, 2, 4, 8) if n_heads % k == 0]))
        head_dim = int(rng.choice([2, 4, 16, 64]))
        configs.append(
            LlamaConfig(
                dim=n_heads * head_dim,
                n_layers=int(rng.integers(1, 5)),
                n_heads=n_heads,
                n_kv_heads=n_kv,
                ffn_dim=int(rng.integers(1, 300)),
                vocab_size=int(rng.integers(2, 500)),
                max_seq_len=64,
            )
        )
    return configs


def _first_wrong(got: list, want: list, tolerance: float) -> int | None:
    for i, (g, w) in enumerate(zip(got, want)):
        if abs(g - w) > tolerance * abs(w):
            return i
    return None


def _recognise(
    got: list, wrong: list[list[tuple[Mistake, float]]], tolerance: float
) -> Mistake | None:
    """The mistake whose totals (``wrong``: per case, (mistake, total) pairs) equal the
    answer's on every case."""
    for k, (mistake, _) in enumerate(wrong[0]):
        if all(abs(g - w[k][1]) <= tolerance * abs(w[k][1]) for g, w in zip(got, wrong)):
            return mistake
    return None


def _number(label: str, value, integer: bool, unit: str = "") -> float:
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    require(
        isinstance(value, kinds) and not isinstance(value, bool),
        f"{label} returned {type(value).__name__} {value!r}; it must return "
        f"{'an int' if integer else 'a number'}{f' of {unit}' if unit else ''}",
    )
    return float(value) if not integer else int(value)


def _run_all(answer, cases, name: str, integer: bool) -> tuple[list, list]:
    labels = [
        f"{name}(LlamaConfig({_short(c[0])}){''.join(f', {a}' for a in c[1:])})" for c in cases
    ]
    got = [
        _number(label, call(label, answer, *case), integer) for label, case in zip(labels, cases)
    ]
    return got, labels


def _short(config) -> str:
    return (
        f"dim={config.dim}, n_layers={config.n_layers}, n_heads={config.n_heads}, "
        f"n_kv_heads={config.n_kv_heads}, ffn_dim={config.ffn_dim}, vocab_size={config.vocab_size}"
    )


def _apart(got: float, want: float) -> tuple[str, str]:
    """``got`` and ``want`` in e-notation, with 7 significant digits or as many more as it
    takes to tell them apart."""
    for digits in range(6, 17):
        texts = f"{got:.{digits}e}", f"{want:.{digits}e}"
        if texts[0] != texts[1]:
            break
    return texts


# -- forward_flops ----------------------------------------------------------------------------
BIG_TERMS_ONLY = Mistake(
    "big-terms-only",
    "that is the lecture's closed form of the big terms; the table also counts the small ones: "
    "RMSNorm 4bsh + 2bs (two per block and a final one), RoPE 3bsnd, Swish 4bsi, the product "
    "bsi and two residual adds bsh per block.",
)
GQA_IGNORED = Mistake(
    "gqa-ignored",
    "with n_kv < n key/value heads, XW_K and XW_V produce n_kv·d columns each: 2bsh·(n_kv·d), "
    "not 2bsh².",
)
NORMS_MISCOUNTED = Mistake(
    "norms-miscounted",
    "count the RMSNorms again: one before attention and one before the MLP in every block, and a "
    "final one before the LM head, each 4bsh + 2bs.",
)
ROPE_ON_KEYS = Mistake(
    "rope-on-keys",
    "the lecture's RoPE row, 3bsnd, rotates Q only (course_lib's model also rotates K; the "
    "lecture's table does not).",
)
LM_HEAD_PER_LAYER = Mistake(
    "lm-head-per-layer",
    "the LM head (2bshv) runs once, after the last block, not once per layer.",
)
CAUSAL_HALVED = Mistake(
    "causal-halved",
    "the table counts the whole s × s score matrix (QKᵀ, its softmax, PV), as a plain kernel "
    "computes it: the causal mask hides half the scores, but the table counts them all "
    "(kernels that skip the masked half, such as FlashAttention's, do fewer FLOPs than it "
    "says).",
)
EMBEDDING_AS_MATMUL = Mistake(
    "embedding-as-matmul",
    "the embedding is a table lookup (a gather), 0 FLOPs in the forward table.",
)


def _wrong_flops(table, rope_on_keys, config, b: int, s: int) -> list[tuple[Mistake, float]]:
    rows = {row.term: row.total for row in table.rows}
    h, n_layers, kv = config.dim, config.n_layers, config.n_kv_heads * config.head_dim
    small = sum(rows[t] for t in rows if t.startswith(("RMSNorm", "residual")))
    small += rows["RoPE"] + rows["Swish"] + rows["element-wise ×"]
    gqa_ignored = n_layers * 2 * 2 * b * s * h * (h - kv)
    scores = rows["softmax(QKᵀ/√d)"] + rows["PV"]  # QKᵀ, its softmax and PV: s² a head
    return [
        (BIG_TERMS_ONLY, table.total - small),
        (BIG_TERMS_ONLY, table.total - small + gqa_ignored),  # the closed form, written for MHA
        (GQA_IGNORED, table.total + gqa_ignored),
        (NORMS_MISCOUNTED, table.total - rows["RMSNorm (final)"] * n_layers),
        (ROPE_ON_KEYS, rope_on_keys),
        (ROPE_ON_KEYS, table.total + rows["RoPE"]),  # the keys with n heads, not n_kv
        (LM_HEAD_PER_LAYER, table.total + (n_layers - 1) * rows["LM head"]),
        (EMBEDDING_AS_MATMUL, table.total + 2 * b * s * h * config.vocab_size),
        (CAUSAL_HALVED, table.total - scores / 2),
        (CAUSAL_HALVED, table.total - scores * (s - 1) / (2 * s)),  # s(s+1)/2 pairs, not s²
    ]


@exercise(
    "09.forward_flops", "forward_flops(config, batch, seq) -> float: the FLOP table's total",
    mistakes=(
        BIG_TERMS_ONLY, GQA_IGNORED, NORMS_MISCOUNTED, ROPE_ON_KEYS, LM_HEAD_PER_LAYER,
        EMBEDDING_AS_MATMUL, CAUSAL_HALVED,
    ),
    forbidden=tuple(f"course_lib.models.flops.{name}" for name in (
        "flops_table", "training_flops", "training_flops_per_token", "recomputed_flops",
        "count_flops")),  # fmt: skip
)
def check_forward_flops(answer) -> str:
    from ..models.flops import COURSE_LIB, flops_table  # noqa: PLC0415

    rng = np.random.default_rng(90)
    cases = [(c, int(rng.integers(1, 9)), int(rng.integers(1, 65))) for c in _configs(rng)]
    cases[0], cases[1] = (cases[0][0], 1, 4096), (cases[1][0], 1, 1)
    got, labels = _run_all(answer, cases, "forward_flops", integer=False)
    tables = [flops_table(*case) for case in cases]
    i = _first_wrong(got, [t.total for t in tables], 1e-9)
    if i is not None:
        wrong = [
            _wrong_flops(t, flops_table(*case, COURSE_LIB).total, *case)
            for t, case in zip(tables, cases)
        ]
        shown, table = _apart(got[i], tables[i].total)
        raise Wrong(f"{labels[i]} returned {shown}, the table says {table}",
                    _recognise(got, wrong, 1e-9))  # fmt: skip
    return (
        f"equals the lecture's FLOP table on {len(cases)} configurations: LLaMA-2-7B at "
        "s = 4096, multi-head, grouped-query and multi-query attention, s = 1"
    )


# -- count_params -----------------------------------------------------------------------------
TIED = Mistake(
    "tied-embeddings",
    "LLaMA does not tie its embedding and LM head: both are v × h matrices, counted separately.",
)
GQA_IGNORED_PARAMS = Mistake(
    "gqa-ignored",
    "with n_kv < n key/value heads, W_K and W_V are h × (n_kv·d), not h × h.",
)
NO_NORMS = Mistake(
    "no-norm-weights",
    "each RMSNorm has a weight vector of h: two per block and the final one.",
)
NO_FINAL_NORM = Mistake("no-final-norm", "the final RMSNorm before the LM head has h weights too.")
TWO_MLP_MATRICES = Mistake(
    "two-mlp-matrices",
    "the SwiGLU MLP has THREE matrices: gate and up (h × i) and down (i × h).",
)


def _wrong_params(count: int, config) -> list[tuple[Mistake, int]]:
    h, n_layers = config.dim, config.n_layers
    kv = config.n_kv_heads * config.head_dim
    return [
        (TIED, count - config.vocab_size * h),
        (GQA_IGNORED_PARAMS, count + n_layers * 2 * h * (h - kv)),
        (NO_NORMS, count - (2 * n_layers + 1) * h),
        (NO_NORMS, count - n_layers * h),  # one per block
        (NO_FINAL_NORM, count - h),
        (TWO_MLP_MATRICES, count - n_layers * h * config.ffn_dim),
    ]


@exercise(
    "09.count_params", "count_params(config) -> int: LLaMA parameters, as Hugging Face counts them",
    mistakes=(TIED, GQA_IGNORED_PARAMS, NO_NORMS, NO_FINAL_NORM, TWO_MLP_MATRICES),
    forbidden=tuple(f"course_lib.models.memory.{name}" for name in (
        "param_count", "parameter_breakdown", "training_memory")),  # fmt: skip
)
def check_count_params(answer) -> str:
    from ..models import param_count  # noqa: PLC0415

    cases = [(c,) for c in _configs(np.random.default_rng(91))]
    got, labels = _run_all(answer, cases, "count_params", integer=True)
    want = [param_count(c) for (c,) in cases]
    i = _first_wrong(got, want, 0)
    if i is not None:
        wrong = [_wrong_params(count, c) for count, (c,) in zip(want, cases)]
        raise Wrong(
            f"{labels[i]} returned {got[i]:,}, expected {want[i]:,}", _recognise(got, wrong, 0)
        )
    return f"right on {len(cases)} configurations: LLaMA-2-7B (6,738,415,616), GQA and MQA ones"


# -- training_memory --------------------------------------------------------------------------
#: The parts of ``memory_budget``'s answer, in bytes.
BUDGET_KEYS = ("weights", "gradients", "optimizer", "activations", "kv_cache")

KV_GQA_IGNORED = Mistake(
    "kv-gqa-ignored",
    "the cache holds the keys and values of the n_kv_heads key/value heads only (grouped-query "
    "attention shares them between query heads): 2·N·n_kv·d numbers per token, not 2·N·n·d.",
)
KV_KEYS_ONLY = Mistake(
    "kv-keys-only",
    "the cache holds keys AND values: 2 (K and V) · N layers · n_kv heads · d numbers per token "
    "and sequence.",
)
KV_ONE_SEQUENCE = Mistake(
    "kv-one-sequence",
    "the cache holds the keys and values of every sequence of the batch: 2·N·n_kv·d numbers per "
    "token, times seq tokens, times batch sequences.",
)
ONE_MOMENT = Mistake(
    "one-adam-moment",
    "AdamW keeps TWO moments per parameter (the running mean of the gradients and of their "
    "squares), each in fp32: 8 bytes, plus the fp32 master copy when training in bf16.",
)
NO_MASTER_COPY = Mistake(
    "no-master-copy",
    "training in bf16, the optimizer also keeps an fp32 master copy of the weights (4 bytes per "
    "parameter) next to Adam's two fp32 moments: 12 bytes per parameter, 16 in all.",
)
MASTER_IN_FP32 = Mistake(
    "master-copy-in-fp32-training",
    "the fp32 master copy exists only when the weights are narrower than fp32: training in "
    "fp32 (dtype_bytes=4), the weights ARE the master copy; AdamW adds 8 bytes per parameter.",
)
GRADIENTS_FP32 = Mistake(
    "gradients-in-fp32",
    "that is the 18-bytes convention; this exercise follows ZeRO's 16: the gradients have the "
    "training type, dtype_bytes each.",
)
RECOMPUTE_IGNORED = Mistake(
    "recompute-ignored",
    "the activations depend on the recomputation policy: \"selective\" keeps no attention "
    "probabilities P; \"full\" keeps each block's input (Nbsh) plus one block's activations, "
    "held while that block's backward runs, plus the final norm and logits.",
)
FULL_WITHOUT_BLOCK = Mistake(
    "full-without-the-recomputed-block",
    "with full recomputation, the block being recomputed holds all its activations (norms, "
    "Q, K, V, P, attention output, MLP) while its backward runs: add one block's worth to the "
    "N·bsh block inputs and the final norm and logits.",
)
ACTIVATIONS_FP32 = Mistake(
    "activations-in-fp32",
    "the activations are numbers of the training type: dtype_bytes each, like the weights.",
)


def _budget(config, b: int, s: int, dtype_bytes: int, recompute: str) -> dict[str, int]:
    from ..models.inference import kv_cache_bytes  # noqa: PLC0415
    from ..models.memory import training_memory  # noqa: PLC0415

    m = training_memory(config, b, s, dtype_bytes, "adamw", recompute)
    return {"weights": m.weights, "gradients": m.gradients, "optimizer": m.optimizer,
            "activations": m.activations, "kv_cache": kv_cache_bytes(config, s, b, dtype_bytes)}


def _wrong_budget(want: dict, config, b, s, dtype_bytes, recompute) -> list[tuple]:
    """(mistake, part, bytes) for each mistake, on one case."""
    from ..models.memory import activation_elements, param_count  # noqa: PLC0415

    P, N, kv = param_count(config), config.n_layers, want["kv_cache"]
    acts = want["activations"]
    if recompute == "full":
        block = activation_elements(config, b, s, "full")["one block, recomputed for its backward"]
        without_block = acts - block * dtype_bytes
    else:
        without_block = acts
    none = activation_elements(config, b, s, "none")
    all_heads = 2 * N * config.n_heads * config.head_dim * dtype_bytes * s * b
    return [
        (KV_GQA_IGNORED, "kv_cache", all_heads),
        (KV_KEYS_ONLY, "kv_cache", kv // 2),
        (KV_ONE_SEQUENCE, "kv_cache", kv // b),
        (ONE_MOMENT, "optimizer", want["optimizer"] - 4 * P),
        (NO_MASTER_COPY, "optimizer", 8 * P),
        (MASTER_IN_FP32, "optimizer", 12 * P),
        (GRADIENTS_FP32, "gradients", 4 * P),
        (RECOMPUTE_IGNORED, "activations", sum(none.values()) * dtype_bytes),
        (FULL_WITHOUT_BLOCK, "activations", without_block),
        (ACTIVATIONS_FP32, "activations", acts // dtype_bytes * 4),
    ]


def _budget_answer(label: str, value, keys=BUDGET_KEYS, any_number=()) -> dict[str, float]:
    """The answer's dict of ``keys``: ints, or any numbers for the keys in ``any_number``."""
    require(
        type(value) is dict and sorted(value) == sorted(keys),
        f"{label} returned {type(value).__name__} "
        f"{sorted(value) if type(value) is dict else value!r}; it must return a dict with the "
        f"keys {', '.join(repr(k) for k in keys)}",
    )
    return {k: _number(f"{label}[{k!r}]", value[k], integer=k not in any_number,
                       unit="bytes (not GiB: 2**30 of them)") for k in keys}  # fmt: skip


def _part_mistake(got: list[dict], wrong: list[list[tuple]], tolerance: float) -> Mistake | None:
    """The mistake whose value of its part (``wrong``: per case, (mistake, part, value)
    triples) the answer gives on every case, to within ``tolerance`` (relative)."""
    for k, (mistake, part, _) in enumerate(wrong[0]):
        if all(abs(g[part] - w[k][2]) <= tolerance * abs(w[k][2])
               for g, w in zip(got, wrong)):
            return mistake
    return None


#: The sizes the activations are made of (b batch, s sequence, h hidden, n_kv·d key/value
#: width, i SwiGLU size, n heads, v vocabulary): what a stage's difference is written in.
ACTIVATION_TERMS = {
    "bsh": lambda c, b, s: b * s * c.dim,
    "bs·n_kv·d": lambda c, b, s: b * s * c.n_kv_heads * c.head_dim,
    "bsi": lambda c, b, s: b * s * c.ffn_dim,
    "b·n·s²": lambda c, b, s: b * c.n_heads * s * s,
    "bsv": lambda c, b, s: b * s * c.vocab_size,
}
_ONCE = {"none": "once (final RMSNorm, logits, softmax)",
         "selective": "once (final RMSNorm, logits, softmax)",
         "full": "once (the block recomputed for its backward, final RMSNorm, logits, softmax)"}


def _stages(activations, case) -> tuple[int, int]:
    """(per block, once): the bytes of activations one more layer adds, and the rest;
    ``activations(case)``: the bytes of activations of a case."""
    config, *rest = case
    deeper = dataclasses.replace(config, n_layers=config.n_layers + 1)
    shallow = activations(case)
    per_block = activations((deeper, *rest)) - shallow
    return per_block, shallow - config.n_layers * per_block


def _as_terms(differences: list, cases: list, terms: dict) -> str | None:
    """``differences`` (bytes, one per case) as a whole-number sum of ``terms`` elements that
    holds on every case, written out ("−2·bsh"); None when there is none."""
    rows = [[term(c, b, s) * d for term in terms.values()] for c, b, s, d, _ in cases]
    fit = np.linalg.lstsq(np.array(rows, float), np.array(differences, float), rcond=None)[0]
    whole = [int(round(k)) for k in fit]
    if not any(whole) or any(sum(k * x for k, x in zip(whole, row)) != diff
                             for row, diff in zip(rows, differences)):  # fmt: skip
        return None
    return _signed_sum(dict(zip(terms, whole)))


def _signed_sum(coefficients: dict[str, int]) -> str:
    """{"bsh": -2, "bsv": 1} -> "−2·bsh + bsv" (zero terms left out)."""
    text = ""
    for name, k in coefficients.items():
        if k:
            size = name if abs(k) == 1 else f"{abs(k)}·{name}"
            sign = (" − " if k < 0 else " + ") if text else ("−" if k < 0 else "")
            text += sign + size
    return text


def _elements(nbytes: int, dtype_bytes: int) -> str:
    count, rest = divmod(nbytes, dtype_bytes)
    return f"{count:,}" if rest == 0 else f"{nbytes / dtype_bytes:,.1f}"


def _stage_report(answer, cases: list, i: int) -> str:
    """Which stage of case ``i``'s activations differs: per block or once, each difference
    written in the terms of :data:`ACTIVATION_TERMS` when one sum fits every case of the same
    recompute policy."""
    def answers(case):
        config, b, s, d, r = case
        label = (f"memory_budget(LlamaConfig({_short(config)}), {b}, {s}, dtype_bytes={d}, "
                 f"recompute={r!r})")  # fmt: skip
        return _budget_answer(label, call(label, answer, *case))["activations"]

    mode = cases[i][4]
    alike = [case for case in cases if case[4] == mode]
    got = [_stages(answers, case) for case in alike]
    want = [_stages(lambda case: _budget(*case)["activations"], case) for case in alike]
    k, d, reports = alike.index(cases[i]), cases[i][3], []
    for stage, name in enumerate(("per block", _ONCE[mode])):
        g, w = got[k][stage], want[k][stage]
        terms = ACTIVATION_TERMS if stage else dict(list(ACTIVATION_TERMS.items())[:4])
        formula = _as_terms([a[stage] - b[stage] for a, b in zip(got, want)], alike, terms)
        verdict = "right" if g == w else f"expected {_elements(w, d)}" + (
            f", a difference of {formula} elements" if formula else "")
        reports.append(f"{name}: {_elements(g, d)} elements, {verdict}")
    return "; ".join(reports)


@exercise(
    "09.training_memory",
    "memory_budget(config, batch, seq, dtype_bytes=2, recompute='none') -> dict: the bytes of "
    "weights, gradients, AdamW states and activations of a training step, and of the KV cache",
    mistakes=(
        KV_GQA_IGNORED, KV_KEYS_ONLY, KV_ONE_SEQUENCE, ONE_MOMENT, NO_MASTER_COPY, MASTER_IN_FP32,
        GRADIENTS_FP32, RECOMPUTE_IGNORED, FULL_WITHOUT_BLOCK, ACTIVATIONS_FP32,
    ),
    forbidden=(
        "course_lib.models.memory.training_memory",
        "course_lib.models.memory.activation_elements",
        "course_lib.models.memory.param_count",
        "course_lib.models.memory.parameter_breakdown",
        "course_lib.models.inference.kv_cache_bytes",
    ),
    points=5.0,
)
def check_training_memory(answer) -> str:
    rng = np.random.default_rng(92)
    cases = [
        (c, int(rng.integers(1, 9)), int(rng.integers(1, 65)), (2, 4)[k // 3 % 2],
         ("none", "selective", "full")[k % 3])
        for k, c in enumerate(_configs(rng))
    ]  # fmt: skip
    cases[0] = (cases[0][0], 1, 4096, 2, "none")
    labels = [
        f"memory_budget(LlamaConfig({_short(c)}), {b}, {s}, dtype_bytes={d}, recompute={r!r})"
        for c, b, s, d, r in cases
    ]
    got = [_budget_answer(label, call(label, answer, *case)) for label, case in zip(labels, cases)]
    want = [_budget(*case) for case in cases]
    for i, (g, w) in enumerate(zip(got, want)):
        part = next((k for k in BUDGET_KEYS if g[k] != w[k]), None)
        if part is None:
            continue
        wrong = [_wrong_budget(w_, *case) for w_, case in zip(want, cases)]
        mistake = _part_mistake(got, wrong, 0)
        stages = "" if mistake or part != "activations" else (
            f". By stage (the answer asked again with one more layer): "
            f"{_stage_report(answer, cases, i)}")
        raise Wrong(f"{labels[i]}[{part!r}] is {g[part]:,}, expected {w[part]:,}{stages}",
                    mistake)
    return (
        f"right on {len(cases)} configurations (multi-head, grouped-query and multi-query "
        "attention; bf16 and fp32; no, selective and full recomputation): LLaMA-2-7B at b = 1, "
        f"s = 4096 needs {sum(want[0].values()) - want[0]['kv_cache']:,} bytes to train"
    )


# -- parallel_memory --------------------------------------------------------------------------
#: The parts of ``parallel_budget``'s answer: bytes one device holds, and bytes it sends.
PARALLEL_KEYS = ("weights", "gradients", "optimizer", "activations", "communication")

DATA_SPLITS_MODEL = Mistake(
    "data-parallel-splits-the-model",
    "under data parallelism every device holds the WHOLE model, its gradients and AdamW "
    "states; only the batch is split (sharding the states too is ZeRO).",
)
DATA_WHOLE_BATCH = Mistake(
    "data-parallel-whole-batch",
    "under data parallelism each device runs batch / devices of the sequences, so it keeps "
    "the activations of those only.",
)
TENSOR_SPLITS_EVERY_WEIGHT = Mistake(
    "tensor-parallel-splits-every-weight",
    "tensor parallelism splits the attention and MLP matrices only: the embedding, the LM head "
    "and the RMSNorm weights stay whole on every device.",
)
TENSOR_ACTIVATIONS_WHOLE = Mistake(
    "tensor-parallel-activations-whole",
    "inside a block, each of p devices computes only its heads and its share of the MLP's "
    "hidden units: Q, K, V, P, the attention output and the four MLP tensors are split p ways.",
)
TENSOR_SPLITS_EVERY_ACTIVATION = Mistake(
    "tensor-parallel-splits-every-activation",
    "the all-reduces leave every device with the whole b·s·h block input and norm outputs, and "
    "the whole logits: those activations are replicated, not split.",
)
ALL_REDUCE_ONCE = Mistake(
    "all-reduce-counted-once",
    "a ring all-reduce is a reduce-scatter and an all-gather: each of p devices sends 2·(p−1)/p "
    "of the buffer, not the buffer once.",
)
ALL_REDUCE_ONE_PHASE = Mistake(
    "all-reduce-one-phase",
    "(p−1)/p of the buffer (p devices) is one phase of a ring all-reduce: the reduce-scatter "
    "and then the all-gather each send (p−1)/p, 2·(p−1)/p in all.",
)
ALL_REDUCE_TWICE = Mistake(
    "all-reduce-without-(n-1)/n",
    "in a ring of p devices each one keeps its own chunk: it sends p−1 of the p chunks in each "
    "of the two phases, 2·(p−1)/p of the buffer, not 2 buffers.",
)
TENSOR_FORWARD_ONLY = Mistake(
    "tensor-parallel-forward-only",
    "the backward pass all-reduces too: the gradients of each block's attention and MLP "
    "inputs, two more b·s·h all-reduces per layer, four in all.",
)


def _wrong_parallel(want, config, b: int, s: int, n: int, strategy: str) -> list[tuple]:
    """(mistake, part, value) for each mistake, on one case (bf16, AdamW)."""
    from ..models.memory import training_memory  # noqa: PLC0415

    whole = training_memory(config, b, s)
    # what is all-reduced: the gradients, or 4 b·s·h activations per layer
    buffer = whole.gradients if strategy == "data" else 4 * config.n_layers * b * s * config.dim * 2
    sent = want["communication"]
    data, tensor = strategy == "data", strategy == "tensor"
    norms = (2 * config.n_layers + 1) * config.dim  # RMSNorm weights
    return [
        (DATA_SPLITS_MODEL, "weights", whole.weights // n if data else want["weights"]),
        (DATA_WHOLE_BATCH, "activations", whole.activations if data else want["activations"]),
        (TENSOR_SPLITS_EVERY_WEIGHT, "weights", whole.weights // n if tensor else want["weights"]),
        (TENSOR_SPLITS_EVERY_WEIGHT, "weights",  # all the matrices: the embedding and head too
         2 * ((whole.weights // 2 - norms) // n + norms) if tensor else want["weights"]),
        (TENSOR_ACTIVATIONS_WHOLE, "activations",
         whole.activations if tensor else want["activations"]),
        (TENSOR_SPLITS_EVERY_ACTIVATION, "activations",
         whole.activations // n if tensor else want["activations"]),
        (ALL_REDUCE_ONCE, "communication", buffer),
        (ALL_REDUCE_TWICE, "communication", 2 * buffer),
        (TENSOR_FORWARD_ONLY, "communication", sent / 2 if tensor else sent),
        (ALL_REDUCE_ONE_PHASE, "communication", sent / 2),
    ]


def _parallel_cases(rng) -> list:
    from ..models import LlamaConfig  # noqa: PLC0415

    llama = LlamaConfig.llama2_7b()
    cases = [(llama, 8, 4096, 8, "tensor"), (llama, 8, 4096, 8, "data")]
    while len(cases) < 20:
        n = int(rng.choice([2, 4, 8]))
        n_kv = n * int(rng.choice([1, 2]))
        n_heads = n_kv * int(rng.choice([1, 2, 4]))
        config = LlamaConfig(
            dim=n_heads * int(rng.choice([2, 4, 16])), n_layers=int(rng.integers(1, 5)),
            n_heads=n_heads, n_kv_heads=n_kv, ffn_dim=n * int(rng.integers(1, 40)),
            vocab_size=int(rng.integers(2, 500)), max_seq_len=64,
        )
        strategy = ("data", "tensor")[len(cases) % 2]
        cases.append((config, n * int(rng.integers(1, 4)), int(rng.integers(1, 65)), n, strategy))
    return cases


@exercise(
    "09.parallel_memory",
    "parallel_budget(config, batch, seq, devices, strategy) -> dict: per-device bytes of "
    "weights, gradients, AdamW states and activations, and the bytes each device sends, under "
    "data or tensor parallelism",
    mistakes=(
        DATA_SPLITS_MODEL, DATA_WHOLE_BATCH, TENSOR_SPLITS_EVERY_WEIGHT, TENSOR_ACTIVATIONS_WHOLE,
        TENSOR_SPLITS_EVERY_ACTIVATION, ALL_REDUCE_ONCE, ALL_REDUCE_ONE_PHASE, ALL_REDUCE_TWICE,
        TENSOR_FORWARD_ONLY,
    ),
    forbidden=(
        "course_lib.models.parallel.parallel_memory",
        "course_lib.models.parallel.ring_all_reduce_bytes",
        "course_lib.models.memory.training_memory",
        "course_lib.models.memory.activation_elements",
        "course_lib.models.memory.param_count",
        "course_lib.models.memory.parameter_breakdown",
    ),
    points=3.0,
)
def check_parallel_memory(answer) -> str:
    from ..models.parallel import parallel_memory  # noqa: PLC0415

    cases = _parallel_cases(np.random.default_rng(93))
    labels = [
        f"parallel_budget(LlamaConfig({_short(c)}), {b}, {s}, {n}, {strategy!r})"
        for c, b, s, n, strategy in cases
    ]
    got = [
        _budget_answer(label, call(label, answer, *case), PARALLEL_KEYS, ("communication",))
        for label, case in zip(labels, cases)
    ]
    want = []
    for case in cases:
        m = parallel_memory(*case)
        want.append({k: getattr(m, k) for k in PARALLEL_KEYS})
    for i, (g, w) in enumerate(zip(got, want)):
        part = next((k for k in PARALLEL_KEYS if abs(g[k] - w[k]) > 1e-9 * abs(w[k]) * (
            k == "communication")), None)
        if part is None:
            continue
        wrong = [_wrong_parallel(w_, *case) for w_, case in zip(want, cases)]
        raise Wrong(f"{labels[i]}[{part!r}] is {g[part]:,}, expected {w[part]:,}",
                    _part_mistake(got, wrong, 1e-9))
    tp = want[0]
    return (
        f"right on {len(cases)} configurations, data and tensor parallelism over 2 to 8 "
        f"devices: with tensor parallelism over 8 GPUs, each holds "
        f"{tp['weights']:,} bytes of LLaMA-2-7B's weights and sends "
        f"{tp['communication'] / 2**30:.0f} GiB per step of 8 × 4096 tokens"
    )
