"""Generated code of fused nodes: numexpr and a compiled C++ loop on the CPU; CUDA C that
compiles with NVRTC for sm_80/sm_90 and runs in the CPU emulator; all compared with NumPy."""


import numpy as np
import pytest

import course_lib as cl
from conftest import needs_gxx, skip_without_nvrtc
from course_lib.errors import DeviceError, GraphError, ParameterError, ShapeError
from course_lib.kernels import nvrtc
from course_lib.passes import fuse_elementwise
from course_lib.passes.fusion.codegen import cpu_source, numexpr_program
from course_lib.passes.fusion.cpu_loop import (
    LOOP_MIN_SIZE,
    _compiled,
    bind_cpu_loop,
    loop_worthy,
    run_cpu_loop,
)

needs_emulator = needs_gxx("the CUDA emulator")
needs_nvrtc = skip_without_nvrtc()


def mixed_graph():
    """Most fusable ops in one tree, with broadcasting (x: (3, 5), bias: (5,))."""
    x, bias, gate = (
        cl.variable("x", (3, 5), np.float32),
        cl.variable("bias", (5,), np.float32),
        (cl.variable("gate", (3, 5), np.float32)),
    )
    h = cl.relu(x + bias) * 0.5 - cl.sigmoid(gate) / (1.0 + cl.exp(-x))
    g = cl.where(gate > 0.0, cl.tanh(h), cl.silu(gate)) + cl.sqrt(x * x + 1.0) ** 2
    return [x, bias, gate], cl.maximum(g, cl.rsqrt(gate * gate + 0.5)) - cl.sin(x) * cl.cos(bias)


def feed_for(xs, seed=0):
    rng = np.random.default_rng(seed)
    return {v: rng.standard_normal(v.shape).astype(np.float32) for v in xs}


def fused_root():
    xs, out = mixed_graph()
    fused = fuse_elementwise(out)
    assert fused.op.name == "fused" and len(fused.op.members()) > 15
    return xs, out, fused


def test_numexpr_code_keeps_float32():
    xs, out, fused = fused_root()
    program = fused.op.numexpr
    assert "." not in program.text.replace("..", "")  # every float literal is a named constant
    feed = feed_for(xs)
    result = program.evaluate([feed[x] for x in fused.inputs])
    assert result.dtype == np.float32
    np.testing.assert_allclose(result, cl.evaluate(out, feed), rtol=2e-5, atol=1e-6)


def test_numexpr_writes_into_a_preallocated_output():
    xs, out, fused = fused_root()  # its maximum computes in float64: cast back into out
    feed = feed_for(xs)
    arrays = [feed[x] for x in fused.inputs]
    target = np.empty(fused.shape, np.float32)
    assert fused.op.numexpr.evaluate(arrays, out=target) is target
    np.testing.assert_allclose(target, fused.op.numexpr.evaluate(arrays), rtol=1e-6)


def test_code_generation_names_the_node_without_an_expression():
    x = cl.variable("x", (3, 3), np.float32)
    product = x @ x
    with pytest.raises(GraphError, match=r"matmul at node \(x@x\) \(shape \(3, 3\), inputs"):
        numexpr_program([x], product)


def test_integer_inputs_fall_back_to_the_interpreter():
    i, j = cl.variable("i", (4,), np.int64), cl.variable("j", (4,))
    fused = fuse_elementwise((i + j) * 2)
    values = {i: np.arange(4), j: np.arange(4)}  # j unknown dtype, fed integers
    assert fused.op.name == "fused"
    assert fused.op.numexpr.evaluate(list(values.values())) is None
    assert cl.evaluate(fused, values).tolist() == [0, 4, 8, 12]


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_generated_cuda_compiles_with_nvrtc(arch):
    _, _, fused = fused_root()
    spec = fused.op.kernel
    compiled = nvrtc.compile_source(spec.source, f"{spec.name}.cu", arch)
    assert set(compiled.resources) == {spec.name}
    assert compiled.resources[spec.name].spill_bytes == 0


@needs_emulator
@pytest.mark.parametrize("seed", [0, 1])
def test_generated_cuda_runs_in_the_emulator(seed):
    xs, out, fused = fused_root()
    feed = feed_for(xs, seed)
    result = fused.op.run_kernel(np, *[feed[x] for x in fused.inputs], mode="emulator")
    np.testing.assert_allclose(result, cl.evaluate(out, feed), rtol=2e-5, atol=2e-6)


