"""Native code is built and loaded safely: private caches, verified libraries, a fallback
when the compiler fails, a watchdog that stops kernels that hang or crash, user libraries
loaded only in child processes, and read-only arrays refused where a kernel may write."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import course_lib as cl
from conftest import needs_gxx
from course_lib.exercises import verify
from course_lib.kernels import emulator, launch, native, profile
from course_lib.kernels.errors import KernelCompileError, KernelLaunchError, UnsafeCacheError
from course_lib.passes.fusion import cpu_loop

needs_emulator = needs_gxx("the CUDA emulator")
as_root = pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
UNIT = 'extern "C" __attribute__((visibility("default"))) int answer() { return 42; }  // %s\n'


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv(native.CACHE_ENV, str(path))
    return path


@needs_emulator
def test_cache_directory_is_created_private(cache):
    native.build_library(UNIT % "private", "private.cpp")
    assert os.stat(cache).st_mode & 0o777 == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_cache_directory_others_can_write_is_refused(cache, mode):
    cache.mkdir()
    cache.chmod(mode)
    with pytest.raises(UnsafeCacheError, match=r"others may write to it.*chmod 700"):
        native.cache_dir()


@as_root
def test_cache_directory_of_another_user_is_refused(cache):
    cache.mkdir(mode=0o700)
    os.chown(cache, 65534, 65534)
    with pytest.raises(UnsafeCacheError, match="belongs to user id 65534"):
        native.cache_dir()


def test_symlinked_cache_directory_is_refused(cache, tmp_path):
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    cache.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeCacheError, match="not a plain directory"):
        native.cache_dir()


def test_unsafe_default_cache_falls_back_to_a_private_temporary_directory(tmp_path, monkeypatch):
    monkeypatch.delenv(native.CACHE_ENV, raising=False)
    shared = tmp_path / "shared"
    (shared / "course_lib" / "emulator").mkdir(parents=True)
    (shared / "course_lib" / "emulator").chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    chosen = native.cache_dir()
    assert shared not in chosen.parents
    assert os.stat(chosen).st_mode & 0o777 == 0o700 and os.stat(chosen).st_uid == os.getuid()


@needs_emulator
def test_planted_library_is_rebuilt_not_loaded(cache):
    genuine = native.build_library(UNIT % "planted", "planted.cpp")
    expected = genuine.read_bytes()
    other = native.build_library(UNIT.replace("42", "666") % "other", "other.cpp")
    genuine.write_bytes(other.read_bytes())  # same name, someone else's code
    assert native.build_library(UNIT % "planted", "planted.cpp") == genuine
    assert genuine.read_bytes() == expected
    assert native.load_library(UNIT % "planted", "planted.cpp").answer() == 42


@needs_emulator
def test_corrupted_cached_library_is_rebuilt(cache):
    library = native.build_library(UNIT % "corrupt", "corrupt.cpp")
    library.write_bytes(library.read_bytes()[:100])  # truncated, e.g. by a full disk
    assert native.load_library(UNIT % "corrupt", "corrupt.cpp").answer() == 42


@as_root
@needs_emulator
def test_library_owned_by_another_user_is_rebuilt(cache):
    library = native.build_library(UNIT % "owner", "owner.cpp")
    os.chown(library, 65534, 65534)
    native.build_library(UNIT % "owner", "owner.cpp")
    assert os.stat(library).st_uid == os.getuid()


@pytest.fixture
def broken_compiler(tmp_path, monkeypatch):
    script = tmp_path / "broken-g++"
    script.write_text("#!/bin/sh\nexit 3\n")
    script.chmod(0o755)
    monkeypatch.setenv(native.COMPILER_ENV, str(script))
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "cache"))
    return script


def test_broken_compiler_is_a_clear_error(broken_compiler):
    with pytest.raises(KernelCompileError, match=r"exit status 3\):\n\(it printed nothing\)"):
        native.build_library(UNIT % "broken", "broken.cpp")


def test_fusion_falls_back_to_numexpr_when_the_compiler_fails(broken_compiler, monkeypatch):
    monkeypatch.setattr(cpu_loop, "_build_failure", [])
    cpu_loop._compiled.cache_clear()
    v = cl.variable("v", (cpu_loop.LOOP_MIN_SIZE,), np.float32)
    out = cl.tanh(v * 3.25 + 0.125) * 1.5  # an expression no other test compiles
    feed = {v: np.linspace(-2, 2, cpu_loop.LOOP_MIN_SIZE, dtype=np.float32)}
    with pytest.warns(cpu_loop.CompiledLoopUnavailable, match="exit status 3"):
        actual = cl.Executor(out, optimize=True).run(feed)
    np.testing.assert_allclose(actual, cl.Executor(out).run(feed), rtol=1e-6)
    assert not cpu_loop.loop_worthy([feed[v]])  # and it is not tried again


HANG = r"""
extern "C" __global__ void wait_for_neighbour(int* flags) {
    volatile int* f = flags;
    if (threadIdx.x == 0) { while (f[1] == 0) { } }  // thread 1 never runs: thread 0 spins
    f[threadIdx.x] = 1;
}
"""
CRASH = r"""
extern "C" __global__ void trap(float* x) { if (threadIdx.x == 0) __builtin_trap(); }
"""


@needs_emulator
def test_hanging_kernel_is_stopped_by_the_watchdog(monkeypatch):
    monkeypatch.setenv(emulator.TIMEOUT_ENV, "1")
    kernel = emulator.compile_module(HANG, "hang.cu").get_function("wait_for_neighbour")
    start = time.monotonic()
    with pytest.raises(KernelLaunchError, match=r"hang\.cu: kernel wait_for_neighbour did not "
                                                r"finish within 1 s.*__syncthreads"):  # fmt: skip
        kernel(1, 2, [np.zeros(2, np.int32)])
    assert time.monotonic() - start < 10


@needs_emulator
def test_hanging_kernel_is_interrupted_by_ctrl_c():
    kernel = emulator.compile_module(HANG, "hang.cu").get_function("wait_for_neighbour")
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        kernel(1, 2, [np.zeros(2, np.int32)])
    timer.cancel()
    assert time.monotonic() - start < 10


@needs_emulator
def test_crashing_kernel_raises_instead_of_killing_python():
    kernel = emulator.compile_module(CRASH, "crash.cu").get_function("trap")
    with pytest.raises(KernelLaunchError, match=r"crash\.cu: kernel trap crashed \(SIGILL\)"):
        kernel(1, 1, [np.zeros(4, np.float32)])


@needs_emulator
def test_kernel_results_come_back_from_the_watched_launch():
    source = r'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }'
    x = np.arange(8, dtype=np.float32)
    emulator.compile_module(source, "twice.cu").get_function("twice")(1, 8, [x])
    np.testing.assert_array_equal(x, 2 * np.arange(8))


def test_launch_timeout_must_be_positive(monkeypatch):
    monkeypatch.setenv(emulator.TIMEOUT_ENV, "soon")
    with pytest.raises(KernelLaunchError, match="COURSE_LIB_KERNEL_TIMEOUT='soon'"):
        emulator.launch_timeout()


# -- user code at file scope runs only in child processes -------------------------------------
INITIALISERS = {  # a global initialised by a lambda: it runs when the library is loaded
    "crash": "static int b = [](){ return *(volatile int*)0; }();",
    "hang": "static int c = [](){ volatile int spin = 1; while (spin) {} return 0; }();",
}
SCALE_ADD = r"""
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
"""


@needs_emulator
@pytest.mark.parametrize(
    "initialiser, message",
    [("crash", r"crashed \(SIGSEGV\) while loading"), ("hang", "did not finish within 1 s")],
)
def test_static_initialiser_is_an_error_not_the_end_of_python(initialiser, message):
    """Without a child to load the library, the crash killed Python and the loop hung it."""
    source = INITIALISERS[initialiser] + SCALE_ADD
    script = (
        "from course_lib.kernels import emulator\n"
        "try:\n"
        f"    emulator.compile_module({source!r}, 'init.cu')\n"
        "except emulator.KernelLaunchError as error:\n"
        "    print(error)\n"
        "print('alive')\n"
    )
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env={**os.environ, emulator.TIMEOUT_ENV: "1"}, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.match(rf"init\.cu: .*{message}.*static initialiser.*\nalive\n$", result.stdout)
    assert time.monotonic() - start < 60


@needs_emulator
def test_static_initialiser_crash_is_named_by_the_exercise_check():
    verdict = verify("07.scale_add", INITIALISERS["crash"] + SCALE_ADD)
    assert verdict.status == "failed"
    assert "does not load" in verdict.message and "crashed (SIGSEGV) while loading" in str(verdict)


@needs_emulator
@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc")
def test_the_interpreter_never_loads_an_emulated_library():
    module = emulator.compile_module(SCALE_ADD, "scale_add.cu")
    x = np.arange(8, dtype=np.float32)
    out = np.empty_like(x)
    module.get_function("scale_add")(1, 8, [x, x, out, np.float32(2), np.int32(8)])
    with profile():
        module.get_function("scale_add")(1, 8, [x, x, out, np.float32(2), np.int32(8)])
    np.testing.assert_array_equal(out, 3 * x)
    maps = Path("/proc/self/maps").read_text()
    for build in (module.build(), module.build(counting=True)):
        assert str(build.library) not in maps


# -- read-only arrays ---------------------------------------------------------------------------
@needs_emulator
def test_read_only_array_for_a_parameter_the_kernel_may_write_is_refused():
    """Before, the kernel's writes to it were dropped without a word."""
    source = r'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }'
    x = np.arange(8, dtype=np.float32)
    x.setflags(write=False)
    kernel = emulator.compile_module(source, "twice.cu").get_function("twice")
    with pytest.raises(KernelLaunchError, match=r"kernel twice, argument 0 \(float32\*\): the "
                                                r"array is read-only.*not const"):  # fmt: skip
        kernel(1, 8, [x])


