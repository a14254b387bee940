"""Conv + BatchNorm folding (W2 = W·R(c), B2 = B·R(c) + P(c)) and the fusion search."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.errors import ShapeError
from course_lib.models.batchnorm import batchnorm_affine, conv2d, fold_batchnorm
from course_lib.perf import search_fusions


def test_folded_conv_equals_conv_then_batchnorm(rng):
    x = rng.standard_normal((2, 3, 7, 6))
    w, b = rng.standard_normal((4, 3, 3, 2)), rng.standard_normal(4)
    gamma, beta = rng.random(4) + 0.5, rng.standard_normal(4)
    mean, var = rng.standard_normal(4), rng.random(4) + 0.1
    y = conv2d(x, w, b)
    channel = (slice(None), None, None)
    z = (y - mean[channel]) / np.sqrt(var[channel] + 1e-5) * gamma[channel] + beta[channel]
    w2, b2 = fold_batchnorm(w, b, gamma, beta, mean, var)
    np.testing.assert_allclose(conv2d(x, w2, b2), z, rtol=1e-12, atol=1e-12)
    scale, shift = batchnorm_affine(gamma, beta, mean, var)
    np.testing.assert_allclose(w2, w * scale[:, None, None, None])
    np.testing.assert_allclose(b2, b * scale + shift)


def test_conv2d_matches_a_direct_sum(rng):
    x, w, b = rng.standard_normal((1, 2, 4, 4)), rng.standard_normal((3, 2, 2, 2)), np.zeros(3)
    out = conv2d(x, w, b)
    assert out.shape == (1, 3, 3, 3)
    direct = sum(x[0, c, 1 + u, 2 + v] * w[1, c, u, v] for c in range(2) for u in range(2)
                 for v in range(2))  # fmt: skip
    assert out[0, 1, 1, 2] == pytest.approx(direct)


def test_folding_errors_name_the_shapes():
    with pytest.raises(ShapeError, match="one value per channel"):
        batchnorm_affine(np.ones(3), np.ones(3), np.ones(2), np.ones(3))
    with pytest.raises(ShapeError, match="C_out = 3"):
        fold_batchnorm(np.ones((4, 1, 1, 1)), np.ones(4), *[np.ones(3)] * 4)
    with pytest.raises(ShapeError, match="C_in"):
        conv2d(np.ones((1, 2, 3, 3)), np.ones((1, 3, 1, 1)), np.ones(1))


def test_search_times_every_subset_of_regions():
    x, y = cl.variable("x", (64,), np.float32), cl.variable("y", (64,), np.float32)
    t = cl.tanh(x + y)
    outputs = [cl.sum(t * 2.0 - 1.0), cl.exp(-t)]
    feed = {x: np.ones(64, np.float32), y: np.ones(64, np.float32)}
    found = search_fusions(outputs, feed, repeats=1)
    assert len(found) == 2**3  # three regions: tanh(x + y), t * 2 - 1, exp(-t)
    assert found == sorted(found, key=lambda c: c.seconds)
    assert sorted(len(c.fused) for c in found) == [0, 1, 1, 1, 2, 2, 2, 3]
    expected = cl.evaluate(outputs, feed)
    for candidate in found:
        for a, b in zip(cl.evaluate(candidate.outputs, feed), expected):
            np.testing.assert_allclose(a, b, rtol=1e-6)
