"""Review of the CPU kernels' numbers (kernels/cpu_kernels.py, cpu_pool.hpp, cpu_products.hpp)
and of their build (kernels/native.py): each kernel against the op's NumPy code at sizes
around the vector width and the thread split, with NaN, infinities, signed zeros, subnormals
and overflowing values; the same bits on any thread count, at any address and from two Python
threads at once; and a build that cannot happen leaves the ops on NumPy's code."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from course_lib.kernels import cpu_kernels, native
from course_lib.kernels.errors import KernelCompileError
from course_lib.models.optim import AdamMoment, AdamWUpdate
from course_lib.ops.attention import CausalSoftmax, SoftmaxGrad
from course_lib.ops.elementwise import AddN, Mul, Sigmoid, Silu, SiluGrad
from course_lib.ops.nn import CrossEntropy, Softmax
from course_lib.ops.norms import RMSNorm, RMSNormGradW, RMSNormGradX
from course_lib.ops.reductions import stable_log_sum_exp
from course_lib.ops.rope import Rope
from course_lib.ops.shape import scatter_add

needs_kernels = pytest.mark.skipif(
    not cpu_kernels.worth_it(np.zeros(cpu_kernels.MIN_SIZE, np.float32)), reason="no C++ compiler"
)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Row lengths around the vectors (8 and 16 floats), the softmax's blocks of 16, and odd ones
LENGTHS = [1, 2, 7, 15, 16, 17, 31, 33, 63, 64, 65, 67, 127, 128, 129, 1023, 4097]
SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 1e-40, 3e38, -3e38, 1e30,
                     88.7, -88.7, 104.0, -104.0], np.float32)  # fmt: skip


def _data(rng, shape, specials=True):
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    if specials:
        flat = x.reshape(-1)
        places = rng.choice(flat.size, size=max(1, flat.size // 7), replace=False)
        flat[places] = rng.choice(SPECIALS, size=places.size)
    return x


def _both(monkeypatch, compute, *args):
    """``compute(np, *args)`` through the kernels, then through the op's NumPy code."""
    with monkeypatch.context() as patch, np.errstate(all="ignore"):
        patch.setattr(cpu_kernels, "worth_it", lambda *a: True)
        patch.setattr(cpu_kernels, "splits", lambda *a: True)
        kernel = compute(np, *args)
        patch.setattr(cpu_kernels, "worth_it", lambda *a: False)
        patch.setattr(cpu_kernels, "splits", lambda *a: False)
        return kernel, compute(np, *args)


def _bits(result, expected):
    """NumPy's bits: NaN where NumPy has NaN (payloads aside), every other value bit for bit."""
    assert result.dtype == expected.dtype and result.shape == expected.shape
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(result), nan)
    assert result[~nan].tobytes() == expected[~nan].tobytes()


def _close(result, expected, rtol=1e-5, atol=1e-6):
    """NumPy's NaN and infinities in the same places, the rest within float32 rounding."""
    assert result.dtype == expected.dtype and result.shape == expected.shape
    np.testing.assert_array_equal(np.isnan(result), np.isnan(expected))
    infinite = np.isinf(expected)
    np.testing.assert_array_equal(result[infinite], expected[infinite])
    np.testing.assert_allclose(result, expected, rtol=rtol, atol=atol)