@needs_emulator
def test_read_only_array_for_a_const_parameter_is_read():
    source = r"""
    extern "C" __global__ void scale(float a, const float* x, float* y) {
        y[threadIdx.x] = a * x[threadIdx.x];
    }"""
    kernel = emulator.compile_module(source, "scale.cu").get_function("scale")
    assert kernel.param_types == ("float32", "float32*", "float32*")
    assert kernel.const_params == (1,)
    x = np.broadcast_to(np.arange(8, dtype=np.float32), (8,))  # a read-only view
    y = np.zeros(8, np.float32)
    kernel(1, 8, [np.float32(3), x, y])
    np.testing.assert_array_equal(y, 3 * np.arange(8))


@needs_emulator
def test_launchers_hand_read_only_inputs_to_const_parameters():
    x = np.linspace(-1, 1, 256, dtype=np.float32).reshape(4, 64)
    x.setflags(write=False)  # contiguous float32: passed to the kernel as it is
    expected = np.exp(x) / np.exp(x).sum(-1, keepdims=True)
    np.testing.assert_allclose(launch.softmax(x, mode="emulator"), expected, rtol=1e-6)
    np.testing.assert_array_equal(launch.vector_add(x[0], x[1], mode="emulator"), x[0] + x[1])


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@needs_emulator
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux's /proc")
def test_launch_child_dies_with_its_parent():
    """A notebook kernel killed while an emulated kernel spins leaves no orphan at 100 %."""
    emulator.compile_module(HANG, "hang.cu")  # compiled (and cached) here, not in the timing
    script = (
        "import numpy as np\nfrom course_lib.kernels import emulator\n"
        f"k = emulator.compile_module({HANG!r}, 'hang.cu').get_function('wait_for_neighbour')\n"
        "print('launching', flush=True)\n"  # the child that read the signatures has ended
        "k(1, 2, [np.zeros(2, np.int32)])\n"
    )
    env = {**os.environ, emulator.TIMEOUT_ENV: "600"}
    children: list[int] = []
    parent = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        assert parent.stdout.readline() == "launching\n"
        deadline = time.monotonic() + 60
        while not children and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.1)
            children = _children(parent.pid)
        assert children, "the launch child did not start"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while any(map(_running, children)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(_running, children)), "the launch child outlived its parent"
    finally:
        parent.kill()
        for child in children:  # an orphan (without the fix) would spin on: end it
            if _running(child):
                os.kill(child, signal.SIGKILL)
