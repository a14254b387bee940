"""Op and calculator parameters are checked when the node is built: a wrong one is a clear
error naming the op, never a node whose repr or run fails later, nor a NaN result."""

import dataclasses

import numpy as np
import pytest

import course_lib as cl
from course_lib.models import LlamaConfig, flops_table, param_count, training_memory

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
    (lambda: x ** True, cl.GraphError, "pow: the exponent must be a real number"),
    (lambda: x ** np.array([2.0]), cl.GraphError, "pow: the exponent must be a real number"),
    (lambda: cl.reshape(x, (True, 6)), cl.GraphError, "reshape: shape must be an integer"),
    (lambda: cl.reshape(x, (2.0, 3)), cl.GraphError, "reshape: shape must be an integer"),
    (lambda: cl.reshape(x, (-1, -1)), cl.ParameterError, "at most one -1"),
    (lambda: cl.reshape(x, 6.0), cl.GraphError, "reshape: shape must be a tuple"),
    (lambda: cl.reshape(x, None), cl.GraphError, "reshape: shape must be a tuple"),
    (lambda: cl.broadcast_to(w, None), cl.GraphError, "broadcast_to: shape must be a tuple"),
    (lambda: cl.broadcast_to(w, ("a", 3)), cl.GraphError, "broadcast_to: shape must be an int"),
    (lambda: cl.broadcast_to(w, (float("nan"), 3)), cl.GraphError, "broadcast_to: shape"),
    (lambda: cl.broadcast_to(w, (-2, 3)), cl.ParameterError, "broadcast_to: shape must have"),
    (lambda: cl.transpose(x, 1), cl.GraphError, "permute: axes must be a tuple"),
    (lambda: cl.permute(x, True, 0), cl.GraphError, "permute: axes must be an integer"),
    (lambda: cl.concat([x, x], True), cl.GraphError, "concat: axis must be an integer"),
    (lambda: cl.concat([x, x], None), cl.GraphError, "concat: axis must be an integer"),
    (lambda: cl.split(x, True), cl.GraphError, "sizes must be a tuple of integers, got True"),
    (lambda: cl.split(x, 2, -5), cl.ShapeError, "split of x: axis -5 is out of range"),
    (lambda: cl.split(x, 1.5), cl.GraphError, "split of x: sizes must be a tuple"),
    (lambda: cl.rope(x, -1.0), cl.ParameterError, "rope: theta must be finite and above 0"),
    (lambda: cl.rope(x, start=-1), cl.ParameterError, "rope: start is a position, at least 0"),
    (lambda: cl.rope(x, start=1.5), cl.GraphError, "rope: start must be an integer"),
    (lambda: cl.rope(x, float("nan")), cl.ParameterError, "rope: theta must be finite"),
    (lambda: cl.rope(x, "a"), cl.GraphError, "rope: theta must be a real number"),
    (lambda: cl.rope(x, 1e4, True), cl.GraphError, "rope: seq_axis must be an integer"),
    (lambda: cl.sum_to(x, (3,)), cl.GraphError, "sum_to: like must be a node"),
    (lambda: cl.variable("v", float("nan")), cl.GraphError, "variable v: shape must be a tuple"),
    (lambda: cl.constant(1.0, 5), cl.GraphError, "constant\\(\\): a name must be a non-empty"),
    (lambda: cl.Tensor([1.0], requires_grad="yes"), cl.GraphError, "requires_grad must be True"),
    (lambda: cl.Tensor([1.0], name=3), cl.GraphError, "Tensor: a name must be a non-empty"),
    (lambda: cl.Executor([x], optimize="no"), cl.GraphError, "Executor: optimize must be True"),
    (lambda: cl.jit(lambda a: a, optimize=None), cl.GraphError, "jit: optimize must be True"),
    (lambda: cl.jit(lambda a: a, dynamic=0), cl.GraphError, "jit: dynamic must map"),
    (lambda: cl.jit(lambda a: a, dynamic={0: 0}), cl.GraphError, "jit: dynamic axes must be a"),
    (lambda: cl.jit(lambda a: a, max_traces=-1), cl.ParameterError, "max_traces must be at le"),
    (lambda: cl.jit(lambda a: a, max_traces=2.0), cl.GraphError, "max_traces must be an integ"),
    (lambda: cl.jit(lambda a: a, max_traces=True), cl.GraphError, "max_traces must be an integ"),
    (lambda: cl.pad_to_bucket(np.ones(3), 1), cl.ShapeError, "pad_to_bucket: axis 1 is out of"),
    (lambda: cl.pad_to_bucket(np.ones(3), 0, ()), cl.ParameterError, "buckets must be positive"),
    (lambda: cl.pad_to_bucket(np.ones(3), 0, (0, 8)), cl.ParameterError, "buckets must be pos"),
    (lambda: training_memory(LlamaConfig.tiny(), 1, 8, dtype_bytes=True), cl.ParameterError,
     "dtype_bytes must be 1, 2, 4 or 8, got True"),
    (lambda: training_memory(LlamaConfig.tiny(), 1, 8, optimizer=[]), cl.ParameterError,
     "unknown optimizer"),
    (lambda: param_count("7b"), cl.GraphError, "needs a LlamaConfig, got str"),
]  # fmt: skip


@pytest.mark.parametrize("build, error, message", BAD, ids=[m[:40] for _, _, m in BAD])
def test_invalid_parameter_is_refused_when_built(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_valid_parameters_still_build():
    cl.sum(x, np.int64(0)), cl.sum(x, [0, 1]), cl.max(x, None, np.bool_(True))
    cl.rms_norm(x, w, 0.0), cl.split(x, [1, 1]), cl.variable("v", (None, 3), "float32")
    assert flops_table(LlamaConfig.tiny(), 1, 4096.0).total > 0
    cl.reshape(x, (-1,)), cl.reshape(x, 6), cl.broadcast_to(w, [2, 3]), cl.transpose(x, [1, 0])
    cl.rope(cl.variable("r", (2, 4)), np.float32(500.0), np.int64(0)), x ** np.float64(2.0)
    cl.jit(lambda a: a, dynamic={np.int64(0): [0]}), cl.pad_to_bucket(np.ones(3), -1, [4])