@needs_emulator
def test_lecture_kernel_from_the_graph_runs_in_the_emulator():
    a, b, c, d = (cl.variable(n, (1000,), np.float32) for n in "ABCD")
    fused = fuse_elementwise(d + (a + b) * c)
    assert "out_y[i] = (x3 + ((x0 + x1) * x2));" in fused.op.kernel.source
    assert fused.op.kernel.memory_accesses == 5
    feed = feed_for([a, b, c, d])
    result = fused.op.run_kernel(np, *[feed[x] for x in (a, b, c, d)], mode="emulator")
    np.testing.assert_allclose(result, feed[d] + (feed[a] + feed[b]) * feed[c], rtol=1e-6)


@needs_emulator
def test_cpu_loop_matches_numpy_and_runs_large_float32_graphs():
    xs, out, fused = fused_root()
    feed = feed_for(xs)
    result = fused.op.run_kernel(np, *[feed[x] for x in fused.inputs], mode="cpu")
    np.testing.assert_allclose(result, cl.evaluate(out, feed), rtol=2e-5, atol=2e-6)
    assert "for (long long i = 0; i < n; ++i)" in cpu_source(fused.op.kernel)
    big = [cl.variable(n, (LOOP_MIN_SIZE,), np.float32) for n in "ABCD"]
    graph = big[3] + (big[0] + big[1]) * big[2]
    run = cl.Executor(graph, optimize=True)
    feed = feed_for(big)
    assert loop_worthy([feed[x] for x in run.outputs[0].inputs])
    before = _compiled.cache_info().misses + _compiled.cache_info().hits
    np.testing.assert_allclose(run.run(feed), cl.evaluate(graph, feed), rtol=1e-6)
    assert _compiled.cache_info().misses + _compiled.cache_info().hits == before + 1


@needs_emulator
@pytest.mark.parametrize("mode", ["cpu", "emulator"])
def test_run_kernel_writes_into_out(mode):
    a, b, c, d = (cl.variable(name, (1000,), np.float32) for name in "ABCD")
    fused = fuse_elementwise(d + (a + b) * c)
    feed = feed_for((a, b, c, d))
    arrays = [feed[x] for x in fused.inputs]
    target = np.empty(fused.shape, np.float32)
    assert fused.op.run_kernel(np, *arrays, mode=mode, out=target) is target
    np.testing.assert_allclose(target, feed[d] + (feed[a] + feed[b]) * feed[c], rtol=1e-6)
    with pytest.raises(GraphError, match="float32"):
        fused.op.run_kernel(np, *arrays, mode=mode, out=np.empty(fused.shape, np.float64))


def test_cpu_loop_checks_its_arrays():
    _, _, fused = fused_root()
    kernel = fused.op.kernel
    ones = np.ones((3, 5), np.float32)
    with pytest.raises(ShapeError, match="takes inputs"):
        run_cpu_loop(kernel, [ones])
    with pytest.raises(GraphError, match="C-contiguous float32"):
        run_cpu_loop(kernel, [ones, ones.astype(np.float64), ones])
    assert not loop_worthy([ones, ones, ones])  # small: numexpr runs it


def test_cpu_loop_writes_only_into_a_writeable_out_apart_from_its_inputs():
    _, _, fused = fused_root()
    kernel = fused.op.kernel
    shared = np.ones(20, np.float32)
    inputs = [shared[:15].reshape(3, 5), *(np.ones((3, 5), np.float32) for _ in kernel.inputs[1:])]
    frozen = np.frombuffer(bytes(60), np.float32).reshape(3, 5)  # immutable memory
    for out in (frozen, inputs[-1], shared[5:].reshape(3, 5)):
        with pytest.raises(ParameterError, match="out must be writeable and overlap no input"):
            run_cpu_loop(kernel, inputs, out=out)
    assert not frozen.any() and all((a == 1).all() for a in inputs)
    unaligned = np.frombuffer(bytes(61), np.uint8)[1:].view(np.float32).reshape(3, 5)
    with pytest.raises(GraphError, match="aligned to 4 bytes"):
        run_cpu_loop(kernel, inputs, out=unaligned)