@needs_kernels
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("specials", [False, True])
def test_every_kernel_gives_the_ops_numpy_results(n, specials, monkeypatch):
    """NumPy's bits where the docstrings promise them (RoPE, Adam, the sums and products, the
    embedding's adjoint), else NumPy's values to float32 rounding with its NaN and inf."""
    rng = np.random.default_rng(n)
    for rows in (1, 5):
        x, y, z = (_data(rng, (rows, n), specials) for _ in range(3))
        w = _data(rng, (n,), specials)
        p = cpu_kernels.softmax(_data(rng, (rows, n), False))
        close = {
            "softmax": _both(monkeypatch, Softmax(-1).compute, x),
            "softmax_grad": _both(monkeypatch, SoftmaxGrad(0.37).compute, x, p),
            "sigmoid": _both(monkeypatch, Sigmoid().compute, x),
            "silu": _both(monkeypatch, Silu().compute, x),
            "silu_grad": _both(monkeypatch, SiluGrad().compute, y, x),
            "rms_norm": _both(monkeypatch, RMSNorm(1e-5).compute, x, w),
            "rms_norm_grad_x": _both(monkeypatch, RMSNormGradX(1e-5).compute, y, x, w),
            "cross_entropy": _both(monkeypatch, CrossEntropy().compute, x, np.arange(rows) % n),
        }
        if rows <= n:
            close["causal_softmax"] = _both(monkeypatch, CausalSoftmax(0.37).compute, x[None])
        for name, (kernel, expected) in close.items():
            _close(kernel, expected, atol=1e-5 if "grad" in name else 1e-6)
        _close(*_both(monkeypatch, RMSNormGradW(1e-5).compute, y, x, w), rtol=1e-4, atol=1e-4)
        ids = rng.integers(0, 3, rows)
        table = np.zeros((3, n), np.float32)
        with np.errstate(all="ignore"):
            scatter_add(np, table, ids, x)
            _bits(cpu_kernels.rows_added_at(x, ids, 3), table)
        exact = [
            _both(monkeypatch, AdamMoment(0.9, 2).compute, x, y),
            _both(monkeypatch, AdamMoment(0.95, 1).compute, x, y),
            _both(
                monkeypatch,
                AdamWUpdate(0.9, 0.95, 1e-8, 0.1).compute,
                x,
                y,
                np.abs(z),
                np.asarray(1e-3),
                np.asarray(3),
            ),  # fmt: skip
            _both(monkeypatch, AddN().compute, x, y, z),
            _both(monkeypatch, Mul().compute, x, y),
        ]
        if n % 2 == 0:
            exact.append(_both(monkeypatch, Rope(10000.0, -2).compute, x[None]))
        for kernel, expected in exact:
            _bits(kernel, expected)


@needs_kernels
def test_rows_of_special_values_give_numpys_results(monkeypatch):
    """Rows of −inf, NaN, +inf, zeros, subnormals and values whose squares or scaled scores
    overflow float32: the kernels give what NumPy's formulas give (RMSNorm of 1e30 is 0 on
    both, as PyTorch's float32 rms_norm: Σx² overflows)."""
    rows = np.array([[-np.inf] * 6, [np.nan] * 6, [np.inf] * 6, [0.0] * 6, [-0.0] * 6,
                     [1e30] * 6, [1e-45] * 6, [1e-40] * 6, [3e38] * 6, [3e38, -3e38, 0, 0, 0, 0],
                     [np.inf, 1, 2, 3, 4, 5], [-np.inf, 1, 2, 3, 4, 5], [2e19] * 6],
                    np.float32)  # fmt: skip
    w = np.array([1, -1, 2, 0.5, -0.0, 3], np.float32)
    g = np.linspace(-3, 3, rows.size, dtype=np.float32).reshape(rows.shape)
    for eps in (1e-5, 0.0):
        _close(*_both(monkeypatch, RMSNorm(eps).compute, rows, w))
        _close(*_both(monkeypatch, RMSNormGradX(eps).compute, g, rows, w))
        _close(*_both(monkeypatch, RMSNormGradW(eps).compute, g, rows, w))
    _close(*_both(monkeypatch, Softmax(-1).compute, rows))
    targets = np.arange(len(rows)) % 6
    with np.errstate(all="ignore"):
        _, shifted, log_sum = stable_log_sum_exp(np, rows, -1)
        picked = np.take_along_axis(shifted - log_sum, targets[:, None], -1)[:, 0]
        _close(cpu_kernels.cross_entropy(rows, targets), picked)
    for scale in (1.0, 0.0, -1.0, 1e30):
        _close(*_both(monkeypatch, CausalSoftmax(scale).compute, rows[None, :6]))
        _close(*_both(monkeypatch, SoftmaxGrad(scale).compute, g, np.abs(g)))


