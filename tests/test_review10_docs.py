"""Claims of the README, docs/architecture.md, benchmarks/README.md and docstrings that review
10's behaviour changes made false or incomplete, pinned against the code: 0-d results, top-k
ties, what nodes do under ``len``/``in``/NumPy, jit's refusals, cross-entropy's targets, the
default seed, copy_strided's grid, draw_graph's layout, the emulator's ``__device__``
variables and the GPU figures both READMEs quote."""

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

import course_lib as cl
from course_lib.autodiff import reverse
from course_lib.errors import GraphError, ShapeError
from course_lib.kernels import emulator, launch
from course_lib.models.memory import activations_overtake_states
from course_lib.models.sampling import generate, next_token_distribution
from course_lib.runtime import eager, executor
from course_lib.viz import graphs

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
BENCHMARKS = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_readme_says_what_a_0d_result_is_with_and_without_optimize():
    """It promised 'an independent array'; a 0-d result of arithmetic, a reduction or an
    index is a NumPy scalar, of a reshape a 0-d array, the same when optimised."""
    assert "is an independent array" not in README
    claim = _flat(README)
    assert "a NumPy scalar such as `np.float64` from arithmetic, a reduction or an index" in claim
    assert "a 0-d array from a reshape" in claim and "the type of a 0-d result" in claim
    v = cl.variable("v", (1,), np.float64)
    cases = {cl.exp(v[0]) * 2.0: np.float64, cl.sum(v): np.float64, v[0]: np.float64,
             cl.reshape(v, ()): np.ndarray}  # fmt: skip
    for node, kind in cases.items():
        for optimize in (False, True):
            got = cl.Executor([node], optimize=optimize).run({v: np.ones(1)})[0]
            assert type(got) is kind, (node.name, optimize)
    assert "0-d" in inspect.getdoc(executor.Executor)


def test_top_k_is_documented_as_the_code_chooses_it():
    """The architecture said 'argpartition, ties broken arbitrarily'."""
    assert "argpartition" not in ARCHITECTURE and "ties broken arbitrarily" not in ARCHITECTURE
    text = _flat(ARCHITECTURE)
    assert "ties going to the lowest ids, so `top_k=1` is greedy at any temperature" in text
    probs = next_token_distribution(np.array([1.0, 3.0, 3.0, 3.0, 0.0]), 1.0, top_k=2)
    assert np.flatnonzero(probs).tolist() == [1, 2]  # the lowest ids of the tie
    huge = next_token_distribution(np.array([0.0, 5.0, 4.0]), 1e30, top_k=1)
    assert huge.tolist() == [0.0, 1.0, 0.0]
    assert "lowest ids" in inspect.getdoc(generate)


def test_the_architecture_names_the_function_eager_backward_runs():
    """It said backward() runs 'the same `reverse_mode`', a name the package does not have."""
    assert "`reverse_mode`" not in ARCHITECTURE
    assert "runs the same `reverse.gradient`" in _flat(ARCHITECTURE)
    assert "reverse.gradient(" in inspect.getsource(eager.Tensor.backward)
    assert not hasattr(reverse, "reverse_mode")


def test_len_in_and_numpy_reductions_on_nodes_are_documented():
    text = _flat(ARCHITECTURE)
    assert "`len(node)` is the size of its first axis" in text
    assert "`value in node` raises `GraphError`" in text and "`value in tensor` tests" in text
    assert "`np.max(node)`" in text and "`cl.max`" in text and "`_UFUNC_REDUCES`" in text
    x = cl.variable("x", (3, 4))
    assert len(x) == 3
    with pytest.raises(GraphError, match="'in'"):
        _ = 1.0 in x
    with pytest.raises(GraphError, match=r"cl\.max"):
        np.max(x)
    assert 2.0 in cl.Tensor([1.0, 2.0]) and 3.0 not in cl.Tensor([1.0, 2.0])