@needs_emulator
def test_the_emulated_kernel_checks_its_out_before_it_runs():
    """``run_kernel(mode="emulator", out=...)``: a read-only, mistyped or misshapen ``out``
    is refused with the kernel's name before anything runs (not NumPy's ValueError after)."""
    xs, _, fused = fused_root()
    feed = feed_for(xs)
    inputs = [np.asarray(feed[x], np.float32) for x in fused.inputs]
    shape = np.broadcast_shapes(*(a.shape for a in inputs))
    frozen = np.frombuffer(bytes(4 * int(np.prod(shape))), np.float32).reshape(shape)
    cases = [(frozen, ParameterError, "out is read-only"),
             (np.zeros(shape, np.float64), GraphError, "out must be float32, got float64"),
             (np.zeros((1, *shape), np.float32), ShapeError, "out must be of shape")]  # fmt: skip
    for out, error, message in cases:
        with pytest.raises(error, match=message):
            fused.op.run_kernel(np, *inputs, mode="emulator", out=out)
    out = np.zeros(shape, np.float32)
    assert fused.op.run_kernel(np, *inputs, mode="emulator", out=out) is out


def test_an_out_on_the_wrong_device_is_refused_before_the_kernel_runs():
    """A GPU kernel's ``out`` must be a device array and the emulator's a host array: each
    refused with the kernel's name before anything runs (not CuPy's or NumPy's error after;
    the GPU case is checked before any GPU is needed)."""
    xs, _, fused = fused_root()
    feed = feed_for(xs)
    inputs = [np.asarray(feed[x], np.float32) for x in fused.inputs]
    shape = np.broadcast_shapes(*(a.shape for a in inputs))
    with pytest.raises(DeviceError, match="out is a NumPy array, but the GPU kernel"):
        fused.op.run_kernel(np, *inputs, mode="gpu", out=np.zeros(shape, np.float32))
    with cl.use_device("strict"):
        elsewhere = cl.to_device(np.zeros(shape, np.float32))
    with pytest.raises(DeviceError, match="out is StrictArray, but the GPU kernel"):
        fused.op.run_kernel(np, *inputs, mode="gpu", out=elsewhere)
    for mode in ("emulator", None):  # None: the default mode, the emulator off the GPU
        with pytest.raises(DeviceError, match=r"out of fused.*\(emulator\)"):
            fused.op.run_kernel(np, *inputs, mode=mode, out=elsewhere)


@needs_emulator
def test_a_bound_loop_reads_its_arrays_at_each_call_and_keeps_them_alive():
    x = cl.variable("x", (1000,), np.float32)
    kernel = fuse_elementwise(x * 3.0 + 1.0).op.kernel
    values = np.linspace(-1, 1, 1000, dtype=np.float32)
    out = np.full(1000, np.nan, np.float32)
    loop = bind_cpu_loop(kernel, [values], out)
    loop()
    np.testing.assert_array_equal(out, values * 3.0 + 1.0)  # no FMA: NumPy's float32 steps
    values[:] = 0.5  # the loop holds pointers, so it sees the new numbers
    loop()
    np.testing.assert_array_equal(out, np.full(1000, 2.5, np.float32))
    del values, out  # the loop keeps its arrays alive
    loop()
    np.testing.assert_array_equal(loop.arrays[-1], np.full(1000, 2.5, np.float32))
    empty = np.empty(0, np.float32)
    bind_cpu_loop(kernel, [empty], empty)()  # nothing to run, nothing compiled
    with pytest.raises(ShapeError, match="one shape"):
        bind_cpu_loop(kernel, [np.ones(3, np.float32)], np.ones(4, np.float32))


def test_a_python_number_input_stays_weak_in_the_numexpr_program():
    """An op may return a Python number (``count``): NumPy's operators take it in the
    array's dtype, and so does the fused program (float32 stays float32, not float64)."""
    x, n = cl.variable("x", (5,), np.float32), cl.variable("n", (), np.float64)
    body = (x - 1.0) / n
    values = np.linspace(-2, 2, 5, dtype=np.float32)
    result = numexpr_program([x, n], body).evaluate([values, 3.0])
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result, (values - 1.0) / 3.0)
    strong = numexpr_program([x, n], body).evaluate([values, np.float64(3.0)])
    assert strong.dtype == np.float64  # a NumPy float64 is strong, as in NumPy


