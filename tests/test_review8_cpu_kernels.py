"""Review of the boundary between Python and the CPU kernels (kernels/cpu_kernels.py): every
public kernel function checks what its C++ loop cannot check (dtype, shapes, ids, the causal
softmax's T <= S) and raises instead of reading or writing outside an array. The calls that
crashed (or corrupted the heap) before run in a fresh interpreter each, so a regression fails
the test instead of killing pytest."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from course_lib.kernels import cpu_kernels

needs_kernels = pytest.mark.skipif(
    not cpu_kernels.worth_it(np.zeros(cpu_kernels.MIN_SIZE, np.float32)), reason="no C++ compiler"
)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PRELUDE = """\
import numpy as np
from threadpoolctl import threadpool_limits
from course_lib.kernels import cpu_kernels as k

def expect(error, call):
    try:
        call()
    except error as exc:
        print("refused", type(exc).__name__, flush=True)
    else:
        print("ACCEPTED", flush=True)
"""


def _refusals(code: str) -> list[str]:
    """Run ``code`` (after a prelude defining ``expect``) in a fresh interpreter; its lines.
    A crash (a write outside an array, a segfault) fails here with the exit status."""
    result = subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(code)], capture_output=True,
        text=True, timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
    )  # fmt: skip
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr[-2000:])
    lines = result.stdout.split()
    assert "ACCEPTED" not in lines, result.stdout
    return result.stdout.splitlines()


@needs_kernels
def test_the_causal_softmax_refuses_more_queries_than_keys():
    """T > S + 1 made the first visible key of a row negative: the kernel wrote before the
    row (heap corruption, "double free or corruption" at exit)."""
    lines = _refusals("""
        s = np.ones((4, 40, 10), np.float32)
        expect(ValueError, lambda: k.causal_softmax(s, 1.0))
        expect(ValueError, lambda: k.causal_softmax(np.ones(20000, np.float32), 1.0))
    """)
    assert lines == ["refused ShapeError"] * 2


@needs_kernels
@pytest.mark.parametrize("threads", [1, 2])
def test_the_embedding_adjoint_refuses_ids_outside_the_table(threads):
    """A bad id was dropped on one thread and written outside the count table on two
    (segfault or heap corruption); g's rows must match the ids too."""
    lines = _refusals(f"""
        g = np.ones((64, 512), np.float32)
        with threadpool_limits({threads}):
            for bad in (-1, 9, 10**9):
                ids = np.zeros(64, np.int64)
                ids[17] = bad
                expect(IndexError, lambda: k.rows_added_at(g, ids, 9))
            expect(ValueError, lambda: k.rows_added_at(g, np.zeros(65, np.int64), 9))
            expect(TypeError, lambda: k.rows_added_at(g, np.zeros(64), 9))
            ids = np.arange(64) % 9
            table = np.zeros((9, 512), np.float32)
            np.add.at(table, ids, g)
            print(k.rows_added_at(g, ids, 9).tobytes() == table.tobytes())
    """)
    assert lines == ["refused OutOfRangeError"] * 3 + ["refused ShapeError", "refused GraphError",
                                                        "True"]  # fmt: skip


@needs_kernels
def test_cross_entropy_refuses_targets_outside_the_classes():
    """A target outside [0, n) read outside the logits (segfault)."""
    lines = _refusals("""
        x = np.ones((64, 512), np.float32)
        for bad in (-1, 512, 10**12):
            t = np.zeros(64, np.int64)
            t[3] = bad
            expect(IndexError, lambda: k.cross_entropy(x, t))
        expect(TypeError, lambda: k.cross_entropy(x, np.zeros(64)))
        print(k.cross_entropy(x, np.arange(64))[0] == -np.log(np.float32(512)))
    """)
    assert lines == ["refused OutOfRangeError"] * 3 + ["refused GraphError", "True"]


@needs_kernels
def test_sums_need_two_arrays_of_one_shape():
    """One array read a second pointer after the end of the list (segfault); a shorter one
    was read past its end."""
    lines = _refusals("""
        x = np.ones(2**16, np.float32)
        expect(ValueError, lambda: k.sum_of(x))
        expect(ValueError, lambda: k.sum_of(x, x[:100]))
        expect(ValueError, lambda: k.sum_of(x, x, x.reshape(256, 256)))
    """)
    assert lines == ["refused ShapeError"] * 3


