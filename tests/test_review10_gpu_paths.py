"""The GPU-only paths of the kernel launchers, the device description and benchmarks/gpu.py,
run here with shape-only stand-ins for CuPy arrays and kernels that record their launches."""

import importlib.util
import math
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from course_lib import backend
from course_lib.errors import ParameterError, ShapeError
from course_lib.kernels import FusedElementwise, gpu, launch

INT_MAX = 2**31 - 1


class FakeArray:
    """A float32 C-contiguous CuPy array without memory (so of any size)."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.ndim, self.size = len(self.shape), math.prod(self.shape)
        self.dtype = np.dtype(np.float32)
        self.flags = types.SimpleNamespace(c_contiguous=True)
        self.data = types.SimpleNamespace(ptr=0)

    def reshape(self, *shape):
        return FakeArray(shape)


def _fake_cupy():
    return types.SimpleNamespace(
        ndarray=FakeArray, float32=np.float32,
        empty=lambda shape, dtype=None: FakeArray(np.atleast_1d(shape) if shape != () else ()),
        empty_like=lambda a: FakeArray(a.shape), zeros=lambda shape, dtype=None: FakeArray(()),
    )  # fmt: skip


@pytest.fixture
def launches(monkeypatch):
    """Launches in mode "gpu" go to a fake CuPy and are recorded: (kernel, grid, block, args)."""
    recorded = []

    def kernel(name):
        return lambda grid, block, args, shared_mem=0: recorded.append((name, grid, block, args))

    module = types.SimpleNamespace(get_function=kernel)
    monkeypatch.setattr(launch, "_xp", lambda mode: _fake_cupy() if mode == "gpu" else np)
    monkeypatch.setattr(launch, "get_kernel", lambda filename, name, mode=None: kernel(name))
    monkeypatch.setattr(gpu, "compile_module", lambda *args, **kwargs: module)
    return recorded


def test_copy_strided_default_grid_keeps_its_int_index_from_wrapping(launches):
    # 2**30 + 1 outputs: one block per 256 of them made a thread's index step past 2**31 and
    # wrap negative (the kernel then wrote before y); the grid is now capped.
    launch.copy_strided(FakeArray((2**30 + 1,)), 1, mode="gpu")
    ((_, grid, block, args),) = launches
    n = int(args[2])  # np.int32 arithmetic would wrap as the kernel does
    assert n == 2**30 + 1 and n - 1 + grid[0] * block[0] <= INT_MAX


def test_grid_stride_loops_that_would_wrap_are_refused(launches):
    near = FakeArray((INT_MAX - 9,))
    with pytest.raises(ShapeError, match="copy_strided indexes with 32-bit ints"):
        launch.copy_strided(near, 1, mode="gpu")
    with pytest.raises(ShapeError, match="reduce_sum_shuffle indexes with 32-bit ints"):
        launch.reduce_sum(near, mode="gpu")
    with pytest.raises(ShapeError, match="copy_strided indexes"):
        launch.copy_strided(FakeArray((1000,)), 1, grid=2**23, block=256, mode="gpu")
    spec = FusedElementwise("fused_add", ("a", "b"), (("c", "a + b"),))
    with pytest.raises(ShapeError, match="fused_add indexes with 32-bit ints"):
        launch.fused(spec, near, near, mode="gpu")
    assert launches == []


def test_copy_strided_checks_its_grid_and_block(launches):
    # CuPy launches grid 0 (or a negative one) as 1 block and fails on 2000 threads with a
    # bare CUDA error; the emulator refused both: now both modes give the same error
    x = FakeArray((100,))
    with pytest.raises(ParameterError, match="copy_strided's grid"):
        launch.copy_strided(x, 1, grid=0, mode="gpu")
    with pytest.raises(ParameterError, match="block"):
        launch.copy_strided(x, 1, grid=4, block=2000, mode="gpu")
    assert launches == []
    launch.copy_strided(x, 1, grid=3, block=32, mode="gpu")
    assert launches[0][1:3] == ((3,), (32,))


def test_describe_device_names_the_current_gpu(monkeypatch):
    runtime = types.SimpleNamespace(
        getDevice=lambda: 1, getDeviceProperties=lambda i: {"name": f"GPU number {i}".encode()}
    )
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime), __version__="14")
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(backend, "get_device", lambda: "gpu")
    assert backend.describe_device() == "device: GPU (GPU number 1) via CuPy 14"


@pytest.fixture
def bench():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("review10_benchmark_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ncu_child_times_the_sizes_the_emulator_counted(bench, monkeypatch):
    commands = []

    def run(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 1, "", "no permission")

    monkeypatch.setattr(subprocess, "run", run)
    assert bench.ncu_counters(small=True) == [] and bench.ncu_counters() == []
    assert commands[0][-2:] == ["--ncu-child", "--small"] and commands[1][-1] == "--ncu-child"


def test_an_ncu_that_hangs_ends_in_a_message(bench, monkeypatch, capsys):
    def run(command, timeout, **kwargs):
        raise subprocess.TimeoutExpired(command, timeout)

    monkeypatch.setattr(subprocess, "run", run)
    assert bench.ncu_counters() == []
    assert "ncu took over 240 s" in capsys.readouterr().out
