"""Review 11: BatchNorm folding against torch, and the checks of the decoder layers."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.models.batchnorm import batchnorm_affine, conv2d, fold_batchnorm
from course_lib.models.layers import sinusoidal_positions

torch = pytest.importorskip("torch")


def _bn_params(rng, c=4):
    return rng.random(c) + 0.5, rng.standard_normal(c), rng.standard_normal(c), rng.random(c) + 0.1


def test_folding_keeps_the_conv_dtype_as_torch_does(rng):
    """float32 conv weights came back float64."""
    from torch.nn.utils.fusion import fuse_conv_bn_weights

    w, b = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    gamma, beta, mean, var = _bn_params(rng)
    w2, b2 = fold_batchnorm(w.astype(np.float32), b.astype(np.float32), gamma, beta, mean, var)
    conv = (torch.tensor(w.astype(np.float32)), torch.tensor(b.astype(np.float32)))
    bn = [torch.tensor(a) for a in (gamma, beta, mean, var)]
    tw, tb = fuse_conv_bn_weights(*conv, bn[2], bn[3], 1e-5, bn[0], bn[1])
    assert (w2.dtype, b2.dtype) == (np.float32, np.float32) == (tw.numpy().dtype, tb.numpy().dtype)
    np.testing.assert_allclose(w2, tw.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(b2, tb.detach().numpy(), rtol=1e-6)
    w2, b2 = fold_batchnorm(np.ones((4, 1, 1, 1), int), np.zeros(4, int), gamma, beta, mean, var)
    assert (w2.dtype, b2.dtype) == (np.float64, np.float64)


@pytest.mark.parametrize("name", ["gamma", "beta", "mean"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_batchnorm_affine_refuses_non_finite_parameters(rng, name, bad):
    """Only var was checked: a NaN gamma gave NaN weights, an infinite mean an infinite bias."""
    values = dict(zip(("gamma", "beta", "mean", "var"), _bn_params(rng)))
    values[name][1] = bad
    with pytest.raises(cl.ParameterError, match=f"batchnorm_affine: {name} must be finite"):
        batchnorm_affine(**values)


@pytest.mark.parametrize("var", [-1e-6, np.inf])
def test_batchnorm_affine_refuses_a_negative_or_infinite_variance(var):
    """var = -1e-6 passed since var + eps > 0; var = inf folded the channel to beta."""
    expected = r"var finite and at least 0.*got var \[(-1.e-06|inf)\]"
    with pytest.raises(cl.ParameterError, match=expected):
        batchnorm_affine([1.0], [0.0], [0.0], [var], eps=1e-5)


def test_conv2d_refuses_an_empty_kernel():
    """A 0x2 kernel gave an output larger than the image (torch refuses it too)."""
    with pytest.raises(cl.ShapeError, match=r"conv2d: the kernel \(0, 2\) must be at least 1x1"):
        conv2d(np.ones((1, 3, 4, 4)), np.ones((2, 3, 0, 2)), np.ones(2))


@pytest.mark.parametrize(
    ("args", "error"),
    [((-1, 8), cl.ParameterError), ((3, 8, -2), cl.ParameterError), ((2.5, 8), cl.GraphError),
     ((3, 8, 1.5), cl.GraphError), ((3, 8.0), cl.GraphError)],
)  # fmt: skip
def test_sinusoidal_positions_checks_its_integers(args, error):
    """seq=-1 was NumPy's "negative dimensions", start=-2 or 1.5 a silently made table."""
    with pytest.raises(error, match="sinusoidal_positions"):
        sinusoidal_positions(*args)


def test_sinusoidal_positions_match_the_paper():
    table = sinusoidal_positions(4, 7, start=3)
    t, i = np.arange(3, 7)[:, None], np.arange(0, 7, 2)
    np.testing.assert_allclose(table[:, 0::2], np.sin(t / 10000.0 ** (i / 7)))
    np.testing.assert_allclose(table[:, 1::2], np.cos(t / 10000.0 ** (i[:3] / 7)))