@needs_kernels
def test_silu_is_nan_at_minus_infinity_as_the_array_code(monkeypatch):
    """The docstring said "−0 far left": at −inf both the kernel (−inf / inf) and the array
    code (−inf · 0) give NaN; SiLU's adjoint is NaN at ±inf on both."""
    x = np.tile(np.array([-np.inf, -1e4, np.inf], np.float32), cpu_kernels.MIN_SIZE)
    silu, expected = _both(monkeypatch, Silu().compute, x)
    _bits(silu, expected)
    assert np.isnan(silu[0]) and silu[1] == 0 and np.signbit(silu[1]) and silu[2] == np.inf
    grad, expected = _both(monkeypatch, SiluGrad().compute, np.ones_like(x), x)
    _bits(grad, expected)
    assert np.isnan(grad[0]) and np.isnan(grad[2])


def _shifted(a, floats):
    """A copy of ``a`` starting ``floats`` floats past a 64-byte boundary."""
    buffer = np.empty(a.size + 32, np.float32)
    start = -(buffer.ctypes.data // 4) % 16 + floats
    view = buffer[start : start + a.size].reshape(a.shape)
    view[...] = a
    return view


def _calls(x, y):
    """Every kernel on rows of x (and y), as functions of them."""
    rows, n = x.shape
    half = n // 2
    table = np.linspace(-1, 1, rows * half, dtype=np.float32).reshape(rows, half)
    ids = np.arange(rows) % 5
    return {
        "softmax": lambda x, y: cpu_kernels.softmax(x),
        "causal_softmax": lambda x, y: cpu_kernels.causal_softmax(x.reshape(-1, min(3, n), n), 0.7),
        "softmax_grad": lambda x, y: cpu_kernels.softmax_grad(x, y, 0.5),
        "cross_entropy": lambda x, y: cpu_kernels.cross_entropy(x, ids % n),
        "sigmoid": lambda x, y: cpu_kernels.sigmoid(x),
        "silu": lambda x, y: cpu_kernels.silu(x),
        "silu_grad": lambda x, y: cpu_kernels.silu_grad(y, x),
        "rms_norm": lambda x, y: cpu_kernels.rms_norm(x, y[0], 1e-5),
        "rms_norm_grad_x": lambda x, y: cpu_kernels.rms_norm_grad_x(y, x, y[1], 1e-5),
        "rms_norm_grad_w": lambda x, y: cpu_kernels.rms_norm_grad_w(y, x, 1e-5),
        "adam_moment": lambda x, y: cpu_kernels.adam_moment(x, y, 0.9, 2),
        "adamw_update": lambda x, y: cpu_kernels.adamw_update(
            x,
            y,
            np.abs(x),
            decay=np.float32(0.99),
            bias2=np.float32(1.3),
            eps=1e-8,
            step_size=np.float32(1e-3),
        ),  # fmt: skip
        "sum_of": lambda x, y: cpu_kernels.sum_of(x, y, x),
        "product": lambda x, y: cpu_kernels.product(x, y),
        "rows_added_at": lambda x, y: cpu_kernels.rows_added_at(x, ids, 5),
        "rope": lambda x, y: cpu_kernels.rope(x[:, : 2 * half], table, table[::-1], 0),
        "transposed": lambda x, y: cpu_kernels.transposed(np.asfortranarray(x)),
    }


@needs_kernels
@pytest.mark.parametrize("n", [1, 7, 33, 129, 4097])
def test_the_same_bits_on_any_thread_count_at_any_address_and_layout(n):
    """Rows (or blocks of 64 floats) split over 1, 2 or 3 threads, inputs starting at odd
    addresses, and non-contiguous inputs (copied first): every result the same bits."""
    rng = np.random.default_rng(n)
    rows = max(3 * 2**16 // n, 6) // 3 * 3
    x = (rng.standard_normal((rows, n)) * 4).astype(np.float32)
    y = rng.standard_normal((rows, n)).astype(np.float32)
    with threadpool_limits(limits=1, user_api="blas"):
        expected = {name: call(x, y) for name, call in _calls(x, y).items()}
    for threads in (2, 3):
        with threadpool_limits(limits=threads, user_api="blas"):
            for name, call in _calls(x, y).items():
                inputs = [(x, y), (_shifted(x, 1), _shifted(y, 3)),
                          (np.asfortranarray(x), y[::-1][::-1]),
                          (np.repeat(x, 2, axis=1)[:, ::2], y)]  # fmt: skip
                for a, b in inputs:
                    assert call(a, b).tobytes() == expected[name].tobytes(), (name, threads)


@needs_kernels
def test_two_python_threads_calling_kernels_and_blas_at_once_get_their_own_results():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((258, 129)).astype(np.float32)
    y = rng.standard_normal((258, 129)).astype(np.float32)
    m = rng.standard_normal((200, 200)).astype(np.float32)
    calls = list(_calls(x, y).values())
    with threadpool_limits(limits=2, user_api="blas"):
        expected = [call(x, y).tobytes() for call in calls]
        product = m @ m
        wrong = []

        def work(seed):
            order = np.random.default_rng(seed).integers(0, len(calls) + 1, 150)
            for i in order:
                if i == len(calls):
                    if not np.allclose(m @ m, product, rtol=1e-4, atol=1e-3):
                        wrong.append("matmul")
                elif calls[i](x, y).tobytes() != expected[i]:
                    wrong.append(i)

        threads = [threading.Thread(target=work, args=(seed,)) for seed in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert wrong == []


def _fresh_interpreter(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
        timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, **env},
    )  # fmt: skip


def test_a_missing_compiler_is_named_in_the_error(monkeypatch):
    """It said "install g++ … or set COURSE_LIB_CXX" when COURSE_LIB_CXX was set (to a
    compiler that is not there): now it names what it looked for."""
    monkeypatch.setenv(native.COMPILER_ENV, "/no/such/clang++-99")
    with pytest.raises(KernelCompileError, match=r"'/no/such/clang\+\+-99' \(COURSE_LIB_CXX\)"):
        native.build_library("int x;", "x.cpp")


def test_the_build_does_not_depend_on_the_locales_encoding(tmp_path):
    """The compiler's input (sources with UTF-8 comments) and its messages went through the
    locale's codec: in an ASCII locale every build raised UnicodeEncodeError, which no caller
    catches (not a KernelCompileError)."""
    tmp_path.chmod(0o700)
    result = _fresh_interpreter("""
        import locale
        from course_lib.kernels import native
        from course_lib.kernels.errors import KernelCompileError
        print(locale.getpreferredencoding(False))
        comment = "// x \\u2212 y \\u00b7 \\u2018z\\u2019\\n"
        native.build_library(comment + 'extern "C" int f(void) { return 1; }', "f.cpp")
        try:
            native.build_library("int g(void) { return nope; } " + comment, "g.cpp")
        except KernelCompileError as exc:
            print("refused", "nope" in str(exc))
    """, {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
          native.CACHE_ENV: str(tmp_path)})  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    encoding, refused = result.stdout.splitlines()
    if "UTF" in encoding.upper():
        pytest.skip(f"the C locale's encoding is {encoding} here")
    assert refused == "refused True"


@pytest.mark.parametrize("compiler", ["missing", "failing", "garbage"])
def test_a_build_that_cannot_happen_leaves_the_ops_on_numpys_code(compiler, tmp_path):
    """No compiler, one that fails, one whose library does not load: one warning naming why,
    the ops give NumPy's results, and a direct kernel call raises KernelCompileError."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    script = tmp_path / "cxx"
    script.write_text('#!/bin/sh\nfor a; do [ "$p" = -o ] && echo junk > "$a"; p=$a; done\n')
    script.chmod(0o700)
    cxx = {"missing": str(tmp_path / "none"), "failing": "false", "garbage": str(script)}
    result = _fresh_interpreter(
        """
        import warnings
        import numpy as np
        from course_lib.kernels import cpu_kernels
        from course_lib.kernels.errors import KernelCompileError
        from course_lib.ops.nn import Softmax
        x = np.linspace(-3, 3, 2**15, dtype=np.float32).reshape(64, -1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = Softmax(-1).compute(np, x)
        e = np.exp(x - x.max(-1, keepdims=True))
        print(y.tobytes() == (e / e.sum(-1, keepdims=True)).tobytes())
        print([type(w.message).__name__ for w in caught])
        print(cpu_kernels.threads_described())
        try:
            cpu_kernels.softmax(x)
        except KernelCompileError:
            print("KernelCompileError")
    """,
        {native.COMPILER_ENV: cxx[compiler], native.CACHE_ENV: str(cache)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [
        "True",
        "['CpuKernelsUnavailable']",
        "one thread (no CPU kernels)",
        "KernelCompileError",
    ]
