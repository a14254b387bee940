"""The fused elementwise template: code generation and runs in the emulator."""

import re

import numpy as np
import pytest

from conftest import needs_gxx
from course_lib.errors import ShapeError
from course_lib.kernels import FusedElementwise, fused
from course_lib.kernels.errors import KernelCompileError
from course_lib.kernels.fused_template import fill_template
from course_lib.ops.elementwise import AddN, Elementwise, Power
from course_lib.passes.fusion.codegen import cuda_float

LECTURE = FusedElementwise("fused_lecture", ("a", "b", "c", "d"), (("e", "d + (a + b) * c"),))
needs_emulator = needs_gxx("the CUDA emulator")


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


def _one_output(expression: str, inputs=("x0", "x1", "x2")) -> FusedElementwise:
    return FusedElementwise("fused_k", inputs, (("y", expression),))


@pytest.mark.parametrize(
    "expression, problem",
    [
        ('system("id")', "unknown function 'system'"),
        ("x0\n#define x1 x2", "the grammar has no token '\\n'"),
        ("x0 #define", "the grammar has no token '#'"),
        ("x0; x1", "the grammar has no token ';'"),
        ("x0 /* note */", "expected a name, a number, a call or '(', found '*'"),
        ("secret + x0", "the names defined before it are x0, x1, x2, not 'secret'"),
        ("y * 2.0f", "not 'y'"),  # outputs are written, not read
        ("expf(x0, x1)", "expf takes 1 argument, not 2"),
        ("powf(x0)", "powf takes 2 arguments, not 1"),
        ("expf + x0", "a function needs its arguments in parentheses: 'expf'"),
        ("x0 = x1", "the grammar has no token '='"),
        ("x0[1]", "the grammar has no token '['"),
        ('x0 + "s"', "the grammar has no token '\"'"),
        ("0x1f", "the grammar has no token '0x1f'"),
        ("(x0 + x1", "'(' is not closed at the end"),
        ("fmaxf(x0, x1", "'fmaxf(' is not closed at the end"),
        ("x0 + x1)", "no '(' or call is open"),
        ("x0 ? x1", "'?' is not closed"),
        ("x0 : x1", "no '?' is open"),
        ("x0, x1", "no call is open"),
        ("x0 x1", "expected an operator, ')', ',' or the end, found 'x1'"),
        ("", "found the end"),
    ],
)
def test_expressions_outside_the_fusion_grammar_are_refused(expression, problem):
    prefix = f"fused kernel 'fused_k', the expression for 'y', {expression!r}: "
    with pytest.raises(KernelCompileError, match=re.escape(prefix) + ".*" + re.escape(problem)):
        _one_output(expression)


def test_a_temporary_is_read_after_it_is_defined_not_before():
    FusedElementwise("k", ("x",), (("y", "t * t"),), temporaries=(("t", "x + 1.0f"),))
    with pytest.raises(KernelCompileError, match="not 'u'"):
        FusedElementwise("k", ("x",), (("y", "t"),), temporaries=(("t", "u"), ("u", "x")))
    with pytest.raises(KernelCompileError, match="not usable"):
        FusedElementwise("k", ("expf",), (("y", "expf(expf)"),))


def _cuda_templates() -> dict[str, str]:
    """The CUDA expression of every elementwise op that has a template, by class name."""
    found, todo = {}, [Elementwise]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        template = vars(cls).get("templates", {}).get("cuda")
        if template is not None:
            found[cls.__name__] = template
    return found


def test_every_expression_the_fusion_pass_writes_is_accepted():
    templates = _cuda_templates()
    assert {"Add", "Maximum", "Less", "Where", "Neg", "Exp", "Silu", "Rsqrt"} <= set(templates)
    written = [t.format("x0", "x1", "x2") for t in templates.values()]
    written += [AddN().expression(["x0", "x1", "x2"], "cuda")]
    written += [Power(p).expression(["x0"], "cuda") for p in (2, 0.5, -1.5, 3.0, 1e-3)]
    written += [f"(x0 * {cuda_float(v)})" for v in
                (np.nan, np.inf, -np.inf, -0.0, 3, 1e-30, 1e20, np.float32(0.1))]  # fmt: skip
    nested = "x0"
    for template in templates.values():  # every op inside the next, as a fused body nests them
        nested = template.format(nested, "x1", "x2")
    for expression in [*written, nested, "(" * 5000 + "x0" + ")" * 5000]:
        _one_output(expression)


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