@needs_kernels
def test_every_kernel_refuses_inputs_of_other_shapes():
    """Each kernel read its other inputs for as many elements (or rows, or table rows) as
    the first one has: a shorter one was read past its end."""
    lines = _refusals("""
        x, short = np.ones((64, 256), np.float32), np.ones((8, 256), np.float32)
        w, w_short = np.ones(256, np.float32), np.ones(16, np.float32)
        r = np.ones((2, 40, 3, 64), np.float32)
        cos, cos_short = np.ones((40, 32), np.float32), np.ones((4, 32), np.float32)
        calls = [
            lambda: k.product(short, x), lambda: k.silu_grad(short, x),
            lambda: k.adam_moment(x, short, 0.9, 2),
            lambda: k.adamw_update(x, short, x, decay=None, bias2=1.0, eps=1e-8, step_size=1.0),
            lambda: k.softmax_grad(short, x, 1.0), lambda: k.rms_norm(x, w_short, 1e-5),
            lambda: k.rms_norm_grad_x(short, x, w, 1e-5),
            lambda: k.rms_norm_grad_x(x, x, w_short, 1e-5),
            lambda: k.rms_norm_grad_w(short, x, 1e-5),
            lambda: k.rope(r, cos_short, cos_short, 1), lambda: k.rope(r, cos, cos_short, 1),
            lambda: k.rope(r, cos, cos, 3), lambda: k.rope(r[..., :63], cos, cos, 1),
        ]
        for call in calls:
            expect(ValueError, call)
    """)
    assert lines == ["refused ShapeError"] * 13


@needs_kernels
@pytest.mark.parametrize("dtype", ["float64", "float16", "int32", ">f4"])
def test_the_kernels_refuse_arrays_that_are_not_float32(dtype):
    """Other dtypes were read as float32 bits: silently wrong numbers (or, narrower ones,
    read past their end: heap corruption)."""
    lines = _refusals(f"""
        x = np.linspace(-3, 3, 2**16).astype("{dtype}")
        good = np.linspace(-3, 3, 2**16).astype(np.float32)
        calls = [lambda: k.silu(x), lambda: k.product(good, x), lambda: k.sum_of(good, x),
                 lambda: k.softmax(x.reshape(256, 256)),
                 lambda: k.rms_norm(good.reshape(256, 256), x[:256], 1e-5)]
        for call in calls:
            expect(TypeError, call)
    """)
    assert lines == ["refused TypeError"] * 5


@needs_kernels
def test_a_0d_array_keeps_its_shape():
    x = np.array(1.5, np.float32)
    with np.errstate(all="ignore"):
        assert cpu_kernels.silu(x).shape == ()
        assert cpu_kernels.product(x, x).shape == () and cpu_kernels.product(x, x) == x * x
        assert cpu_kernels.sum_of(x, x, x).shape == ()


@needs_kernels
def test_rows_of_no_elements_give_empty_results():
    """A last axis of 0 divided by it (ZeroDivisionError); NumPy's formulas give empty arrays."""
    z, w = np.zeros((3, 0), np.float32), np.zeros(0, np.float32)
    assert cpu_kernels.rms_norm(z, w, 1e-5).shape == (3, 0)
    assert cpu_kernels.rms_norm_grad_x(z, z, w, 1e-5).shape == (3, 0)
    assert cpu_kernels.softmax_grad(z, z, 0.5).shape == (3, 0)
    assert cpu_kernels.causal_softmax(np.zeros((2, 0, 0), np.float32), 1.0).shape == (2, 0, 0)


@needs_kernels
@pytest.mark.parametrize("layout", ["C", "3-d", "float64", "strided"])
def test_transposed_of_any_array_is_numpys_contiguous_copy(layout):
    """``transposed`` promises ``np.ascontiguousarray(a)``; an array that is not a transposed
    float32 matrix was read as one (the transpose of the values)."""
    a = np.arange(48 * 40, dtype=np.float32).reshape(48, 40)
    a = {"C": a, "3-d": a.reshape(6, 8, 40), "float64": a.astype(np.float64).T,
         "strided": a[::2, ::3]}[layout]  # fmt: skip
    got = cpu_kernels.transposed(a)
    assert got.dtype == a.dtype and got.flags.c_contiguous
    assert got.tobytes() == np.ascontiguousarray(a).tobytes()
