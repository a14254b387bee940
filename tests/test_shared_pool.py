"""One pool of threads for NumPy's BLAS and the CPU kernels (kernels/cpu_pool.hpp,
kernels/shared_pool.py): the same bits on any number of threads, BLAS's own results, and a
process that forks, runs threads of its own and exits as before."""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from course_lib.kernels import cpu_kernels, shared_pool

needs_kernels = pytest.mark.skipif(
    not cpu_kernels.worth_it(np.zeros(cpu_kernels.MIN_SIZE, np.float32)), reason="no C++ compiler"
)
needs_pool = pytest.mark.skipif(
    not cpu_kernels.threads_described().startswith("one pool"),
    reason=f"the pool is not connected here: {cpu_kernels.threads_described()}",
)  # where it should be, test_the_pool_connects_wherever_numpys_openblas_allows fails
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PART = 16384  # the kernels' smallest part (MIN_PART in cpu_kernels.py)


def _blas_threads() -> int:
    return next(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")


def _python(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (its own pool, its own exit), 120 s at most."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
        timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, **env},
    )  # fmt: skip


def test_the_pool_connects_wherever_numpys_openblas_allows():
    """Where NumPy's BLAS is a pthreads OpenBLAS with the callback and thread slots for the
    pool's jobs beside its own threads, the pool is connected; elsewhere the kernels say why
    they stay on one thread."""
    blas, found = shared_pool.numpy_openblas()
    described = cpu_kernels.threads_described()
    if blas is None:
        assert described == f"one thread ({found})"
    elif 2 * blas["own_threads"].value - 1 > (slots := shared_pool._slots(blas)):
        assert described.startswith(f"one thread (OpenBLAS has {slots} thread slots")
    else:
        assert described == f"one pool with NumPy's BLAS, {found}"
    info = next(p for p in threadpool_info() if p["user_api"] == "blas")
    version = tuple(int(x) for x in info["version"].split(".")[:3])
    if info["internal_api"] == "openblas" and info["threading_layer"] == "pthreads":
        assert (blas is not None) == (version >= (0, 3, 27)), "the callback came in 0.3.27"


