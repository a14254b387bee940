"""The attention products' CPU kernel at both of its vector widths (``cpu_products.hpp``):
16 floats where the CPU has AVX-512, 8 elsewhere. Each element of a product is the same sum
in the same order at either width, so a build without AVX-512 must give the same bits as the
default build, for every product, mask, ragged shape and special value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from course_lib.kernels import cpu_kernels
from course_lib.ops.attention import HeadMix, HeadMixT, HeadScores

needs_kernels = pytest.mark.skipif(
    not cpu_kernels.worth_it(np.zeros(cpu_kernels.MIN_SIZE, np.float32)), reason="no C++ compiler"
)


def _has_avx512() -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.exists() and "avx512f" in cpuinfo.read_text().split()


@needs_kernels
def test_the_default_build_uses_the_widest_vectors_and_the_narrow_one_eight(narrow):
    assert narrow.products_vector_width() == 8
    assert cpu_kernels._library().products_vector_width() == (16 if _has_avx512() else 8)


def _cases(t, s, kv, seed):
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    a, k, p = normal(2, t, 4, 40), normal(2, s, kv, 40), normal(2, 4, t, s)
    yield "finite", a, k, p
    k_special = k.copy()
    k_special[0, s // 2, 0, 3] = np.inf  # the masked terms are multiplied by 0, not skipped
    k_special[1, 0, -1, 5] = np.nan
    yield "inf and nan", a, k_special, p
    tiny = np.where(rng.random(p.shape) < 0.5, np.float32(-1e-30), np.float32(1e-30))
    yield "kept terms underflowing to -0", a, np.full_like(k, 1e-30), tiny


# rows: fewer than one block, one block of 6 or 12, ragged; columns: ragged around 8, 16, 32
SHAPES = [(5, 5), (12, 12), (13, 29), (40, 50), (24, 33), (128, 128)]


@needs_kernels
@pytest.mark.parametrize(("t", "s"), SHAPES)
@pytest.mark.parametrize("kv", [1, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_both_widths_give_the_same_bits(t, s, kv, causal, narrow, monkeypatch):
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
    for seed, (what, a, k, p) in enumerate(_cases(t, s, kv, seed=t * s)):
        inputs = {"scores": (a, k), "mix": (p, k), "mix_t": (p, a, k)}
        wide = {name: op.compute(np, *inputs[name]) for name, op in ops.items()}
        with monkeypatch.context() as patch:
            patch.setattr(cpu_kernels, "_library", lambda: narrow)
            eight = {name: op.compute(np, *inputs[name]) for name, op in ops.items()}
        for name in ops:
            assert eight[name].tobytes() == wide[name].tobytes(), (name, what, seed)
    assert ran and all(ran)  # every product ran on the kernels, none on the array path
