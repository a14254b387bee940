"""The engine and the LLaMA on a real GPU through CuPy, against the CPU (skipped without one;
`make gpu-check` runs them). The strict stand-in device covers the same paths in CI."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.backend import gpu_available
from course_lib.models import AdamW, Llama, LlamaConfig, generate, train

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_available(), reason="needs CuPy and an NVIDIA GPU"),
]
SMALL = LlamaConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab_size=64,
                    max_seq_len=32)  # fmt: skip


def test_numpy_feeds_and_constants_enter_the_gpu():
    import cupy  # noqa: PLC0415

    with cl.use_device("gpu"):
        x1, x2 = cl.variable("x1", shape=()), cl.variable("x2", shape=())
        y = cl.log(x1) + x1 * x2 - cl.sin(x2)
        values = cl.evaluate([y, *cl.grad(y, [x1, x2])], {"x1": np.float64(2.0), "x2": 5.0})
        assert all(isinstance(v, cupy.ndarray) for v in values)
        np.testing.assert_allclose([float(v) for v in values], [11.652071, 5.5, 1.716338],
                                   rtol=1e-6)  # fmt: skip
        x = cl.variable("x")
        out = cl.evaluate(x * np.ones(3) + cl.constant([1.0, 2.0, 3.0]), {x: np.arange(3.0)})
        np.testing.assert_array_equal(cl.to_numpy(out), [1.0, 3.0, 5.0])


def test_llama_trains_generates_and_decodes_on_the_gpu_as_on_the_cpu():
    tokens = np.random.default_rng(0).integers(0, SMALL.vocab_size, 400)
    losses, logits, texts = {}, {}, {}
    for device in ("cpu", "gpu"):
        with cl.use_device(device):
            model = Llama(SMALL, seed=0)
            history = train(model, tokens, 3, batch=4, seq=16, progress=False,
                            optimizer=AdamW(model.params, lr=1e-2))  # fmt: skip
            losses[device] = history.losses
            prompt = tokens[None, :8]
            full = model.logits(prompt)
            _, cache = model.decode(prompt[:, :7])
            step, _ = model.decode(prompt[:, 7:], cache)
            np.testing.assert_allclose(step[:, -1], full[:, -1], rtol=1e-4, atol=1e-5)
            logits[device] = full
            texts[device] = [generate(model, [1, 2, 3], 8, seed=0, kv_cache=kv)
                             for kv in (False, True)]  # fmt: skip
    np.testing.assert_allclose(losses["gpu"], losses["cpu"], rtol=1e-4)
    np.testing.assert_allclose(logits["gpu"], logits["cpu"], rtol=1e-3, atol=1e-4)
    assert texts["gpu"] == texts["cpu"]