def test_the_optimised_cross_entropy_gradient_keeps_float32():
    logits = cl.variable("logits", (6, 11), np.float32)
    targets = cl.variable("t", (6,), np.int64)
    (g,) = cl.grad(cl.cross_entropy(logits, targets), [logits])
    rng = np.random.default_rng(0)
    feed = {logits: rng.standard_normal((6, 11)).astype(np.float32),
            targets: rng.integers(0, 11, 6)}  # fmt: skip
    plain, fused = cl.evaluate(g, feed), cl.Executor(g, optimize=True).run(feed)
    assert plain.dtype == fused.dtype == np.float32
    np.testing.assert_allclose(fused, plain, rtol=1e-6, atol=1e-8)


@needs_emulator
def test_cpu_loops_take_libmvecs_simd_math_on_x86_64_glibc():
    """exp and tanh in a fused loop vectorise with glibc's libmvec (8 at a time), within a few
    float32 ulp of NumPy's."""
    import platform  # noqa: PLC0415
    import re  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from course_lib.kernels import FusedElementwise, native  # noqa: PLC0415

    libc, version = platform.libc_ver()
    if platform.machine() != "x86_64" or libc != "glibc":
        pytest.skip("libmvec's SIMD functions are linked on x86-64 glibc")
    has_tanhf = tuple(int(part) for part in version.split(".")[:2]) >= (2, 35)
    expression = "expf(a) * tanhf(b)" if has_tanhf else "expf(a) * b"  # SIMD tanhf: glibc 2.35
    kernel = FusedElementwise("fused_simd_math", ("a", "b"), (("y", expression),))
    library, vector_math = native.load_simd_library(cpu_source(kernel), f"{kernel.name}.cpp")
    assert vector_math, "the loop fell back to the scalar functions"
    symbols = Path(library._name).read_bytes()
    for function in (rb"expf", rb"tanhf")[: 1 + has_tanhf]:
        assert re.search(rb"_ZGV[bcde]N\d+v_" + function, symbols), function
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-20, 20, LOOP_MIN_SIZE).astype(np.float32) for _ in range(2))
    expected = np.exp(a) * (np.tanh(b) if has_tanhf else b)
    np.testing.assert_allclose(run_cpu_loop(kernel, [a, b]), expected, rtol=4e-6)


@needs_emulator
def test_strided_views_run_the_compiled_loop_not_numexpr(monkeypatch):
    """Column slices (a fused projection's halves) are copied and run as the compiled loop:
    numexpr's strided evaluation was over 20x slower in the LLaMA's SiLU adjoint."""
    a, b = (cl.variable(name, (256, 256), np.float32) for name in "ab")
    fused = fuse_elementwise(cl.silu(a) * b + 1.0)
    wide = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)
    views = [wide[:, :256], wide[:, 256:]]  # neither is C-contiguous
    assert loop_worthy(views)
    monkeypatch.setattr(type(fused.op.numexpr), "evaluate", lambda *args: pytest.fail("numexpr"))
    got = fused.op.compute(np, *[dict(zip((a, b), views))[x] for x in fused.inputs])
    x, y = (v.astype(np.float64) for v in views)
    np.testing.assert_allclose(got, x / (1 + np.exp(-x)) * y + 1, rtol=1e-5, atol=1e-6)


@needs_emulator
def test_where_libmvec_does_not_link_it_is_tried_once_per_process(monkeypatch):
    """Loops build with the scalar functions, and no build after the first probe retries it."""
    from course_lib.kernels import FusedElementwise, KernelCompileError, native  # noqa: PLC0415

    real_build, tried = native.build_library, []

    def build(unit, filename="module.cu", native_flag=False, counting=False, extra_flags=()):
        if "-lmvec" in extra_flags:
            tried.append(filename)
            raise KernelCompileError("cannot find -lmvec")
        return real_build(unit, filename, native_flag, counting, extra_flags)

    monkeypatch.setattr(native, "build_library", build)
    native.libmvec_links.cache_clear()
    try:
        for name in ("fused_no_mvec_a", "fused_no_mvec_b"):
            kernel = FusedElementwise(name, ("a",), (("y", "expf(a)"),))
            library, vector_math = native.load_simd_library(cpu_source(kernel), f"{name}.cpp")
            assert not vector_math and hasattr(library, name)
        assert tried == ["libmvec_probe.cpp"]
    finally:
        native.libmvec_links.cache_clear()
