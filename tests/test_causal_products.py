"""Attention's causal products (``head_scores``/``head_mix``/``head_mix_t`` with
``causal=True``): the mask applied to the (B, H, T, S) operand, the same numbers on the CPU
kernels (which skip the masked half) as on the array path, NaN and infinity where
``(M ⊙ p)·v`` puts them, and causal attention's forward and backward built from them."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import course_lib as cl
from course_lib.kernels import cpu_kernels
from course_lib.ops.attention import HeadMix, HeadMixT, HeadScores

needs_kernels = pytest.mark.skipif(
    not cpu_kernels.worth_it(np.zeros(cpu_kernels.MIN_SIZE, np.float32)), reason="no C++ compiler"
)


def _kept(t, s):
    return np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)


def _arrays(t, s, h=6, kv=2, d=32, b=3, seed=0):
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    return normal(b, t, h, d), normal(b, s, kv, d), normal(b, h, t, s)


def _products(a, k, p, causal):
    """The three products, each as (op, inputs): scores a·kᵀ, mix p·v, mix_t Σ pᵀ·a."""
    return {
        "scores": (HeadScores(causal), (a, k)),
        "mix": (HeadMix(causal), (p, k)),
        "mix_t": (HeadMixT(causal), (p, a, k)),
    }


def _on_arrays(monkeypatch):
    monkeypatch.setattr(cpu_kernels, "products_worth_it", lambda *arrays: False)


SHAPES = [(40, 50), (128, 128), (7, 7), (1, 33), (13, 30), (6, 6), (12, 12)]


@needs_kernels
@pytest.mark.parametrize(("t", "s"), SHAPES)
@pytest.mark.parametrize("kv", [1, 2, 6])
def test_the_kernels_skip_exactly_the_masked_terms(t, s, kv, monkeypatch):
    """On finite numbers, each causal kernel gives the bits of the unmasked kernel on the
    masked operand (the skipped terms are exact zeros), on any number of threads; masked
    scores are 0. Small shapes too: the kernels are made to take them."""
    monkeypatch.setattr(cpu_kernels, "products_worth_it", lambda *arrays: True)
    ran, products = [], cpu_kernels.head_products

    def counted(*args, **kwargs):
        ran.append(products(*args, **kwargs))
        return ran[-1]

    monkeypatch.setattr(cpu_kernels, "head_products", counted)
    a, k, p = _arrays(t, s, kv=kv)
    kept = _kept(t, s)
    masked_p = np.where(kept, p, np.float32(0))
    masked_p[..., ~kept] = np.nan  # never read: the kernel skips them
    zeroed = np.where(kept, p, np.float32(0))
    for threads in (1, 2, 3):
        with threadpool_limits(threads):
            causal = _products(a, k, masked_p, True)
            plain = _products(a, k, zeroed, False)
            for name in causal:
                got = causal[name][0].compute(np, *causal[name][1])
                want = plain[name][0].compute(np, *plain[name][1])
                if name == "scores":
                    want = np.where(kept, want, np.float32(0))
                assert got.dtype == np.float32 and got.shape == want.shape, name
                assert got.tobytes() == want.tobytes(), (name, threads)
    assert len(ran) == 18 and all(out is not None for out in ran), "the kernels computed all"


@pytest.mark.parametrize(("t", "s"), [(40, 50), (13, 30), (128, 128)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernels_and_array_path_agree_with_the_masked_float64_product(t, s, dtype, monkeypatch):
    """Both paths (kernels on float32; the array module's matmul on either dtype) against
    ``where(M, ·, 0)`` in float64, within n·u·Σ|terms|."""
    a, k, p = (x.astype(dtype) for x in _arrays(t, s))
    kept = _kept(t, s)
    exact = _products(*(x.astype(np.float64) for x in (a, k)), np.where(kept, p, 0.0), False)
    size = _products(*(np.abs(x).astype(np.float64) for x in (a, k)), np.where(kept, abs(p), 0.0),
                     False)  # fmt: skip
    def run():
        return {n: op.compute(np, *args) for n, (op, args) in _products(a, k, p, True).items()}

    paths = {"kernels": run()}
    _on_arrays(monkeypatch)
    paths["arrays"] = run()
    for name, (op, args) in exact.items():
        want = op.compute(np, *args)
        bound = 2 * max(t, s, 32) * np.finfo(dtype).eps * size[name][0].compute(np, *size[name][1])
        if name == "scores":
            want, bound = np.where(kept, want, 0.0), np.where(kept, bound, 0.0)
        for path, values in paths.items():
            assert values[name].dtype == dtype, (path, name)
            assert (np.abs(values[name] - want) <= bound).all(), (path, name)
            if name == "scores":
                assert (values[name][..., ~kept] == 0).all(), (path, "masked scores are 0")


@pytest.mark.parametrize("path", ["kernels", "arrays"])
def test_nan_and_infinity_go_where_the_masked_product_puts_them(path, monkeypatch):
    """Scores: a NaN key reaches only the scores that see it (masked ones are 0). Mix: what
    p holds under the mask never counts; an infinity in v makes NaN (0·inf) in every row of
    its head, as (M ⊙ p)·v does: the kernels stop skipping. Mix_t the same for the queries."""
    if path == "arrays":
        _on_arrays(monkeypatch)
    t = s = 40
    a, k, p = _arrays(t, s)
    kept = _kept(t, s)
    k[1, 30, 0, 3] = np.nan  # key 30 of kv head 0 in batch 1: heads 0-2
    scores = HeadScores(True).compute(np, a, k)
    assert np.isnan(scores[1, :3, 30:, 30]).all() and not np.isnan(scores[1, :3, :30]).any()
    assert np.isfinite(np.delete(scores, 1, 0)).all() and np.isfinite(scores[1, 3:]).all()

    p_dirty = p.copy()
    p_dirty[..., ~kept] = np.inf  # under the mask: counts as 0
    k[1, 30, 0, 3] = 0.0
    mixed = HeadMix(True).compute(np, p_dirty, k)
    np.testing.assert_array_equal(mixed, HeadMix(True).compute(np, np.where(kept, p, 0), k))
    assert np.isfinite(mixed).all()
    v = k.copy()
    v[2, 35, 1, 4] = np.inf  # kv head 1: heads 3-5 of batch 2
    with np.errstate(invalid="ignore"):
        mixed = HeadMix(True).compute(np, p_dirty, v)
    assert np.isnan(mixed[2, :35, 3:, 4]).all()  # masked p (0) · inf: NaN, even before key 35
    assert np.isinf(mixed[2, 35:, 3:, 4]).all() | np.isnan(mixed[2, 35:, 3:, 4]).all()
    assert np.isfinite(np.delete(mixed, 4, 3)).all() and np.isfinite(mixed[:2]).all()

    queries = a.copy()
    queries[0, 10, 4, 7] = -np.inf  # query 10 of head 4 (kv head 1) in batch 0
    with np.errstate(invalid="ignore"):
        summed = HeadMixT(True).compute(np, p_dirty, queries, k)
    assert not np.isfinite(summed[0, :, 1, 7]).any()  # every key: 0·inf or p·inf
    assert np.isfinite(np.delete(summed, 7, 3)).all() and np.isfinite(summed[1:]).all()
    assert np.isfinite(summed[0, :, 0]).all()


@pytest.mark.parametrize(
    "build",
    [lambda a, k, p: cl.head_scores(a, k, causal=True),
     lambda a, k, p: cl.head_mix(p, k, causal=True),
     lambda a, k, p: cl.head_mix_t(p, a, k, causal=True)],  # fmt: skip
)
def test_more_queries_than_keys_are_refused(build):
    """A causal product needs T <= S (queries aligned with the last keys), as the causal
    softmax: refused where the graph is built, and at run time where shapes were unknown."""
    a, k, p = (cl.variable(n, shape=shape) for n, shape in
               (("a", (1, 5, 2, 4)), ("k", (1, 3, 2, 4)), ("p", (1, 2, 5, 3))))  # fmt: skip
    with pytest.raises(ValueError, match=r"causal=True\): 5 queries but only 3 keys"):
        build(a, k, p)
    a, k, p = (cl.variable(n) for n in "akp")
    out = build(a, k, p)
    feeds = {"a": np.ones((1, 5, 2, 4)), "k": np.ones((1, 3, 2, 4)), "p": np.ones((1, 2, 5, 3))}
    with pytest.raises(ValueError, match="5 queries but only 3 keys"):
        cl.evaluate(out, feeds, allow_unused=True)


def test_causal_is_a_flag_and_part_of_the_ops_identity():
    """``causal`` must be True or False (a misplaced argument is not silently truthy), shows
    in the node's label, and two products that differ only in it are not merged by CSE."""
    with pytest.raises(cl.GraphError, match="head_mix: causal must be True or False"):
        HeadMix(1)
    assert HeadScores(True).key() != HeadScores(False).key()
    assert HeadScores(True).label() == "head_scores(causal=True)"
    a, k = cl.variable("a", shape=(1, 3, 2, 4)), cl.variable("k", shape=(1, 3, 2, 4))
    both = cl.head_scores(a, k, causal=True) + cl.head_scores(a, k)
    rng = np.random.default_rng(1)
    feeds = {"a": rng.standard_normal((1, 3, 2, 4)), "k": rng.standard_normal((1, 3, 2, 4))}
    plain = cl.to_numpy(cl.evaluate(cl.head_scores(a, k), feeds))
    want = plain + np.where(_kept(3, 3), plain, 0.0)
    for optimize in (False, True):
        got = cl.to_numpy(cl.Executor(both, optimize=optimize).run(feeds))
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_causal_attention_builds_only_causal_products_forward_and_backward():
    """Every product in causal attention's forward graph and in its gradients is causal: the
    backward pass never computes the masked half either."""
    q = cl.variable("q", shape=(2, 5, 4, 8))
    k, v = cl.variable("k", shape=(2, 5, 2, 8)), cl.variable("v", shape=(2, 5, 2, 8))
    out, _ = cl.causal_attention(q, k, v)
    grads = cl.grad(cl.sum(out * out), [q, k, v])
    kinds = (HeadScores, HeadMix, HeadMixT)
    products = [n.op for n in cl.topological_order(grads) if isinstance(n.op, kinds)]
    assert len(products) == 6 and all(op.causal for op in products)


@needs_kernels
@pytest.mark.parametrize("masked_sign", [1, -1])
def test_skipped_terms_still_meet_a_kept_sum_of_negative_zero(masked_sign, monkeypatch):
    """A row of p·v whose kept terms underflow to −0: (M ⊙ p)·v adds the masked terms'
    signed zeros 0·v after them, +0 where v >= 0 (−0 + +0 = +0), −0 where each v < 0. The
    kernel that skips them gives those bits too (the unmasked kernel's on the masked p)."""
    ran, products = [], cpu_kernels.head_products

    def counted(*args):
        ran.append(products(*args))
        return ran[-1]

    monkeypatch.setattr(cpu_kernels, "head_products", counted)
    t = s = 40
    rng = np.random.default_rng(2)
    p = rng.uniform(0.1, 1.0, (4, 4, t, s)).astype(np.float32)
    v = masked_sign * rng.uniform(0.1, 1.0, (4, s, 2, 16)).astype(np.float32)
    p[0, 0, 0, 0] = 0.25  # query 0 sees key 0 only: 0.25 · (−1e-45) rounds to −0
    v[0, 0, 0, 0] = -1e-45
    zeroed = np.where(_kept(t, s), p, np.float32(0))
    for threads in (1, 2, 3):
        with threadpool_limits(threads):
            got = HeadMix(True).compute(np, p, v)
            want = HeadMix(False).compute(np, zeroed, v)
        assert got[0, 0, 0, 0] == 0 and np.signbit(got[0, 0, 0, 0]) == (masked_sign < 0)
        assert got.tobytes() == want.tobytes(), threads
    assert ran and all(out is not None for out in ran)  # the kernels computed them
