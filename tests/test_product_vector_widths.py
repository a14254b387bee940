"""The attention products' CPU kernel at both of its vector widths (``cpu_products.hpp``):
16 floats where the CPU has AVX-512, 8 elsewhere. Each element of a product is the same sum
in the same order at either width, so a build without AVX-512 must give the same bits as the
default build, for every product, mask, ragged shape, head size and special value, on any
number of threads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from conftest import needs_gxx
from course_lib.kernels import cpu_kernels
from course_lib.ops.attention import HeadMix, HeadMixT, HeadScores

needs_kernels = needs_gxx("the CPU kernels")


def _has_avx512() -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.exists() and "avx512f" in cpuinfo.read_text().split()


@needs_kernels
def test_the_default_build_uses_the_widest_vectors_and_the_narrow_one_eight(narrow):
    assert narrow.products_vector_width() == 8
    assert cpu_kernels._library().products_vector_width() == (16 if _has_avx512() else 8)


def _cases(t, s, kv, d, seed):
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    a, k, p = normal(2, t, 2 * kv, d), normal(2, s, kv, d), normal(2, 2 * kv, t, s)
    yield "finite", a, k, p
    k_special = k.copy()
    k_special[0, s // 2, 0, d // 2] = np.inf  # the masked terms are multiplied by 0, not skipped
    k_special[1, 0, -1, d - 1] = np.nan
    yield "inf and nan", a, k_special, p
    tiny = np.where(rng.random(p.shape) < 0.5, np.float32(-1e-30), np.float32(1e-30))
    yield "kept terms underflowing to -0", a, np.full_like(k, 1e-30), tiny


# rows: fewer than one block, one block of 6 or 12, ragged; keys ragged around 8, 16, 32
SHAPES = [(1, 1), (5, 5), (12, 12), (13, 29), (24, 33), (40, 50)]


@needs_kernels
@pytest.mark.skipif(not _has_avx512(), reason="without AVX-512 both builds are the 8-float one")
@pytest.mark.parametrize(("t", "s"), SHAPES)
@pytest.mark.parametrize("d", [1, 17, 40])  # head sizes: one vector a row, and two
@pytest.mark.parametrize("causal", [False, True])
def test_both_widths_give_the_same_bits(t, s, d, causal, narrow, monkeypatch):
    monkeypatch.setattr(cpu_kernels, "products_worth_it", lambda *arrays: True)
    # every product on the kernels at both widths, however many threads BLAS has here (the
    # narrow build has none: the rule would send the wide build's few pairs to BLAS)
    monkeypatch.setattr(cpu_kernels, "head_products_fit", lambda pairs, k, n: True)
    ran, products = [], cpu_kernels.head_products

    def counted(*args, **kwargs):
        result = products(*args, **kwargs)
        ran.append(result is not None)
        return result

    monkeypatch.setattr(cpu_kernels, "head_products", counted)
    ops = {"scores": HeadScores(causal), "mix": HeadMix(causal), "mix_t": HeadMixT(causal)}
    for kv in (1, 2):
        for what, a, k, p in _cases(t, s, kv, d, seed=t * s + d):
            inputs = {"scores": (a, k), "mix": (p, k), "mix_t": (p, a, k)}
            with monkeypatch.context() as patch:
                patch.setattr(cpu_kernels, "_library", lambda: narrow)
                eight = {name: op.compute(np, *inputs[name]) for name, op in ops.items()}
            for threads in (1, 3):  # the default build's pool
                with threadpool_limits(threads):
                    wide = {name: op.compute(np, *inputs[name]) for name, op in ops.items()}
                for name in ops:
                    assert eight[name].tobytes() == wide[name].tobytes(), (name, what, threads)
    assert ran and all(ran)  # every product ran on the kernels, none on the array path
