"""The LLaMA of notebook 08 on a device: what tests/test_devices.py checks of the boundary,
carried through the model's whole life on the strict stand-in (course_lib.strict_device).

Training, sampling with and without the KV cache, the ablation's table, the per-family
timing and loading a Hugging Face state dict run on the strict device and agree with the
same runs on the CPU. These tests pin the devices themselves, so they say the same on every
device `make test` runs them on.
"""

import numpy as np
import pytest

import course_lib as cl
from course_lib import strict_device
from course_lib.models import AdamW, Llama, LlamaConfig, generate, load_hf_state_dict, train
from course_lib.models.ablation import ablation
from course_lib.models.compute import flops_by_family, seconds_by_family, shares_table
from course_lib.models.kv_cache import KVCache
from course_lib.models.train import seconds_per_step
from course_lib.strict_device import StrictArray

#: Grouped-query attention (4 query heads, 2 K/V heads), two blocks: every part of the model.
CONFIG = LlamaConfig(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=24, vocab_size=32,
                     max_seq_len=16)  # fmt: skip
DEVICES = ("cpu", "strict")


@pytest.fixture(scope="module")
def tokens():
    return np.random.default_rng(0).integers(0, CONFIG.vocab_size, 400)


def on_each_device(run):
    """``run()`` on the CPU and on the strict device: {device: its result}."""
    results = {}
    for device in DEVICES:
        with cl.use_device(device):
            results[device] = run()
    return results


def test_three_training_steps_give_the_cpus_losses_and_parameters(tokens):
    def run():
        model = Llama(CONFIG, seed=0, init_std=0.2)
        optimizer = AdamW(model.params, lr=1e-2, weight_decay=0.01)
        history = train(model, tokens, 3, batch=2, seq=8, optimizer=optimizer, progress=False,
                        validation=tokens[:100], eval_every=2)  # fmt: skip
        assert all(cl.backend.device_of(a) == cl.get_device() for a in model.params.values())
        assert all(cl.backend.device_of(v) == cl.get_device() for v in optimizer.v.values())
        assert all(type(x) is float for x in (*history.losses, *history.val_losses))
        return history, {name: cl.to_numpy(a) for name, a in model.params.items()}

    (cpu, cpu_params), (strict, strict_params) = on_each_device(run).values()
    np.testing.assert_allclose(strict.losses, cpu.losses, rtol=1e-4)
    np.testing.assert_allclose(strict.val_losses, cpu.val_losses, rtol=1e-4)
    assert cpu.losses[-1] < cpu.losses[0]  # the steps did train
    for name, value in cpu_params.items():
        np.testing.assert_allclose(strict_params[name], value, rtol=1e-4, atol=1e-6, err_msg=name)


def test_seconds_per_step_runs_on_the_device_and_changes_nothing(tokens):
    with cl.use_device("strict"):
        model = Llama(CONFIG, seed=0)
        optimizer = AdamW(model.params)
        before = {name: cl.to_numpy(a).copy() for name, a in model.params.items()}
        seconds = seconds_per_step(model, tokens, batch=2, seq=8, optimizer=optimizer, repeats=1)
        assert seconds > 0 and optimizer.step_count == 0
        for name, value in before.items():
            np.testing.assert_array_equal(cl.to_numpy(model.params[name]), value)


@pytest.mark.parametrize("kv_cache", [False, True])
def test_generate_samples_the_cpus_tokens(kv_cache):
    def run():
        model = Llama(CONFIG, seed=0, init_std=0.5)  # peaked logits: a clear choice per step
        return [generate(model, [1, 2, 3], 10, temperature, top_k, seed=0, kv_cache=kv_cache)
                for temperature, top_k in [(0.0, None), (0.8, 5)]]  # fmt: skip

    results = on_each_device(run)
    assert results["strict"] == results["cpu"]
    assert all(isinstance(i, int) for ids in results["strict"] for i in ids)


