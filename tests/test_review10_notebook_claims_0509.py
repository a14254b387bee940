"""Notebooks 05–09: the figures their prose states agree with the stored outputs (review 10).

Each test reads a notebook's JSON, finds a markdown cell and a code cell by their text, and
checks a number or a comparison in the prose against what the code cell printed. A cell whose
output is a timing (``NBVAL_IGNORE_OUTPUT``) is checked only for relations the prose states
without a number, so re-running the notebook on another machine keeps them true."""

import json
import re

import pytest
from exercise_notebooks import NOTEBOOKS


def _cells(name: str) -> list[dict]:
    with open(NOTEBOOKS / f"{name}.ipynb", encoding="utf-8") as f:
        return json.load(f)["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _markdown(name: str, snippet: str) -> str:
    """The one markdown cell of notebook ``name`` that contains ``snippet``."""
    found = [_source(c) for c in _cells(name) if c["cell_type"] == "markdown"
             and snippet in _source(c)]  # fmt: skip
    assert len(found) == 1, f"{name}: {len(found)} markdown cells contain {snippet!r}"
    return found[0]


def _output(name: str, snippet: str) -> str:
    """The stored text output (streams and text/plain) of the one code cell of ``name`` whose
    source contains ``snippet``."""
    found = [c for c in _cells(name) if c["cell_type"] == "code" and snippet in _source(c)]
    assert len(found) == 1, f"{name}: {len(found)} code cells contain {snippet!r}"
    parts = []
    for out in found[0]["outputs"]:
        if "text" in out:
            parts.append("".join(out["text"]))
        elif "text/plain" in out.get("data", {}):
            parts.append("".join(out["data"]["text/plain"]))
    return "".join(parts)


def _number(text: str, pattern: str) -> float:
    """The number the first group of ``pattern`` matches in ``text`` (commas dropped)."""
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not found in:\n{text}"
    return float(match.group(1).replace(",", ""))


# --- 05 -----------------------------------------------------------------------------------


def test_05_the_intro_names_the_three_speed_levers_of_the_lecture():
    intro = _markdown("05_strides", "**You will learn to**")
    for lever in ("vectorisation", "data layout", "parallelisation"):
        assert lever in intro, lever


def test_05_the_views_answer_claims_only_what_its_cell_checks():
    answer = _markdown("05_strides", "None of these views owns memory")
    cell = [_source(c) for c in _cells("05_strides") if "same view as NumPy" in _source(c)]
    assert len(cell) == 1 and "shares_memory" in cell[0] and "byte_strides" in cell[0]
    assert "address" not in answer or "ctypes.data" in cell[0] or "data_ptr" in cell[0]


def test_05_im2col_copies_the_numbers_the_prose_counts():
    prose = _markdown("05_strides", "**im2col** turns the convolution")
    out = _output("05_strides", "im2col matrix:")
    copied, pixels = _number(prose, r"= (\d+)\$ numbers"), _number(prose, r"= (\d+)\$ pixels")
    assert f"= {copied:.0f} numbers copied from {pixels:.0f} pixels" in out


# --- 06 -----------------------------------------------------------------------------------


def test_06_the_ridge_point_is_defined_where_the_prose_first_uses_it():
    first = next(_source(c) for c in _cells("06_intensity_and_fusion")
                 if c["cell_type"] == "markdown" and "ridge" in _source(c))  # fmt: skip
    assert "**ridge point**" in first and "peak} / \\text{bandwidth}" in first


def test_06_the_byte_model_and_the_measured_rates_match_the_prose():
    name = "06_intensity_and_fusion"
    out = _output(name, 'print(f"elements moved per element of E')
    assert "Program 1 9, Program 2 5; byte model 1.8x" in out
    assert "$5N / 9N$ of the time — 1.8× faster" in _markdown(name, "The byte model says")
    timed = _output(name, '"Program 1 (3 NumPy kernels)": three_kernels')
    rates = dict(re.findall(r"(Program 1 \(3 NumPy kernels\)|Program 2 \(fused C\+\+ loop\))"
                            r".*?([\d.]+) GB/s", timed))  # fmt: skip
    share = float(rates["Program 1 (3 NumPy kernels)"]) / float(rates["Program 2 (fused C++ loop)"])
    said = _number(_markdown(name, "The byte model's 1.8×"), r"at about (\d+) % of the fused")
    assert abs(100 * share - said) < 5, (share, said)


def _op_repeat_rows(name: str):
    """(k, fused ms, in-cache GFLOP/s) per row of 06's op-repeat table, the loop's best rate
    in cache, and the k from which the fused kernel is compute-bound."""
    out = _output(name, "repeat = perf.measure_op_repeat(")
    rows = [(int(k), float(fused), float(rate)) for k, fused, rate in
            re.findall(r"^\s*(\d+)\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+x\s+([\d.]+)$",
                       out, re.MULTILINE)]  # fmt: skip
    assert [k for k, _, _ in rows] == [1, 2, 4, 8, 16, 32, 64], out
    best = _number(out, r"best rate in cache: ([\d.]+) GFLOP/s")
    turn = int(_number(out, r"compute-bound from k = (\d+)"))
    return rows, best, turn


def test_06_the_fused_chains_stay_under_the_loop_ceiling_as_the_prose_says():
    name = "06_intensity_and_fusion"
    rows, best, turn = _op_repeat_rows(name)
    n = 2**23  # the array of the cell: 2^23 float32
    fused = {k: k * n / (ms * 1e-3) / 1e9 for k, ms, _ in rows}
    in_cache = {k: rate for k, _, rate in rows}
    assert max(fused.values()) < 0.9 * best, (fused, best)  # never up to the ceiling
    assert all(fused[k] <= 1.05 * in_cache[k] for k in fused if k >= turn), (fused, in_cache)
    assert in_cache[64] < 0.9 * best  # the long chain's own rate falls below the best one
    prose = _markdown(name, "On the right, the fused points")
    assert "up to\nthe loop's own ceiling" not in prose
    assert "under the loop's own ceiling" in prose


# --- 07 -----------------------------------------------------------------------------------


def _h100_ratios() -> dict[str, float]:
    out = _output("07_gpu_kernels", "K.measured.H100_AFTER")
    rows = re.findall(r"^(\S.*?)\s{2,}([\d.]+)(?:\s+>= [\d.]+)?\s*$", out, re.MULTILINE)
    return {kernel.strip(): float(ratio) for kernel, ratio in rows}


def test_07_the_measured_h100_ratios_quoted_in_the_prose_are_the_table_s():
    ratios = _h100_ratios()
    matmuls = [ratios[k] for k in ("matmul_naive", "matmul_tiled", "matmul_register_tiled")]
    memory = [r for k, r in ratios.items() if not k.startswith(("matmul", "attention"))]
    after = _markdown("07_gpu_kernels", "The memory-bound kernels move their bytes")
    low, high = (float(x) for x in re.search(r"at ([\d.]+)–([\d.]+) of copy speed", after).groups())
    assert (low, high) == (min(memory), max(memory)), (low, high, memory)
    assert "{:.2f}, {:.2f}, then {:.2f} of cuBLAS".format(*matmuls) in after
    ladder = _markdown("07_gpu_kernels", "tiling cuts the global loads by the tile size")
    assert (
        "reached {:.2f} and {:.2f} of\ncuBLAS, the register-tiled one {:.2f}".format(*matmuls)
        in ladder
    )
    attention = next(r for k, r in ratios.items() if k.startswith("attention"))
    occupancy = _markdown("07_gpu_kernels", "The attention kernel is a measured case")
    assert f"shipped kernel measured {attention:.2f}" in occupancy


def test_07_the_gpu_table_says_which_boards_it_describes():
    prose = _markdown("07_gpu_kernels", "The published figures of five GPUs")
    assert "SXM" in prose


def test_07_reduction_and_tile_counts_in_the_prose_are_the_emulator_s():
    name = "07_gpu_kernels"
    out = _output(name, 'for variant in ("tree", "shuffle"):')
    shuffles = int(_number(out, r"shuffle .*warp shuffles\s+(\d+)"))
    prose = _markdown(name, "lane-shuffles")
    assert shuffles == _number(prose, r"blocks make ([\d,]+)")
    tree_barriers = int(_number(out, r"tree\s+barriers\s+(\d+)"))
    assert tree_barriers == 65 * _number(prose, r"the tree needs (\d+) barriers")
    verdict = _output(name, 'check("07.tiled_matmul"')
    task = _markdown(name, "### Exercise 07.tiled_matmul")
    conflicts = int(_number(task, r"`\[TILE\]\[TILE \+ 1\]`, as in section 9, leaves (\d+)"))
    assert f"{conflicts} bank conflicts per block" in verdict
    assert "6 global loads per element of C (naive: 96)" in verdict
    assert "6 global loads per element of `C`\nwhere the naive kernel makes 96" in task


# --- 08 -----------------------------------------------------------------------------------


def _shares(out: str) -> dict[str, float]:
    return {family.strip(): float(share) for family, share in
            re.findall(r"^(\S.*?)\s{2,}[\d.,]+\s+([\d.]+)%$", out, re.MULTILINE)}  # fmt: skip


def test_08_the_time_shares_are_what_the_prose_says():
    flops = _shares(_output("08_llama", "flops = flops_by_family(graph.loss)"))
    seconds = _shares(_output("08_llama", "seconds = seconds_by_family(graph.loss, feed)"))
    products = "products (matmul, head_scores, head_mix)"
    assert seconds[products] < flops[products]
    others = [f for f in flops if f != products]
    assert len(others) == 6 and all(seconds[f] >= 3 * flops[f] for f in others), (flops, seconds)
    assert max(others, key=seconds.get) == "attention softmax"
    assert all(seconds[f] < 10 for f in others if f != "attention softmax"), seconds
    prose = _markdown("08_llama", "Time is another matter at this size")
    assert "every family but the products" in prose and "attention softmax most of all" in prose
    assert "stay cheap" not in prose


def test_08_the_held_out_text_is_the_tenth_the_prose_says():
    out = _output("08_llama", "train_tokens, held_out = split_tokens(")
    train, held = (_number(out, p) for p in (r"([\d,]+) bytes to train on", r"([\d,]+) held out"))
    assert round(100 * held / (train + held)) == _number(
        _markdown("08_llama", "is **held out**"), r"The last (\d+) %"
    )


# --- 09 -----------------------------------------------------------------------------------


def _gib_table(out: str) -> dict[str, float]:
    return {part.strip(): float(gib) for part, gib in
            re.findall(r"^(\w[\w ]*?)\s{2,}([\d.]+)\s+[\d.]+ %$", out, re.MULTILINE)}  # fmt: skip


def test_09_training_memory_figures_in_the_prose():
    name = "09_llm_flops_memory"
    parts = _gib_table(_output(name, "memory = training_memory(llama2_7b, batch=1"))
    answer = _markdown(name, "for a single sequence: nearly all of two 80 GB GPUs")
    assert round(parts["total"]) == _number(answer, r"About (\d+) GiB")
    total_bytes = _number(_output(name, 'check("09.training_memory"'), r"needs ([\d,]+) bytes")
    assert round(total_bytes / 1e9) == _number(answer, r"GiB \((\d+) GB\)")
    states = parts["weights"] + parts["gradients"] + parts["optimizer states"]
    eight = states + 8 * parts["activations"]  # b = 8: the activations grow 8-fold
    assert round(eight) == _number(
        _markdown(name, "## 10 · Splitting the work"), r"about (\d+) GiB"
    )


def test_09_parallel_answer_matches_its_table_in_one_unit_each():
    name = "09_llm_flops_memory"
    out = _output(name, 'for strategy in ("data", "zero-1", "zero-2", "zero-3", "tensor"):')
    rows = {r[0]: [float(x) for x in r[1:]] for r in
            re.findall(r"^(\S+)\s+([\d.]+) GiB\s+([\d.]+) GiB\s+([\d.]+) GiB\s+([\d.]+) GiB"
                       r"\s+([\d.]+) GiB\s+([\d.]+) GiB$", out, re.MULTILINE)}  # fmt: skip
    answer = _markdown(name, "Data parallelism over 8 GPUs leaves each one")
    data, zero3, tensor = rows["data"], rows["zero-3"], rows["tensor"]
    assert round(data[4]) == _number(answer, r"budget, about (\d+) GiB")
    assert round(sum(data[:3])) == _number(answer, r"the (\d+) GiB \(\d+ GB\) of weights")
    assert round(sum(data[:3]) * 2**30 / 1e9) == _number(answer, r"GiB \((\d+) GB\) of weights")
    assert round(zero3[4]) == _number(answer, r"down to about\n?(\d+) GiB")
    assert round(zero3[5] / data[5], 1) == _number(answer, r"stage 3 sends ([\d.]+) times")
    assert round(sum(tensor[:3])) == _number(answer, r"\(about\n?(\d+) GiB for all three\)")
    assert round(tensor[4]) == _number(answer, r"holds about (\d+) GiB")
    assert round(tensor[5]) == _number(answer, r"(\d+) GiB per\nstep")
    assert round(data[5]) == _number(answer, r"against (\d+) GiB for DP")


def test_09_the_decoding_answer_counts_the_sequences_the_cell_printed():
    name = "09_llm_flops_memory"
    out = _output(name, "max_batch(cfg, 4096, 'A100')")
    fit = int(_number(out, r"MHA, 32 K/V heads:.*?(\d+) on an A100"))
    answer = _markdown(name, "A bf16 LLaMA-2-7B caches 512 KiB per token")
    assert _number(answer, r"A100 holds only (\d+) such sequences") == fit
    assert _number(_markdown(name, "Drawn against the batch"), r"Only (\d+) such sequences") == fit
    weights = _gib_table(_output(name, "memory = training_memory(llama2_7b, batch=1"))["weights"]
    assert f"{weights:.1f} GiB" in answer.replace("\n", " "), weights


def test_09_the_crossovers_in_the_answer_are_the_printed_ones():
    name = "09_llm_flops_memory"
    flops = _output(name, "crossover = attention_overtakes_mlp(llama2_7b)")
    memory = _output(name, 'for mode in ("none", "selective", "full"):\n    s_cross')
    answer = _markdown(name, "At short sequences the MLP's weight products")
    assert _number(flops, r"from s = (\d+)") == _number(answer, r"from\s+\$s = (\d+)\$ attention")
    assert _number(flops, r"s > ([\d.]+)") == _number(answer, r"say \$s > (\d+)\$")
    crossings = dict(
        re.findall(r"^(\w+)\s+recomputation: .* from s = ([\d,]+)$", memory, re.MULTILINE)
    )
    assert int(crossings["none"].replace(",", "")) == _number(answer, r"From \$s = (\d+)\$ the")
    for mode in ("selective", "full"):
        said = _number(answer, mode + r" to about\s+(\d+) thousand")
        assert round(int(crossings[mode].replace(",", "")) / 1000) == said, mode


@pytest.mark.parametrize("group", ["embedding", "normalisation", "attention", "LM head"])
def test_09_the_four_shares_said_to_agree_with_the_lecture_agree(group):
    out = _output("09_llm_flops_memory", "lecture_shares = {")
    ours, lecture = re.search(rf"^{group}\s+ours\s+([\d.]+) %\s+lecture\s+([\d.]+) %$", out,
                              re.MULTILINE).groups()  # fmt: skip
    assert ours == lecture
    assert "four shares agree to every printed" in _markdown(
        "09_llm_flops_memory", "The total is within 0.01 %"
    )
