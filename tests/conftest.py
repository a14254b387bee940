import importlib
import os
import platform
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import course_lib as cl

settings.register_profile(  # CI is reproducible (a fixed example sequence); dev runs explore
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)  # fmt: skip
settings.register_profile("dev", max_examples=15, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def lecture_graph():
    """y = ln(x1) + x1·x2 − sin(x2), numbered v1..v7 as in the lecture (scalars)."""
    v1, v2 = cl.variable("x1", shape=()), cl.variable("x2", shape=())
    v3 = cl.log(v1)
    v4 = v1 * v2
    v5 = cl.sin(v2)
    v6 = v3 + v4
    v7 = v6 - v5
    return [v1, v2, v3, v4, v5, v6, v7]


@pytest.fixture
def worked_example():
    """The lecture's f = (exp(v1) + 1)·exp(v1): v2 = exp(v1), v3 = v2 + 1, v4 = v2 × v3;
    returns v1, v4, the gradient node v̄1 and the trace of ``gradient(v4)``."""
    v1 = cl.variable("v1", shape=())
    v2 = cl.exp(v1)
    v3 = v2 + 1
    v4 = v2 * v3
    dv1, trace = cl.gradient_trace(v4, v1)
    return v1, v4, dv1, trace


def oracle_import(module: str) -> ModuleType:
    """Import a module of the ``oracle`` extra (torch, transformers).

    Missing, the calling test (or module, at import time) is skipped with a reason — except
    when the environment variable ``CI`` is set: CI installs the extra, so the ImportError
    propagates and the test fails instead of silently skipping.
    """
    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"the oracle extra ({module}) is not installed")


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def pool_threads() -> dict[str, set[int]]:
    """Each thread pool's thread counts: threadpoolctl's (BLAS, OpenMP) and numexpr's."""
    import numexpr  # noqa: PLC0415  (only the thread tests ask)
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    pools: dict[str, set[int]] = {"numexpr": {numexpr.get_num_threads()}}
    for pool in threadpool_info():
        pools.setdefault(pool["user_api"], set()).add(pool["num_threads"])
    return pools


@pytest.fixture
def two_threads_each():
    """Every pool at 2 threads for the test (a known starting point), the caller's after."""
    import numexpr  # noqa: PLC0415
    from threadpoolctl import threadpool_limits  # noqa: PLC0415

    with threadpool_limits(limits=2):
        old = numexpr.set_num_threads(2)
        try:
            yield pool_threads()
        finally:
            numexpr.set_num_threads(old)


def skip_without_nvrtc() -> pytest.MarkDecorator:
    """Skip a test when NVRTC is missing; CI installs it, so there a missing one fails."""
    from course_lib.kernels import nvrtc  # noqa: PLC0415

    return pytest.mark.skipif(
        not nvrtc.nvrtc_available() and not os.environ.get("CI"),
        reason="NVRTC missing: the test extra installs cupy-cuda12x and nvidia-cuda-nvrtc-cu12",
    )


def needs_gxx(what: str) -> pytest.MarkDecorator:
    """Skip a test when g++ is missing; CI has g++, so there a missing one fails instead."""
    from course_lib.kernels import emulator  # noqa: PLC0415  (only tests that compile ask)

    return pytest.mark.skipif(
        not emulator.emulator_available() and not os.environ.get("CI"),
        reason=f"{what} needs g++ on PATH",
    )


def run_benchmark(script: str, *args: str, timeout: float = 300) -> str:
    """Run ``benchmarks/<script>`` with ``args`` in a fresh interpreter; return its stdout
    (the run must exit 0; its stderr is the failure message otherwise). The checkout's own
    ``course_lib`` comes first on the path (a script's folder, not the current one, starts
    it, so an environment installed from another checkout would be measured otherwise)."""
    path = os.pathsep.join(filter(None, [str(BENCHMARKS.parent), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout



def shares_memory(a, b) -> bool:
    """``np.shares_memory`` for results on any device: the strict device's arrays are compared
    through the NumPy arrays inside them, CuPy's with CuPy, and arrays on different devices
    (a host feed and its device copy) never share memory."""
    a, b = getattr(a, "_a", a), getattr(b, "_a", b)
    on_host = [isinstance(v, np.ndarray) or np.isscalar(v) for v in (a, b)]
    if all(on_host):
        return np.shares_memory(a, b)
    if any(on_host):
        return False
    import cupy  # noqa: PLC0415  (both arrays are CuPy's)

    return cupy.shares_memory(a, b)


# -- the device the tests run on ----------------------------------------------------------
# `COURSE_LIB_DEVICE=strict` (make test runs the engine, runtime, passes, autodiff, eager,
# jit and model tests so too) puts every result on the strict stand-in device, whose arrays
# refuse to become NumPy arrays implicitly. A test's comparison is a display edge, like a
# notebook's print: NumPy's assertions below bring device arrays to the host, explicitly,
# through course_lib.to_numpy. Everything else a test does with a result (np.asarray,
# np.isnan, arithmetic with NumPy arrays) meets the device's refusals, as user code would.
_ASSERTIONS = (
    "assert_allclose", "assert_array_equal", "assert_equal", "assert_array_almost_equal",
    "assert_almost_equal", "assert_array_less",
)  # fmt: skip


def _host_assertion(assertion):
    def check(*args, **kwargs):
        return assertion(*cl.backend.to_host(args), **kwargs)

    return check


@pytest.fixture(autouse=True, scope="session")
def _device_assertions():
    """On a device other than the CPU, NumPy's assertions compare on the host."""
    if cl.get_device() == "cpu":
        yield
        return
    saved = {name: getattr(np.testing, name) for name in _ASSERTIONS}
    for name, assertion in saved.items():
        setattr(np.testing, name, _host_assertion(assertion))
    yield
    for name, assertion in saved.items():
        setattr(np.testing, name, assertion)


@pytest.fixture(scope="session")
def narrow():
    """The CPU kernels built without AVX-512 (the products' 8-float vectors, as on a CPU
    without it), on the calling thread: ``monkeypatch`` ``cpu_kernels._library`` to it. An
    x86 flag: elsewhere the default build is the only one there is."""
    from course_lib.kernels import cpu_kernels  # noqa: PLC0415  (builds on first use only)

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"-mno-avx512f is an x86 flag; this CPU is {platform.machine()}")
    return cpu_kernels.build(("-mno-avx512f",))


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """The course site (student edition) built once for the session's tests
    (tests/test_site.py, tests/browser/test_site_pages.py); skipped without the site extra."""
    pytest.importorskip("myst_nb", reason="the site extra (sphinx, myst-nb) is not installed")
    out = tmp_path_factory.mktemp("site") / "site"
    root = Path(__file__).resolve().parents[1]
    built = subprocess.run([sys.executable, "-m", "course_lib.site", str(out)], cwd=root,
                           capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert built.returncode == 0, built.stderr
    return out