def test_kv_cache_decoding_gives_the_cpus_logits_and_keeps_the_cache_on_the_device():
    ids = np.random.default_rng(1).integers(0, CONFIG.vocab_size, (2, 9))

    def run():
        model = Llama(CONFIG, seed=0, init_std=0.2)
        logits, cache = model.decode(ids[:, :5])  # prefill
        steps = [logits[:, -1]]
        for t in range(5, ids.shape[1]):
            logits, cache = model.decode(ids[:, t : t + 1], cache)
            steps.append(logits[:, -1])
        assert isinstance(cache, KVCache) and cache.length == ids.shape[1]
        assert all(isinstance(a, np.ndarray) for a in steps)  # logits come back to the host
        kept = [cl.backend.device_of(k._data) for k in (*cache.keys, *cache.values)]
        assert kept == [cl.get_device()] * 2 * CONFIG.n_layers
        return np.stack(steps), model.logits(ids)[:, 4:], cache.nbytes

    results = on_each_device(run)
    (cpu_steps, cpu_full, cpu_bytes), (steps, full, nbytes) = results.values()
    np.testing.assert_allclose(steps, cpu_steps, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(full, cpu_full, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.swapaxes(steps, 0, 1), full, rtol=1e-4, atol=1e-5)
    assert nbytes == cpu_bytes


def test_the_ablation_table_runs_on_the_device_with_the_cpus_numbers(tokens):
    config = LlamaConfig(dim=16, n_layers=1, n_heads=4, n_kv_heads=4, ffn_dim=40,
                         vocab_size=CONFIG.vocab_size, max_seq_len=8)  # fmt: skip

    def run():
        table = ablation(config, tokens[:300], tokens[300:], steps=2, batch=2, seq=8)
        return table, str(table), table._repr_html_(), table.summary()

    (cpu, *cpu_shown), (strict, *strict_shown) = on_each_device(run).values()
    for a, b in zip(strict.runs, cpu.runs):
        assert a.label == b.label and a.n_params == b.n_params
        np.testing.assert_allclose(a.history.losses, b.history.losses, rtol=1e-4)
        np.testing.assert_allclose(a.held_out, b.held_out, rtol=1e-4)
    assert "LLaMA, seed 1" in strict_shown[0] and "<table" in strict_shown[1]
    assert strict_shown[0].splitlines()[0] == cpu_shown[0].splitlines()[0]


def test_op_timing_and_flops_by_family_run_on_the_device():
    batch_tokens = np.random.default_rng(2).integers(0, CONFIG.vocab_size, (2, 8))

    def run():
        model = Llama(CONFIG, seed=0)
        graph = model.forward_graph(2, 8)
        feed = model.feed(graph, batch_tokens)
        assert {cl.backend.device_of(feed[v]) for v in graph.params.values()} == {cl.get_device()}
        return flops_by_family(graph.loss), seconds_by_family(graph.loss, feed, repeats=1)

    (cpu_flops, _), (flops, seconds) = on_each_device(run).values()
    assert flops == cpu_flops
    assert set(flops) <= set(seconds) and all(s > 0 for s in seconds.values())
    assert all(type(s) is float for s in seconds.values())
    assert "products" in shares_table({k: s * 1e3 for k, s in seconds.items()}, unit="ms")


def test_seconds_by_family_takes_host_feeds_and_refuses_another_devices_arrays():
    model = Llama(CONFIG, seed=0)  # made on the current device: its feed is used below
    graph = model.forward_graph(1, 4)
    host_feed = {v: cl.to_numpy(a) for v, a in model.feed(graph, np.ones((1, 4), int)).items()}
    with cl.use_device("strict"):
        assert seconds_by_family(graph.loss, host_feed, repeats=1)  # host data enters
    with cl.use_device("cpu"):
        foreign = {v: strict_device.asarray(a) for v, a in host_feed.items()}
        with pytest.raises(cl.DeviceError, match="'strict' device"):
            seconds_by_family(graph.loss, foreign, repeats=1)


def test_a_hugging_face_state_dict_loads_onto_a_model_on_the_device():
    with cl.use_device("cpu"):
        source = Llama(CONFIG, seed=3, init_std=0.2)
        state = {name: a.copy() for name, a in source.params.items()}
        state["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(2)  # HF's buffer
        expected = source.logits(np.arange(6)[None, :])
    with cl.use_device("strict"):
        model = Llama(CONFIG, seed=0)
        assert load_hf_state_dict(model, state) is model
        assert all(isinstance(a, StrictArray) for a in model.params.values())
        np.testing.assert_allclose(model.logits(np.arange(6)[None, :]), expected, rtol=1e-5,
                                   atol=1e-6)  # fmt: skip
        # device arrays of this device load too (a state dict read from another model here)
        load_hf_state_dict(model, {name: a * 1 for name, a in model.params.items()})
        np.testing.assert_allclose(model.logits(np.arange(6)[None, :]), expected, rtol=1e-5,
                                   atol=1e-6)  # fmt: skip
    with cl.use_device("cpu"):
        with pytest.raises(cl.DeviceError, match="model.to"):
            load_hf_state_dict(model, state)  # the model is on the strict device


def test_a_torch_state_dict_loads_onto_the_device():
    torch = pytest.importorskip("torch")
    with cl.use_device("cpu"):
        source = Llama(CONFIG, seed=4)
        state = {name: torch.from_numpy(a.copy()) for name, a in source.params.items()}
    with cl.use_device("strict"):
        model = load_hf_state_dict(Llama(CONFIG, seed=0), state)
        for name, value in source.params.items():
            np.testing.assert_array_equal(cl.to_numpy(model.params[name]), value)


@pytest.mark.parametrize("exercise_id", ["08.attention", "08.rmsnorm", "09.count_params"])
def test_the_model_exercises_check_answers_on_the_device(exercise_id):
    from exercise_notebooks import notebook_exercises, reference_answer  # noqa: PLC0415

    from course_lib.exercises import verify  # noqa: PLC0415

    answer = reference_answer(notebook_exercises()[exercise_id])
    with cl.use_device("strict"):
        verdict = verify(exercise_id, answer)
    assert verdict.passed, verdict.message
    with cl.use_device("cpu"):
        assert verify(exercise_id, answer).message == verdict.message