def _arrays(seed=0):
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    scores = normal(4, 8, 64, 67) * 4  # 2048 ragged rows: parts of 245 rows
    scores[0, 0, 3, 1], scores[1, 2, 5, 2], scores[3, 7, 60, :] = np.nan, np.inf, -np.inf
    x = normal(4 * PART + 37)  # four parts of whole 64-float blocks and a ragged tail
    x[:5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    rows, w = normal(1100, 131), normal(131)
    rope_x, cos, sin = normal(3, 40, 5, 64), normal(40, 32), normal(40, 32)
    return scores, x, rows, w, rope_x, cos, sin


def _every_kernel(scores, x, rows, w, rope_x, cos, sin) -> dict:
    k = cpu_kernels
    with np.errstate(all="ignore"):
        return {
            "causal_softmax": k.causal_softmax(scores, 0.3),
            "softmax_grad": k.softmax_grad(scores, np.abs(scores), 0.5),
            "rope": k.rope(rope_x, cos, sin, axis=1),
            "rms_norm": k.rms_norm(rows, w, 1e-5),
            "rms_norm_grad_x": k.rms_norm_grad_x(rows[::-1], rows, w, 1e-5),
            "rms_norm_grad_w": k.rms_norm_grad_w(rows[::-1], rows, 1e-5),
            "sigmoid": k.sigmoid(x),
            "silu": k.silu(x),
            "silu_grad": k.silu_grad(x[::-1], x),
            "adam_moment": k.adam_moment(x, x[::-1], 0.9, 2),
            "adamw_update": k.adamw_update(x, x[::-1], np.abs(x), decay=0.99, bias2=1.0,
                                           eps=1e-8, step_size=1e-3),  # fmt: skip
            "sum_of": k.sum_of(x, x[::-1], np.roll(x, 3)),
            "product": k.product(x, x[::-1]),
            "rows_added_at": k.rows_added_at(rows, np.arange(1100) % 7, 7),
            # most rows to one id, none to the table's first and last rows
            "rows_added_at_skewed": k.rows_added_at(rows, 1 + (np.arange(1100) % 9 == 0) * 3, 6),
            "transposed": k.transposed(rows.T),
            "softmax": k.softmax(scores),
            "cross_entropy": k.cross_entropy(scores, np.arange(4 * 8 * 64).reshape(4, 8, 64) % 67),
        }


@needs_kernels
@needs_pool
@pytest.mark.parametrize("threads", [2, 3, 4])
def test_every_kernel_gives_the_same_bits_on_any_number_of_threads(threads):
    arrays = _arrays()
    with threadpool_limits(1):
        alone = _every_kernel(*arrays)
    with threadpool_limits(threads):
        before = cpu_kernels.pool_runs()
        split = _every_kernel(*arrays)
    assert cpu_kernels.pool_runs() >= before + len(split), "each kernel split its work"
    for name, expected in alone.items():
        assert split[name].tobytes() == expected.tobytes(), name
    table = np.zeros((6, 131), np.float32)
    np.add.at(table, 1 + (np.arange(1100) % 9 == 0) * 3, arrays[2])
    assert split["rows_added_at_skewed"].tobytes() == table.tobytes(), "np.add.at's bits"


@needs_kernels
@needs_pool
def test_small_arrays_stay_on_the_calling_thread():
    """A part smaller than 16384 floats costs more than it saves: no split, same values."""
    x = np.linspace(-5, 5, PART + 100, dtype=np.float32)
    with threadpool_limits(4):
        before = cpu_kernels.pool_runs()
        y = cpu_kernels.silu(x)
        assert cpu_kernels.pool_runs() == before
        cpu_kernels.silu(np.concatenate([x, x]))
        assert cpu_kernels.pool_runs() == before + 1
    with threadpool_limits(1):
        assert y.tobytes() == cpu_kernels.silu(x).tobytes()


def _head_products(kv: int, d: int = 32, seed=0) -> dict:
    """The three attention products on GQA arrays (B=3, T=40, H=6, S=50), as (op, inputs);
    the queries strided, so that the kernels' path copies them first. T is not a multiple of
    the kernel's 6-row blocks, S not one of its 16 columns."""
    from course_lib.ops.attention import HeadMix, HeadMixT, HeadScores  # noqa: PLC0415

    rng = np.random.default_rng(seed)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    a = normal(3, 80, 6, d)[:, ::2]
    k, p = normal(3, 50, kv, d), normal(3, 6, 40, 50)
    return {
        "scores a·kᵀ": (HeadScores(), (a, k)),
        "mix p·v": (HeadMix(), (p, k)),
        "mix_t Σ pᵀ·a": (HeadMixT(), (p, a, k)),
    }


@needs_kernels
@pytest.mark.parametrize(("kv", "d"), [(1, 32), (2, 32), (6, 32), (2, 7), (3, 40)])
def test_attention_products_read_in_place_match_the_grouped_products(kv, d, monkeypatch):
    """One product per (batch, head), read where each head lies, each on one thread: the
    grouped matmul's values (to float32 rounding: another summation order, multiply-adds
    fused; both within the rounding bound n·u·Σ|terms| of the float64 product), and the same
    bits on any number of threads."""
    products = _head_products(kv, d)
    in_place = {}
    for threads in (1, 2, 3):
        with threadpool_limits(threads):
            before = cpu_kernels.pool_runs()
            split = {name: op.compute(np, *args) for name, (op, args) in products.items()}
        if threads > 1 and cpu_kernels.threads_described().startswith("one pool"):
            assert cpu_kernels.pool_runs() > before, "the heads were split"
        for name, values in split.items():
            in_place.setdefault(name, values)
            assert values.tobytes() == in_place[name].tobytes(), (name, threads)
    monkeypatch.setattr(cpu_kernels, "products_worth_it", lambda *a: False)
    for name, (op, args) in products.items():
        grouped = op.compute(np, *args)  # the array module's path
        assert in_place[name].shape == grouped.shape and in_place[name].dtype == np.float32
        exact = op.compute(np, *(x.astype(np.float64) for x in args))
        magnitude = op.compute(np, *(np.abs(x).astype(np.float64) for x in args))  # Σ|terms|
        bound = 240 * np.finfo(np.float32).eps / 2 * magnitude  # 240 terms at most (mix_t)
        for values in (in_place[name], grouped):
            assert (np.abs(values - exact) <= bound).all(), name
        np.testing.assert_allclose(in_place[name], exact, rtol=1e-3, atol=1e-3, err_msg=name)


@needs_kernels
def test_attention_products_propagate_nan_and_inf_as_blas_does(monkeypatch):
    """A NaN or an infinity in one head reaches exactly the entries it reaches in the grouped
    matmul (0 · inf is NaN), and no other head."""
    products = _head_products(2)
    a, k = products["scores a·kᵀ"][1]
    a, k = a.copy(), k.copy()
    a[1, 3, 2, 5], k[2, 7, 1, 0] = np.nan, np.inf
    a[2, :, :, 0] = 0.0  # 0 · inf
    op = products["scores a·kᵀ"][0]
    in_place = op.compute(np, a, k)
    monkeypatch.setattr(cpu_kernels, "products_worth_it", lambda *args: False)
    with np.errstate(invalid="ignore"):  # NumPy's matmul warns of the NaNs
        grouped = op.compute(np, a, k)
    np.testing.assert_array_equal(np.isnan(in_place), np.isnan(grouped))
    np.testing.assert_array_equal(np.isinf(in_place), np.isinf(grouped))
    assert np.isnan(in_place).any() and not np.isnan(in_place[0]).any()


@needs_kernels
def test_attention_products_check_shapes_before_reading_in_place():
    """A graph whose shapes were unknown when built: the op still refuses inputs whose
    strides would not fit (another batch, head size or group), with the op's own error."""
    from course_lib.errors import ShapeError  # noqa: PLC0415
    from course_lib.graph import variable  # noqa: PLC0415
    from course_lib.ops.attention import head_mix, head_mix_t, head_scores  # noqa: PLC0415
    from course_lib.runtime.executor import evaluate  # noqa: PLC0415

    def normal(*shape):
        return np.ones(shape, np.float32)

    a, k, p = variable("a"), variable("k"), variable("p")
    bad = [
        (head_scores(a, k), {"a": normal(64, 256, 4, 64), "k": normal(1, 256, 4, 64)}, "batch"),
        (head_scores(a, k), {"a": normal(2, 64, 6, 64), "k": normal(2, 64, 4, 64)}, "multiple"),
        (head_scores(a, k), {"a": normal(2, 64, 4, 64), "k": normal(2, 64, 4, 16)}, "head sizes"),
        (head_mix(p, k), {"p": normal(2, 4, 64, 64), "k": normal(2, 32, 4, 64)}, "key lengths"),
        (head_mix_t(p, a, k), {"p": normal(2, 4, 64, 64), "a": normal(2, 64, 4, 64),
                               "k": normal(2, 64, 4, 32)}, "head sizes"),  # fmt: skip
    ]
    for graph, feed, message in bad:
        assert cpu_kernels.products_worth_it(*feed.values())
        with pytest.raises(ShapeError, match=message):
            evaluate(graph, feed)


@needs_kernels
@needs_pool
@pytest.mark.parametrize("raised_once", [False, True])
def test_lapacks_lu_on_openblas_threads_beside_products_on_the_pool(raised_once):
    """np.linalg.solve (getrf: OpenBLAS's own threads, not the callback) in one thread while
    another multiplies on the pool: both finish, with their serial results (the pool's jobs
    use other OpenBLAS thread slots). After a BLAS limit of 64 (OpenBLAS then keeps 63
    threads in slots the pool's jobs took), the products go back to OpenBLAS's threads: the
    two used to hang."""
    run = _python("""
        import sys, threading, time, numpy as np
        from threadpoolctl import threadpool_limits
        from course_lib.kernels import cpu_kernels
        cpu_kernels._library()
        if sys.argv[1] == "True":
            threadpool_limits(64)
        threadpool_limits(2)
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((1200, 1200)), rng.standard_normal((1200, 4))
        m = rng.standard_normal((500, 500)).astype(np.float32)
        x, mm = np.linalg.solve(a, b), m @ m
        done, bad, stop = [0, 0], [], []
        def solve():
            while not stop:
                bad.extend([] if np.array_equal(np.linalg.solve(a, b), x) else ["solve"])
                done[0] += 1
        def multiply():
            while not stop:
                bad.extend([] if np.array_equal(m @ m, mm) else ["product"])
                done[1] += 1
        threads = [threading.Thread(target=f, daemon=True) for f in (solve, multiply)]
        for t in threads:
            t.start()
        time.sleep(4)
        stop.append(1)
        for t in threads:
            t.join(20)
        print(all(n > 0 for n in done), bad, [t.is_alive() for t in threads])
        print(cpu_kernels.threads_described())
    """, str(raised_once))
    assert run.returncode == 0, run.stderr
    result, described = run.stdout.strip().splitlines()
    assert result == "True [] [False, False]"
    assert described.startswith("the kernels' pool beside" if raised_once else "one pool")


def test_attention_products_on_the_array_module_below_the_size():
    """Small or float64 arrays keep the array module's grouped matmul."""
    small = np.zeros((1, 4, 2, 8), np.float32)
    assert not cpu_kernels.products_worth_it(small, small)
    assert not cpu_kernels.products_worth_it(np.zeros((64, 64, 8)), np.zeros((64, 64, 8)))


@needs_kernels
@needs_pool
def test_blas_through_the_pool_gives_openblas_own_bits(tmp_path):
    """The same matrix products, on the pool and on OpenBLAS's own threads (the pool off in
    a second interpreter), bit for bit at each thread count."""
    code = """
        import sys, numpy as np
        from threadpoolctl import threadpool_limits
        from course_lib.kernels import cpu_kernels, shared_pool
        cpu_kernels._library()
        a = np.random.default_rng(1).standard_normal((700, 300)).astype(np.float32)
        out = {}
        for t in (1, 2, 3):
            with threadpool_limits(t):
                out[str(t)] = a @ a.T
        np.savez(sys.argv[1], **out)
        print(cpu_kernels.threads_described())
    """
    results = {}
    for setting in ("1", "0"):
        path = str(tmp_path / f"products_{setting}.npz")
        run = _python(code, path, **{shared_pool.ENV: setting})
        assert run.returncode == 0, run.stderr
        results[setting] = (run.stdout, dict(np.load(path)))
    assert results["1"][0].startswith("one pool")
    assert results["0"][0].strip() == f"one thread ({shared_pool.ENV}=0)"
    for t, product in results["1"][1].items():
        assert product.tobytes() == results["0"][1][t].tobytes(), f"{t} threads"


@needs_kernels
@needs_pool
def test_a_forked_child_gets_a_pool_of_its_own_and_the_process_exits():
    """After fork the parent's threads do not exist in the child: it starts its own; the
    parent still has its pool; and the interpreter exits (no thread left waiting)."""
    run = _python("""
        import os, numpy as np
        from threadpoolctl import threadpool_limits
        from course_lib.kernels import cpu_kernels, shared_pool
        a = np.random.default_rng(2).standard_normal((600, 600)).astype(np.float32)
        x = np.linspace(-3, 3, 5 * 16384, dtype=np.float32)
        with threadpool_limits(2):
            expected = (a @ a, cpu_kernels.silu(x))
            pid = os.fork()
            if pid == 0:
                again = (a @ a, cpu_kernels.silu(x))
                same = all(np.array_equal(u, v) for u, v in zip(again, expected))
                os._exit(0 if same and cpu_kernels.pool_workers() >= 1 else 3)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, status
            assert np.array_equal(a @ a, expected[0]) and cpu_kernels.pool_workers() >= 1
        print("ok")
    """)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


@needs_kernels
@needs_pool
def test_python_threads_calling_blas_and_kernels_at_once_get_serial_results():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((400, 400)).astype(np.float32)
    x = rng.standard_normal(3 * PART).astype(np.float32)
    with threadpool_limits(2):
        expected = (a @ a, cpu_kernels.sigmoid(x))
        failures = []

        def hammer():
            for _ in range(20):
                if not (np.array_equal(a @ a, expected[0])
                        and np.array_equal(cpu_kernels.sigmoid(x), expected[1])):  # fmt: skip
                    failures.append(threading.get_ident())

        threads = [threading.Thread(target=hammer) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert failures == []


@needs_kernels
def test_the_pool_can_be_switched_off_and_one_thread_starts_nothing():
    run = _python("""
        import numpy as np
        from threadpoolctl import threadpool_limits
        from course_lib.kernels import cpu_kernels, shared_pool
        from course_lib.perf import limit_threads
        x = np.linspace(-3, 3, 8 * 16384, dtype=np.float32)
        with threadpool_limits(4):
            y = cpu_kernels.silu(x)
        print(cpu_kernels.threads_described(), cpu_kernels.pool_workers(),
              cpu_kernels.products_worth_it(x))
        limit_threads(1)
        print(np.array_equal(cpu_kernels.silu(x), y), cpu_kernels.pool_workers())
    """, **{shared_pool.ENV: "0"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [f"one thread ({shared_pool.ENV}=0) 0 True", "True 0"]


@needs_kernels
@needs_pool
def test_the_ops_use_the_pool_for_large_sums_products_and_the_embedding_adjoint(monkeypatch):
    """Add, Mul, AddN and TakeAdjoint on the kernels when more than one thread may work:
    NumPy's values (NaN where NumPy has NaN, every other bit equal)."""
    from course_lib.ops.elementwise import Add, AddN, Mul  # noqa: PLC0415
    from course_lib.ops.shape import TakeAdjoint  # noqa: PLC0415

    used = []
    for name in ("sum_of", "product", "rows_added_at"):
        kernel = getattr(cpu_kernels, name)
        monkeypatch.setattr(cpu_kernels, name, lambda *a, _k=kernel, _n=name: used.append(_n)
                            or _k(*a))  # fmt: skip
    _, x, rows, *_ = _arrays()
    y, z = x[::-1].copy(), np.roll(x, 5)
    ids = np.random.default_rng(4).integers(0, 9, (25, 44))
    g = np.random.default_rng(5).standard_normal((25, 44, 131)).astype(np.float32)
    table = np.zeros((9, 131), np.float32)
    expected_rows = np.zeros_like(table)
    np.add.at(expected_rows, ids, g)
    cases = [
        (Add(), (x, y), x + y), (Mul(), (x, y), x * y), (AddN(), (x, y, z), (x + y) + z),
        (TakeAdjoint(), (g, ids, table), expected_rows),
    ]  # fmt: skip
    with threadpool_limits(2), np.errstate(all="ignore"):
        for op, args, expected in cases:
            got = op.compute(np, *args)
            nan = np.isnan(expected)
            assert np.array_equal(np.isnan(got), nan), op.name
            assert got[~nan].tobytes() == expected[~nan].tobytes(), op.name
    assert used == ["sum_of", "product", "sum_of", "rows_added_at"]
    used.clear()
    with threadpool_limits(1):  # one thread: NumPy's own loops (a little faster there)
        Add().compute(np, x, y)
        Mul().compute(np, x, y)
    assert used == []


def test_the_embedding_adjoint_refuses_bad_ids_on_the_kernel_path_too():
    from course_lib.errors import OutOfRangeError  # noqa: PLC0415
    from course_lib.ops.shape import TakeAdjoint  # noqa: PLC0415

    g = np.ones((64, 512), np.float32)
    for bad in (-1, 9):
        ids = np.zeros(64, np.int64)
        ids[17] = bad
        with pytest.raises(OutOfRangeError, match=f"id {bad} at position \\(17,\\)"):
            TakeAdjoint().compute(np, g, ids, np.zeros((9, 512), np.float32))


@needs_kernels
@needs_pool
def test_fused_loops_split_over_the_pool_with_the_same_bits(monkeypatch):
    """The fusion pass's generated loops run their 64-float blocks on the pool: the same bits
    on any number of threads (SIMD exp and tanh included, an input not 64-byte aligned, a
    ragged tail) as on one thread, and as with no pool at all (a null parallel_for)."""
    import course_lib as cl  # noqa: PLC0415
    from course_lib.passes.fusion import fuse_elementwise  # noqa: PLC0415
    from course_lib.passes.fusion.cpu_loop import run_cpu_loop  # noqa: PLC0415

    n = 4 * PART + 37
    x, y = cl.variable("x", (n,), np.float32), cl.variable("y", (n,), np.float32)
    kernel = fuse_elementwise(cl.exp(x) * y + cl.tanh(y) / 3.0).op.kernel
    rng = np.random.default_rng(0)
    a = rng.uniform(-20, 20, n + 1).astype(np.float32)[1:]  # C-contiguous, 4 bytes off
    b = rng.standard_normal(n).astype(np.float32)
    with threadpool_limits(1):
        alone = run_cpu_loop(kernel, [a, b])
    for threads in (2, 3, 4):
        with threadpool_limits(threads):
            before = cpu_kernels.pool_runs()
            split = run_cpu_loop(kernel, [a, b])
            assert cpu_kernels.pool_runs() == before + 1, "the loop split its blocks"
        assert split.tobytes() == alone.tobytes(), threads
    monkeypatch.setattr(cpu_kernels, "pool_parallel_for", lambda: None)
    with threadpool_limits(4):
        before = cpu_kernels.pool_runs()
        assert run_cpu_loop(kernel, [a, b]).tobytes() == alone.tobytes()
        assert cpu_kernels.pool_runs() == before


@needs_kernels
@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (32, 32), (33, 65), (688, 256), (40, 1001)])
def test_a_transposed_matrix_is_copied_in_tiles_with_its_values(shape, monkeypatch):
    """A weight's gradient arrives transposed (F-contiguous): the kernels copy it in 8 × 8
    register blocks of 32 × 32 tiles (ragged edges included), the values NumPy's copy gives,
    and AdamW's moment kernel gives the same bits as from a C-contiguous gradient."""
    rng = np.random.default_rng(1)
    g = rng.standard_normal(shape[::-1]).astype(np.float32).T
    assert g.flags.f_contiguous and (g.flags.c_contiguous == (1 in shape))
    for threads in (1, 2, 3):
        with threadpool_limits(threads):
            assert cpu_kernels.transposed(g).tobytes() == np.ascontiguousarray(g).tobytes()
    m = rng.standard_normal(shape).astype(np.float32)
    calls = []
    monkeypatch.setattr(cpu_kernels, "transposed", lambda a: calls.append(a) or a.copy())
    moment = cpu_kernels.adam_moment(m, g, 0.9, 2)
    assert len(calls) == (not g.flags.c_contiguous)
    assert moment.tobytes() == cpu_kernels.adam_moment(m, np.ascontiguousarray(g), 0.9, 2).tobytes()


@needs_kernels
@needs_pool
def test_assign_copies_large_arrays_over_the_pool_and_falls_back_to_numpy():
    """The optimiser's write-back: a large same-shape float32 copy split over the threads;
    overlapping, broadcast, other-dtype and read-only cases keep NumPy's assignment."""
    x = np.linspace(-1, 1, 4 * PART + 5, dtype=np.float32)
    target = np.zeros_like(x)
    with threadpool_limits(2):
        before = cpu_kernels.pool_runs()
        cpu_kernels.assign(target, x)
        assert cpu_kernels.pool_runs() == before + 1
        assert target.tobytes() == x.tobytes()
        buffer = np.arange(4 * PART + 6, dtype=np.float32)
        cpu_kernels.assign(buffer[1:], buffer[:-1])  # overlapping: NumPy's memmove semantics
        assert np.array_equal(buffer[1:], np.arange(4 * PART + 5, dtype=np.float32))
        cpu_kernels.assign(target, np.float32(3.0))  # broadcast
        assert (target == 3.0).all()
        wide = np.zeros(x.shape)  # float64 target: NumPy's cast
        cpu_kernels.assign(wide, x)
        assert np.array_equal(wide, x)
        target.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            cpu_kernels.assign(target, x)
        assert cpu_kernels.pool_runs() == before + 1


@needs_kernels
def test_only_small_products_with_pairs_for_every_thread_take_the_kernel(monkeypatch):
    """A head whose right-hand matrix would not stay in cache (T = 1024, d = 128), or fewer
    (batch, kv group) pairs than threads, goes to the grouped matmul, which BLAS blocks and
    threads; the tiny step's heads take the kernel."""
    from course_lib.ops.attention import HeadMix, HeadMixT, HeadScores  # noqa: PLC0415

    calls = []
    real = cpu_kernels.head_products
    def counted(*args):
        out = real(*args)
        calls.extend([] if out is None else [1])  # the kernel ran
        return out

    monkeypatch.setattr(cpu_kernels, "head_products", counted)

    def kernel_calls(batch, t, h, kv, d, threads):
        rng = np.random.default_rng(0)
        a = rng.standard_normal((batch, t, h, d), dtype=np.float32)
        k = rng.standard_normal((batch, t, kv, d), dtype=np.float32)
        p = rng.standard_normal((batch, h, t, t), dtype=np.float32)
        calls.clear()
        with threadpool_limits(threads):
            HeadScores().compute(np, a, k), HeadMix().compute(np, p, k)
            HeadMixT().compute(np, p, a, k)
        return len(calls)

    assert cpu_kernels.head_products_fit(64, 32, 128)
    assert not cpu_kernels.head_products_fit(1, 128, 1024)
    assert kernel_calls(4, 64, 4, 2, 32, threads=1) == 3  # the tiny step's shape, smaller
    assert kernel_calls(1, 1024, 1, 1, 128, threads=1) == 0  # too large for the cache
    if cpu_kernels.threads_described().startswith("one pool"):
        assert kernel_calls(1, 64, 4, 2, 32, threads=3) == 0  # 2 pairs for 3 threads


@needs_kernels
def test_cross_entropy_refuses_other_target_shapes_before_the_row_kernel():
    """Targets that are not one per row of logits (a graph of unknown shapes lets them
    through) never reach the row kernel: refused, even one NumPy would broadcast (its
    gradient, divided by the targets' count, would not be the mean's: review 10), never a
    read past the logits; the kernel itself refuses them too."""
    from course_lib.errors import ShapeError  # noqa: PLC0415
    from course_lib.ops.nn import CrossEntropy  # noqa: PLC0415

    logits = np.random.default_rng(0).standard_normal((2048, 8)).astype(np.float32)
    assert cpu_kernels.worth_it(logits)
    with pytest.raises(ValueError, match="without its last axis"):
        CrossEntropy().compute(np, logits, np.zeros(1, np.int64))
    for targets in (np.zeros(4096, np.int64), np.zeros((2048, 1), np.int64)):
        with pytest.raises((ValueError, IndexError, ShapeError)):
            CrossEntropy().compute(np, logits, targets)
        with pytest.raises(ValueError, match="without its last axis"):
            cpu_kernels.cross_entropy(logits, targets)
    import course_lib as cl  # noqa: PLC0415

    graph = cl.cross_entropy(cl.variable("logits"), cl.variable("targets"))
    with pytest.raises(ShapeError, match=r"cross_entropy at node .* targets: \(4096,\)"):
        cl.evaluate(graph, {"logits": logits, "targets": np.zeros(4096, np.int64)})


@needs_kernels
@needs_pool
def test_a_run_wakes_only_the_threads_it_needs():
    """After an 8-thread run, 2-part runs wake one worker: the six others sleep on (a run
    that woke every worker cost each of them the lock on a 16-core machine)."""
    run = _python("""
        import ctypes, time, numpy as np
        from threadpoolctl import threadpool_limits
        from course_lib.kernels import cpu_kernels
        library = cpu_kernels._library()
        library.pool_idle_wakeups.restype = ctypes.c_long
        threadpool_limits(8)
        cpu_kernels.silu(np.ones(8 * 16384, np.float32))  # starts 7 workers
        before, runs = library.pool_idle_wakeups(), cpu_kernels.pool_runs()
        for _ in range(50):
            time.sleep(0.002)  # every worker asleep again
            cpu_kernels.silu(np.ones(2 * 16384, np.float32))
        print(cpu_kernels.pool_workers(), cpu_kernels.pool_runs() - runs,
              library.pool_idle_wakeups() - before)
    """)
    assert run.returncode == 0, run.stderr
    workers, runs, idle = map(int, run.stdout.split())
    assert (workers, runs) == (7, 50)
    assert idle <= 5, f"{idle} sleeping workers woken for no job in 50 two-part runs"
