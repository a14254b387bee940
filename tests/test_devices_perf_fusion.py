"""Notebooks 04-06 on a device: exercise checks compare on the host, and what measures or
computes on the CPU on purpose (traversal, compiled fused loops, numexpr, the BatchNorm
references) takes NumPy arrays and refuses device arrays by name, while a fused node in a
graph runs on the current device.

These tests pin the strict stand-in device (course_lib.strict_device) themselves, so they say
the same on every device `make test` runs them on.
"""

import numpy as np
import pytest

import course_lib as cl
from course_lib import backend, passes
from course_lib.exercises import verify
from course_lib.exercises.training import NO_TWO
from course_lib.models import batchnorm
from course_lib.passes.fusion.cpu_loop import bind_cpu_loop, run_cpu_loop
from course_lib.perf.traversal import sum_row_by_row, traversal_seconds


@pytest.fixture
def strict():
    with cl.use_device("strict"):
        yield


def _mlp_grads(x, y, w1, w2, factor=2.0):
    pre = x @ w1
    hidden = np.maximum(pre, 0.0)
    delta = factor * (hidden @ w2 - y) / y.size
    return x.T @ ((delta @ w2.T) * (pre > 0)), hidden.T @ delta


def test_mlp_grads_check_compares_the_engines_gradients_on_the_host(strict):
    verdict = verify("04.mlp_grads", _mlp_grads)
    assert verdict.passed, verdict.message
    wrong = verify("04.mlp_grads", lambda *args: _mlp_grads(*args, factor=1.0))
    assert not wrong.passed and wrong.mistake == NO_TWO.name


def test_traversal_measures_host_arrays_and_refuses_device_arrays(strict):
    on_device = backend.to_device(np.ones((4, 4)))
    with pytest.raises(cl.DeviceError, match="traversal_seconds"):
        traversal_seconds({"row order": on_device}, repeats=1)
    with pytest.raises(cl.DeviceError, match="sum_row_by_row"):
        sum_row_by_row(on_device)
    times = traversal_seconds({"row order": np.ones((4, 4))}, repeats=1)  # NumPy: the CPU
    assert list(times) == ["row order"]


def _fused():
    a, b = (cl.variable(name, (8,), np.float32) for name in "ab")
    node = passes.fuse_elementwise(a * b + a)
    assert isinstance(node.op, passes.Fused)
    return a, b, node


def test_fused_cpu_code_refuses_device_arrays(strict):
    _, _, node = _fused()
    host = np.ones(8, np.float32)
    device = backend.to_device(host)
    xp = backend.xp()
    for run in (
        lambda: node.op.run_kernel(xp, device, device, mode="cpu"),
        lambda: node.op.run_kernel(xp, device, device, mode="emulator"),
        lambda: run_cpu_loop(node.op.kernel, [device, device]),
        lambda: bind_cpu_loop(node.op.kernel, [host, host], device),
        lambda: node.op.numexpr.evaluate([device, device]),
    ):
        with pytest.raises(cl.DeviceError, match="CPU only"):
            run()


def test_fused_cpu_code_runs_host_arrays_whatever_the_device(strict):
    _, _, node = _fused()
    host = np.arange(8, dtype=np.float32)
    want = host * host + host
    got = node.op.run_kernel(backend.xp(), host, host, mode="emulator")
    assert isinstance(got, np.ndarray) and np.array_equal(got, want)
    assert np.array_equal(node.op.numexpr.evaluate([host, host]), want)


def test_a_fused_node_in_a_graph_runs_on_the_current_device(strict):
    a, b, node = _fused()
    feed = {a: np.arange(8, dtype=np.float32), b: np.full(8, 2.0, np.float32)}
    value = cl.evaluate(node, feed)
    assert backend.device_of(value) == "strict"
    assert np.array_equal(cl.to_numpy(value), np.arange(8) * 3.0)


def test_batchnorm_references_refuse_device_arrays(strict):
    x, w, bias = np.ones((1, 2, 4, 4)), np.ones((3, 2, 3, 3)), np.zeros(3)
    gamma = beta = mean = var = np.ones(3)
    with pytest.raises(cl.DeviceError, match="conv2d: x"):
        batchnorm.conv2d(backend.to_device(x), w, bias)
    with pytest.raises(cl.DeviceError, match="fold_batchnorm: weight"):
        batchnorm.fold_batchnorm(backend.to_device(w), bias, gamma, beta, mean, var)
    with pytest.raises(cl.DeviceError, match="batchnorm_affine: var"):
        batchnorm.batchnorm_affine(gamma, beta, mean, backend.to_device(var))
    assert batchnorm.conv2d(x, w, bias).shape == (1, 3, 2, 2)  # host data: as on the CPU
