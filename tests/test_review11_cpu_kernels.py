"""Review 11 of the CPU kernels (kernels/cpu_kernels.py) against NumPy: the kernels that promise
NumPy's bits give them (signed zeros and NaNs included) on 1 and 2 threads, at sizes around
MIN_SIZE, for inputs that are strided, negative-strided, misaligned, read-only or Fortran-ordered,
and never write their inputs; the wrappers refuse what their loops cannot take with ShapeError
instead of an IndexError from inside, and hand the loops aligned ids."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from course_lib.errors import OutOfRangeError, ShapeError
from course_lib.kernels import cpu_kernels as k

needs_kernels = pytest.mark.skipif(
    not k.worth_it(np.zeros(k.MIN_SIZE, np.float32)), reason="no C++ compiler"
)
M = k.MIN_SIZE
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 3e38, -3e38], np.float32)


def _values(n: int, seed: int = 0) -> np.ndarray:
    """Normal numbers with signed zeros, infinities, NaNs, subnormals and huge ones mixed in."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    x[rng.integers(0, n, min(n, 40))] = rng.choice(SPECIAL, min(n, 40))
    return x


def _layouts(x: np.ndarray) -> dict[str, np.ndarray]:
    """``x``'s values stored C-contiguous, negative-strided, strided, at an odd byte offset,
    read-only, and (a matrix) Fortran-ordered."""
    flipped = (slice(None, None, -1),) * x.ndim
    buffer = np.zeros(2 * x.size, np.float32)
    buffer[::2] = x.ravel()
    raw = np.zeros(x.nbytes + 1, np.uint8)
    odd = raw[1:].view(np.float32).reshape(x.shape)
    odd[...] = x
    frozen = x.copy()
    frozen.flags.writeable = False
    out = {"c": x, "negative": x[flipped].copy()[flipped], "strided": buffer[::2].reshape(x.shape),
           "misaligned": odd, "read-only": frozen}  # fmt: skip
    if x.ndim == 2:
        out["fortran"] = np.asfortranarray(x)
    return out


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


_BITWISE = {
    "product": (2, lambda a, b: a * b, k.product),
    "sum_of": (3, lambda a, b, c: (a + b) + c, k.sum_of),
    "adam_moment 1": (2, lambda m, g: m * 0.9 + (1.0 - 0.9) * g,
                      lambda m, g: k.adam_moment(m, g, 0.9, 1)),
    "adam_moment 2": (2, lambda m, g: m * 0.999 + (1.0 - 0.999) * (g * g),
                      lambda m, g: k.adam_moment(m, g, 0.999, 2)),
}  # fmt: skip


@needs_kernels
@pytest.mark.parametrize("name", sorted(_BITWISE))
@pytest.mark.parametrize("size", [M - 1, M, 2 * M + 1, 3 * M + 65])
def test_elementwise_kernels_give_numpys_bits_for_any_layout_and_thread_count(name, size):
    count, formula, kernel = _BITWISE[name]
    inputs = [_values(size, seed) for seed in range(count)]
    with np.errstate(all="ignore"):
        want = _bits(formula(*inputs))
    for threads in (1, 2):
        with threadpool_limits(threads):
            for layout in _layouts(inputs[0]):
                given = [_layouts(x)[layout] for x in inputs]
                before = [_bits(x) for x in given]
                assert _bits(kernel(*given)) == want, (name, size, threads, layout)
                assert [_bits(x) for x in given] == before, (name, layout)


