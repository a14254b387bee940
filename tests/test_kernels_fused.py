"""The fused elementwise template: code generation and runs in the emulator."""

import os

import numpy as np
import pytest

from course_lib.errors import ShapeError
from course_lib.kernels import FusedElementwise, emulator, fused
from course_lib.kernels.errors import KernelCompileError
from course_lib.kernels.fused_template import fill_template

LECTURE = FusedElementwise("fused_lecture", ("a", "b", "c", "d"), (("e", "d + (a + b) * c"),))
needs_emulator = pytest.mark.skipif(  # CI has g++: fail there rather than skip
    not emulator.emulator_available() and not os.environ.get("CI"),
    reason="the CUDA emulator needs g++ on PATH",
)


def test_source_fills_the_template():
    source = LECTURE.source
    assert 'extern "C" __global__ void fused_lecture(' in source
    assert "const float* __restrict__ in_d," in source and "float* __restrict__ out_e," in source
    assert "out_e[i] = d + (a + b) * c;" in source
    assert "template:" not in source and "fused_add_mul_add" not in source
    assert LECTURE.memory_accesses == 5  # 4 loads + 1 store, the lecture's count


def test_fill_template_keeps_indentation_and_drops_the_header():
    template = (
        "// about\nint f() {  // template: head\n"
        "    x;  // template: body\n    y;  // template: body\n}\n"
    )
    assert fill_template(template, {"head": ["int g() {"], "body": ["a;", "b;", "c;"]}) == (
        "int g() {\n    a;\n    b;\n    c;\n}\n"
    )
    with pytest.raises(KernelCompileError, match="body"):
        fill_template(template, {"head": []})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"inputs": (), "outputs": (("y", "1.0f"),)}, "at least one input"),
        ({"inputs": ("x",), "outputs": (("n", "x"),)}, "not usable"),
        ({"inputs": ("x", "x"), "outputs": (("y", "x"),)}, "repeated"),
        ({"inputs": ("x",), "outputs": (("y", "x; return"),)}, "one C expression"),
        ({"inputs": ("float",), "outputs": (("y", "1.0f"),)}, "not usable"),
    ],
)
def test_invalid_specs(kwargs, message):
    with pytest.raises(KernelCompileError, match=message):
        FusedElementwise("k", **kwargs)


@needs_emulator
@pytest.mark.parametrize("n", [1, 17, 33, 257, 70_000])
def test_lecture_example_runs(n, rng):
    a, b, c, d = rng.standard_normal((4, n)).astype(np.float32)
    (e,) = fused(LECTURE, a, b, c, d, mode="emulator")
    np.testing.assert_allclose(e, d + (a + b) * c, rtol=1e-6, atol=1e-6)


@needs_emulator
def test_temporaries_math_and_several_outputs(rng):
    spec = FusedElementwise(
        "fused_silu_mul",
        inputs=("gate", "up"),
        temporaries=(("s", "gate / (1.0f + expf(-gate))"),),
        outputs=(("y", "s * up"), ("m", "fmaxf(gate, up)")),
    )
    gate, up = rng.standard_normal((2, 3, 33)).astype(np.float32)
    y, m = fused(spec, gate, up, mode="emulator")
    silu = gate / (1 + np.exp(-gate))
    np.testing.assert_allclose(y, silu * up, rtol=1e-5, atol=1e-6)
    assert y.shape == (3, 33) and np.array_equal(m, np.maximum(gate, up))


@needs_emulator
def test_fused_inputs_must_match():
    with pytest.raises(ShapeError, match="broadcast"):
        fused(LECTURE, *[np.ones(3)] * 3, np.ones(4), mode="emulator")
    with pytest.raises(ShapeError, match="inputs"):
        fused(LECTURE, np.ones(3), mode="emulator")


def test_kernel_source_extracts_one_kernel_with_its_comment():
    from course_lib.kernels import kernel_source

    text = kernel_source("vector_add.cu", "vector_add_float4")
    assert text.startswith("// Four elements per thread")
    assert text.rstrip().endswith("}") and "void vector_add(" not in text
    with pytest.raises(KernelCompileError, match="no kernel"):
        kernel_source("vector_add.cu", "nope")
