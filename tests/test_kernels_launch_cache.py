"""A launch reads and compiles its kernel once per process: later launches touch no file."""

import builtins
import io
import os
import pathlib
import types

import numpy as np
import pytest
from numpy.testing import assert_allclose

from course_lib.kernels import emulator, gpu, launch, reference, sources

pytestmark = pytest.mark.skipif(
    not emulator.emulator_available() and not os.environ.get("CI"),
    reason="the CUDA emulator needs g++ on PATH",
)


@pytest.fixture
def no_file_reads(monkeypatch):
    """Make every way of opening or reading a file fail from here on."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"a launch read a file: {args[:1]}")

    for owner, name in ((builtins, "open"), (io, "open"), (pathlib.Path, "read_text"),
                        (pathlib.Path, "read_bytes"), (pathlib.Path, "open")):  # fmt: skip
        monkeypatch.setattr(owner, name, refuse)


def test_second_launch_reads_no_source(rng, no_file_reads):
    x = rng.standard_normal((5, 33)).astype(np.float32)
    with pytest.raises(AssertionError, match="read a file"):
        open("/dev/null")  # the fixture is active
    for _ in range(3):
        assert_allclose(launch.softmax(x, mode="emulator"), reference.softmax(x),
                        rtol=1e-5, atol=1e-7)  # fmt: skip


@pytest.fixture(autouse=True)
def warm(rng):
    """The kernels of these tests, loaded before file access is refused."""
    launch.softmax(np.ones((1, 3), np.float32), mode="emulator")


def test_sources_are_read_once(monkeypatch):
    reads = []
    original = pathlib.Path.read_text

    def counted(self, *args, **kwargs):
        reads.append(self.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_text", counted)
    sources.read_source.cache_clear()
    for _ in range(3):
        sources.read_source("softmax.cu")
    assert reads.count("softmax.cu") == 1


def test_gpu_modules_are_built_once(monkeypatch):
    """On a GPU, CuPy's RawModule is built on the first lookup only (a stand-in CuPy here)."""
    built = []

    class RawModule:
        def __init__(self, code, options):
            built.append(code)

        def get_function(self, name):
            return f"kernel {name}"

    monkeypatch.setattr(gpu, "_cupy", lambda: types.SimpleNamespace(RawModule=RawModule))
    gpu.compile_module.cache_clear()
    launch._kernel.cache_clear()
    try:
        kernels = {launch.get_kernel("rms_norm.cu", "rms_norm_rows", "gpu") for _ in range(5)}
    finally:
        gpu.compile_module.cache_clear()
        launch._kernel.cache_clear()
    assert kernels == {"kernel rms_norm_rows"} and len(built) == 1
    assert built[0] == sources.read_source("rms_norm.cu")


def test_fused_kernels_are_built_without_multiply_add_contraction(monkeypatch):
    """A generated fused kernel is compiled with --fmad=false (``d + (a + b) * c`` rounds after
    the product, as NumPy and CuPy's one-op kernels do: ``optimize=True`` keeps the plain
    path's bits on a GPU); the hand-written kernels keep their multiply-adds. A stand-in CuPy
    here, as above."""
    from course_lib.kernels import FusedElementwise

    built = {}

    class RawModule:
        def __init__(self, code, options):
            built[code] = options

        def get_function(self, name):
            return lambda grid, block, args: None

    monkeypatch.setattr(gpu, "_cupy", lambda: types.SimpleNamespace(RawModule=RawModule))
    monkeypatch.setattr(launch, "_xp", lambda mode: np)
    gpu.compile_module.cache_clear()
    launch._kernel.cache_clear()
    fused = FusedElementwise("fused_lecture", ("a", "b", "c", "d"), (("e", "d + (a + b) * c"),))
    try:
        launch.fused(fused, *[np.ones(4, np.float32)] * 4, mode="gpu")
        launch.get_kernel("rms_norm.cu", "rms_norm_rows", "gpu")
    finally:
        gpu.compile_module.cache_clear()
        launch._kernel.cache_clear()
    assert "--fmad=false" in built[fused.source]
    assert "--fmad=false" not in built[sources.read_source("rms_norm.cu")]