@needs_kernels
@pytest.mark.parametrize("shape, axis", [((2, 67, 3, 64), 1), ((M // 64 + 3, 64), 0)])
def test_rope_gives_numpys_bits_for_any_layout_and_thread_count(shape, axis):
    x = _values(int(np.prod(shape))).reshape(shape)
    half = shape[-1] // 2
    angles = np.random.default_rng(1).standard_normal((shape[axis], half)).astype(np.float32)
    cos, sin = np.cos(angles), np.sin(angles)
    cos[0, 0], sin[-1, -1] = -0.0, np.inf
    table = [1] * len(shape)
    table[axis], table[-1] = shape[axis], half
    c, s = cos.reshape(table), sin.reshape(table)
    first, second = x[..., :half], x[..., half:]
    with np.errstate(all="ignore"):
        want = _bits(np.concatenate([first * c - second * s, second * c + first * s], axis=-1))
    for threads in (1, 2):
        with threadpool_limits(threads):
            for layout, given in _layouts(x).items():
                got = k.rope(given, _layouts(cos)[layout], _layouts(sin)[layout], axis)
                assert _bits(got) == want, (threads, layout)


@needs_kernels
@pytest.mark.parametrize("ids", ["random", "one row", "ends"])
@pytest.mark.parametrize("shape", [(64, 256), (300, 128), (37, 1031)])
def test_the_embedding_adjoint_accumulates_repeated_ids_as_np_add_at(ids, shape):
    rows = 50
    g = _values(shape[0] * shape[1]).reshape(shape)
    pick = {"random": np.random.default_rng(2).integers(0, rows, shape[0]),
            "one row": np.full(shape[0], rows // 2),
            "ends": np.where(np.arange(shape[0]) % 3, rows - 1, 0)}[ids]  # fmt: skip
    want = np.zeros((rows, shape[1]), np.float32)
    with np.errstate(all="ignore"):
        np.add.at(want, pick, g)
    for threads in (1, 2):
        with threadpool_limits(threads):
            for layout, given in _layouts(g).items():
                got = k.rows_added_at(given, pick.astype(np.int32), rows)
                assert _bits(got) == _bits(want), (threads, layout)
    with pytest.raises(OutOfRangeError, match="negative ids are refused"):
        k.rows_added_at(g, np.where(pick == pick[0], -1, pick), rows)


@needs_kernels
def test_ids_reach_the_loops_aligned():
    """Misaligned int64 ids (a view at an odd byte offset) went to the C loops as they were:
    ``np.ascontiguousarray`` keeps a contiguous array that is not aligned, and reading a
    ``long long`` there is undefined behaviour in C."""
    ids = np.random.default_rng(3).integers(0, 50, 300)
    raw = np.zeros(ids.nbytes + 3, np.uint8)
    odd = raw[3:].view(np.int64)
    odd[...] = ids
    assert not odd.flags.aligned
    checked = k._checked_ids(odd, 50, "ids")
    assert checked.flags.aligned and checked.flags.c_contiguous and checked.dtype == np.int64
    np.testing.assert_array_equal(checked, ids)
    g = _values(300 * 128).reshape(300, 128)
    assert _bits(k.rows_added_at(g, odd, 50)) == _bits(k.rows_added_at(g, ids, 50))
    logits = _values(300 * 50).reshape(300, 50)
    assert _bits(k.cross_entropy(logits, odd)) == _bits(k.cross_entropy(logits, ids))
    assert k._checked_ids(np.array(7), 9, "ids").shape == ()


@needs_kernels
def test_cross_entropy_takes_the_vocabularys_first_and_last_class_and_refuses_others():
    logits = _values(129 * 127).reshape(129, 127)
    for target in (0, 126):
        targets = np.full(129, target)
        with np.errstate(all="ignore"):
            m = logits.max(-1, keepdims=True)
            shifted = logits - np.where(np.isfinite(m), m, 0)
            want = (shifted - np.log(np.exp(shifted).sum(-1, keepdims=True)))[:, target]
        got = k.cross_entropy(logits, targets)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for bad in (-1, 127):
        with pytest.raises(OutOfRangeError):
            k.cross_entropy(logits, np.full(129, bad))


@needs_kernels
def test_softmax_of_rows_of_no_elements_is_empty():
    """The reshape to (-1, 1, 0) failed with NumPy's "cannot reshape array of size 0" (the
    Softmax op returns an empty array for such rows)."""
    for shape in [(5, 0), (2, 3, 0), (0, 5)]:
        got = k.softmax(np.zeros(shape, np.float32))
        assert got.shape == shape and got.dtype == np.float32


@needs_kernels
@pytest.mark.parametrize("call", [
    lambda x: k.softmax_grad(x, x, 1.0),
    lambda x: k.rms_norm_grad_w(x, x, 1e-5),
])  # fmt: skip
def test_zero_dimensional_arrays_are_a_shape_error(call):
    """These read ``shape[-1]`` of a 0-d array: an IndexError ("tuple index out of range")
    instead of the ShapeError their siblings raise."""
    with pytest.raises(ShapeError, match="0-d"):
        call(np.array(1.0, np.float32))


@needs_kernels
def test_transposed_says_a_c_contiguous_array_comes_back_uncopied():
    """The docstring said every other array is NumPy's copy; a C-contiguous one comes back
    as a view of itself (a write to the result writes the input)."""
    a = np.ones((3, 4), np.float32)
    assert np.shares_memory(k.transposed(a), a)
    assert "no copy" in k.transposed.__doc__
    f = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    got = k.transposed(f)
    assert got.flags.c_contiguous and not np.may_share_memory(got, f)
    np.testing.assert_array_equal(got, f)