def test_jits_refusals_are_documented():
    text = _flat(ARCHITECTURE)
    assert "a Tensor argument that requires grad is refused" in text
    assert "returns a dict or a generator" in text
    f = cl.jit(lambda a: a * 2.0)
    with pytest.raises(GraphError, match="requires grad"):
        f(cl.Tensor([1.0], requires_grad=True))
    g = cl.jit(lambda a: (a * k for k in (1.0, 2.0)))
    with pytest.raises(GraphError, match="generator"):
        g(np.ones(2))
    assert "0-d result" in inspect.getdoc(cl.jit)


def test_the_default_seed_and_grads_refusal_are_documented():
    """The architecture said grad refuses 'a variable that is not floating-point'; one of no
    declared dtype fed integers gets float64 gradients. The docstrings named ones_like."""
    text = _flat(ARCHITECTURE)
    assert "`grad` refuses a variable declared with a dtype that is not floating-point" in text
    x = cl.variable("x")
    assert cl.evaluate(cl.grad(x + x, x), {x: True}).dtype == np.float64
    with pytest.raises(GraphError, match="only floating-point"):
        cl.grad(cl.variable("i", (), np.int64) * 2, cl.variable("i2", (), np.int64))
    assert "seed_like" in inspect.getdoc(reverse.grad)
    assert "ones_like(out)" not in inspect.getsource(reverse)
    assert "a number, an array or a node" in text


def test_cross_entropys_targets_are_documented():
    text = _flat(ARCHITECTURE)
    assert "Their targets must have exactly the logits' shape without its last axis" in text
    assert "exactly the logits' without its last axis" in _flat(inspect.getdoc(cl.cross_entropy))
    logits = cl.variable("l", (4, 3))
    with pytest.raises(ShapeError, match="without its last axis"):
        cl.cross_entropy(logits, cl.variable("t", (1,), np.int64))


def test_copy_strideds_grid_and_the_32_bit_refusal_are_documented():
    text = _flat(ARCHITECTURE)
    assert "(grid-stride loop; by default one thread per element, at most 65,535 blocks" in text
    assert launch._grid(2**30, 256) == 65535
    assert "refuse a launch whose index would pass 2³¹ − 1" in text
    with pytest.raises(ShapeError, match="32-bit"):
        launch._int_loop("copy_strided", 2**31 - 10, 256)


def test_draw_graphs_layout_limit_is_documented():
    text = _flat(ARCHITECTURE)
    assert f"`SEARCHED_NODES` ({graphs.SEARCHED_NODES})" in text
    assert inspect.signature(graphs.draw_graph).parameters["max_nodes"].default == 200
    assert "nslimit=0" in inspect.getdoc(graphs.draw_graph)


def test_the_emulators_device_variables_and_barriers_are_documented():
    text = _flat(ARCHITECTURE)
    assert "the file's `__device__` variables (global" in text
    assert "two calls on one line told apart" in text and "`__syncwarp()` while another" in text
    source = ('__device__ float total;\n__device__ float twice(float v) { return 2 * v; }\n'
              'extern "C" __global__ void k(float* y) { y[0] = twice(total); }\n')
    unit, names, _ = emulator.translate(source, "k.cu")
    assert names == ["k"]
    body = unit.split('#line 1 "k.cu"', 1)[1]
    assert body.count("CLEMU_DEVICE_VARIABLE") == 1  # the variable, not the function
    assert "__device__" in inspect.getdoc(emulator.translate)


def test_the_calculators_signature_is_the_documented_one():
    found = re.search(r"`activations_overtake_states\(([^`]*)\)`", ARCHITECTURE)
    documented = [p.split("=")[0].strip() for p in found.group(1).split(",")]
    assert documented == list(inspect.signature(activations_overtake_states).parameters)


@pytest.mark.parametrize("figure", ["12.3–13.6 µs", "18.7 µs", "5.7 µs", "6.9–8.1 µs",
                                    "1,015,808", "1,020,138", "10,240", "10,912"])
def test_the_readmes_gpu_figures_are_in_the_benchmarks_readme(figure):
    """The README's H100 launch and Nsight figures had no record where the README sends
    readers for what each benchmark measured."""
    assert figure in README and figure in BENCHMARKS
