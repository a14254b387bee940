"""Op and calculator parameters are checked when the node is built: a wrong one is a clear
error naming the op, never a node whose repr or run fails later, nor a NaN result."""

import dataclasses

import numpy as np
import pytest

import course_lib as cl
from course_lib.models import LlamaConfig, flops_table

x = cl.variable("x", (2, 3), np.float64)
w = cl.variable("w", (3,), np.float64)

BAD = [
    (lambda: x ** "abc", cl.GraphError, "pow: the exponent must be a real number"),
    (lambda: x ** 1j, cl.GraphError, "pow: the exponent"),
    (lambda: cl.sum(x, True), cl.GraphError, "sum: axis must be an integer, got True"),
    (lambda: cl.mean(x, 1.0), cl.GraphError, "mean: axis must be an integer"),
    (lambda: cl.max(x, None, "yes"), cl.GraphError, "max: keepdims must be True or False"),
    (lambda: cl.softmax(x, 7), cl.ShapeError, "softmax.*axis 7 is out of range"),
    (lambda: cl.softmax(x, "a"), cl.GraphError, "softmax: axis must be an integer"),
    (lambda: cl.log_softmax(x, 2), cl.ShapeError, "log_softmax.*axis 2 is out of range"),
    (lambda: cl.rms_norm(x, w, -1.0), cl.ParameterError, "rms_norm: eps must be finite and at "),
    (lambda: cl.rms_norm(x, w, float("nan")), cl.ParameterError, "rms_norm: eps must be finite"),
    (lambda: cl.rms_norm(x, w, "a"), cl.GraphError, "rms_norm: eps must be a real number"),
    (lambda: cl.layer_norm(x, w, w, -1e-5), cl.ParameterError, "layer_norm: eps"),
    (lambda: cl.causal_softmax(x, "a"), cl.GraphError, "causal_softmax: scale must be a real"),
    (lambda: cl.causal_softmax(x, float("inf")), cl.ParameterError, "causal_softmax: scale"),
    (lambda: cl.cast(x, "notadtype"), cl.GraphError, "cast: 'notadtype' is not a dtype"),
    (lambda: cl.cast(x, np.complex128), cl.GraphError, "cast: course_lib computes with"),
    (lambda: cl.split(x, [3, -1]), cl.ParameterError, "split of x: sizes must have sizes >= 0"),
    (lambda: cl.split(x, [1, 5]), cl.ShapeError, r"sizes \[1, 5\] add up to 6, but axis 0 has 2"),
    (lambda: cl.split(x, 0), cl.ShapeError, "not divisible into 0 parts"),
    (lambda: cl.variable("v", (-1, 3)), cl.ParameterError, "variable v: shape must have sizes"),
    (lambda: cl.variable("v", (1.5,)), cl.GraphError, "variable v: shape must be an integer"),
    (lambda: cl.variable("v", (1,), "bogus"), cl.GraphError, "variable v: 'bogus' is not a dtype"),
    (lambda: cl.constant("abc"), cl.GraphError, "constant\\(\\) holds numbers"),
    (lambda: cl.constant(1j), cl.GraphError, "constant\\(\\) holds numbers.*complex128"),
    (lambda: cl.constant([1, "a"]), cl.GraphError, "constant\\(\\) holds numbers"),
    (lambda: cl.Tensor("abc"), cl.GraphError, "Tensor holds numbers"),
    (lambda: cl.Tensor(None), cl.GraphError, "Tensor holds numbers"),
    (lambda: flops_table(LlamaConfig.tiny(), 1, float("nan")), cl.ShapeError,
     "flops_table: seq must be a positive integer, got nan"),
    (lambda: flops_table(LlamaConfig.tiny(), "1", 8), cl.ShapeError, "batch must be a positive"),
    (lambda: dataclasses.replace(LlamaConfig.tiny(), vocab_size=2.5), cl.ShapeError,
     "LlamaConfig.vocab_size must be a positive integer"),
    (lambda: dataclasses.replace(LlamaConfig.tiny(), norm_eps=-1.0), cl.ParameterError,
     "LlamaConfig.norm_eps must be finite and at least 0"),
    (lambda: dataclasses.replace(LlamaConfig.tiny(), rope_theta=float("nan")), cl.ParameterError,
     "LlamaConfig.rope_theta must be finite"),
]  # fmt: skip


@pytest.mark.parametrize("build, error, message", BAD, ids=[m[:40] for _, _, m in BAD])
def test_invalid_parameter_is_refused_when_built(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_valid_parameters_still_build():
    cl.sum(x, np.int64(0)), cl.sum(x, [0, 1]), cl.max(x, None, np.bool_(True))
    cl.rms_norm(x, w, 0.0), cl.split(x, [1, 1]), cl.variable("v", (None, 3), "float32")
    assert flops_table(LlamaConfig.tiny(), 1, 4096.0).total > 0
