"""The models layer at its edges: loading a state dict, storing a step, copying a model,
training without an optimiser, sampling and decoding odd inputs, checking the constructor's
arguments, and state made on another device (a review's findings).

The device tests pin the devices themselves (course_lib.strict_device), so they say the same
on every device `make test` runs them on.
"""

import copy
import gc
import pickle
import weakref

import numpy as np
import pytest

import course_lib as cl
from course_lib.models import (
    SGD,
    AdamW,
    Llama,
    LlamaConfig,
    TrainHistory,
    generate,
    load_hf_state_dict,
    split_tokens,
    train,
)
from course_lib.models.sampling import next_token_distribution
from course_lib.models.train import seconds_per_step, training_step

CONFIG = LlamaConfig(dim=16, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=32, vocab_size=13,
                     max_seq_len=8)  # fmt: skip
TOKENS = np.arange(200) % CONFIG.vocab_size
EMBED, HEAD = "model.embed_tokens.weight", "lm_head.weight"


@pytest.fixture
def cpu():
    with cl.use_device("cpu"):
        yield


def _train(model, optimizer=None, steps=1):
    return train(model, TOKENS, steps, batch=2, seq=8, optimizer=optimizer, progress=False)


# -- load_hf_state_dict copies ------------------------------------------------------------------
def test_a_loaded_state_dict_is_copied_so_training_leaves_the_callers_arrays_alone(cpu):
    state = {name: a.copy() for name, a in Llama(CONFIG, seed=1).params.items()}
    before = {name: a.copy() for name, a in state.items()}
    model = load_hf_state_dict(Llama(CONFIG), state)
    for name, array in model.params.items():
        assert not np.shares_memory(array, state[name]), name
    _train(model)
    for name, value in before.items():
        np.testing.assert_array_equal(state[name], value, err_msg=name)
    assert not np.array_equal(model.params[HEAD], before[HEAD])  # the model did train


def test_tied_weights_load_as_two_parameters_that_train_apart(cpu):
    state = {name: a.copy() for name, a in Llama(CONFIG, seed=1).params.items()}
    state[HEAD] = state[EMBED]  # HF's tie_word_embeddings: one array under both names
    tied = load_hf_state_dict(Llama(CONFIG), state)
    untied = load_hf_state_dict(Llama(CONFIG), {n: a.copy() for n, a in state.items()})
    assert not np.shares_memory(tied.params[EMBED], tied.params[HEAD])
    _train(tied)
    _train(untied)
    for name in (EMBED, HEAD):
        np.testing.assert_array_equal(tied.params[name], untied.params[name], err_msg=name)


def test_a_read_only_state_dict_loads_into_writable_parameters(cpu):
    state = {name: a.copy() for name, a in Llama(CONFIG, seed=1).params.items()}
    for array in state.values():
        array.flags.writeable = False
    model = load_hf_state_dict(Llama(CONFIG), state)
    assert all(a.flags.writeable for a in model.params.values())
    assert len(_train(model).losses) == 1


def test_a_torch_state_dict_is_copied_too(cpu):
    torch = pytest.importorskip("torch")
    state = {name: torch.tensor(a) for name, a in Llama(CONFIG, seed=1).params.items()}
    state[HEAD] = state[EMBED]
    before = state[EMBED].clone()
    model = load_hf_state_dict(Llama(CONFIG), state)
    _train(model)
    assert torch.equal(state[EMBED], before)


# -- a step is stored all or nothing ------------------------------------------------------------
def test_a_step_that_cannot_be_stored_changes_nothing_and_names_the_parameter():
    model = Llama(CONFIG, seed=1)
    head = cl.to_numpy(model.params[HEAD]).copy()
    head.flags.writeable = False
    model.params[HEAD] = head  # the last parameter: every other one would be written first
    before = {name: cl.to_numpy(a).copy() for name, a in model.params.items()}
    optimizer = AdamW(model.params)
    with pytest.raises(cl.ParameterError, match=r"AdamW.write_back: .*lm_head.weight is read-only"):
        _train(model, optimizer)
    for name, value in before.items():
        np.testing.assert_array_equal(cl.to_numpy(model.params[name]), value, err_msg=name)
    assert optimizer.step_count == 0
    assert not any(cl.to_numpy(m).any() for m in (*optimizer.m.values(), *optimizer.v.values()))


# -- copies and pickles of a model that has run -------------------------------------------------
@pytest.mark.parametrize("make_copy", [copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))],
                         ids=["deepcopy", "pickle"])  # fmt: skip
def test_a_model_that_has_run_copies_with_its_parameters(make_copy):
    model = Llama(CONFIG, seed=1, init_std=0.3)
    tokens = np.array([[1, 2, 3, 4]])
    expected = model.logits(tokens)
    _, grads = model.loss_and_grads(tokens)
    twin = make_copy(model)
    np.testing.assert_allclose(twin.logits(tokens), expected, rtol=1e-6)
    _train(twin)  # the copy trains apart from the original
    np.testing.assert_array_equal(model.logits(tokens), expected)
    assert not np.allclose(twin.logits(tokens), expected)


def test_a_kv_cache_copies_and_the_copy_continues_the_same():
    model = Llama(CONFIG, seed=1, init_std=0.3)
    _, cache = model.decode(np.array([[1, 2, 3]]))
    twin = copy.deepcopy(cache)
    assert twin.length == 3 and twin.device == cache.device
    np.testing.assert_allclose(model.decode([[4]], twin)[0], model.decode([[4]], cache)[0])


# -- train and seconds_per_step without an optimiser --------------------------------------------
def test_a_training_step_is_kept_only_as_long_as_its_optimiser():
    model = Llama(CONFIG, seed=1)
    optimizer = AdamW(model.params)
    assert training_step(model, optimizer, 2, 8) is training_step(model, optimizer, 2, 8)
    _train(model, optimizer)
    gone = weakref.ref(optimizer)
    del optimizer
    gc.collect()
    assert gone() is None  # neither the model nor its cached step keeps it


def test_train_without_an_optimiser_does_not_pile_up_steps_on_the_model():
    model = Llama(CONFIG, seed=1)
    for _ in range(3):
        _train(model)
        seconds_per_step(model, TOKENS, batch=2, seq=8, repeats=1)
    gc.collect()
    assert len(model._executors) == 0 and len(model._owned) == 0


# -- generate checks its prompt -----------------------------------------------------------------
@pytest.mark.parametrize("kv_cache", [False, True])
@pytest.mark.parametrize(("prompt", "message"), [
    ([1.7, 2.2], r"prompt\[0\] = 1.7 is not a token id \(an integer\)"),
    ([1, True], r"prompt\[1\] = True is not a token id"),
    ([-5, 99, *range(8)], r"prompt\[0\] = -5 is not a token id in \[0, 13\)"),
    ([*range(8), 99], r"prompt\[8\] = 99 is not a token id in \[0, 13\)"),
    ([1, 10**20], r"prompt\[1\] = 100000000000000000000 is not a token id in \[0, 13\)"),
    ("hi", r"prompt\[0\] = 104 is not a token id in \[0, 13\)"),
])  # fmt: skip
def test_generate_checks_every_prompt_id_before_sampling(prompt, message, kv_cache):
    model = Llama(CONFIG, seed=1)
    with pytest.raises(cl.FeedError, match=message):
        generate(model, prompt, 2, kv_cache=kv_cache)


def test_generate_takes_integer_ids_of_any_kind_but_no_numpy_float_or_bool():
    model = Llama(CONFIG, seed=1)
    expected = generate(model, [1, 2, 3], 3, seed=0)
    assert generate(model, np.array([1, 2, 3], np.uint8), 3, seed=0) == expected
    assert generate(model, (np.int64(1), 2, np.int32(3)), 3, seed=0) == expected
    assert all(type(i) is int for i in expected)
    for bad in (np.array([1.0, 2.0]), [np.bool_(True)]):
        with pytest.raises(cl.FeedError, match=r"prompt\[0\] = .* is not a token id"):
            generate(model, bad, 3)


def test_a_text_prompt_on_a_model_with_more_than_256_ids_is_refused_at_once():
    model = Llama(LlamaConfig(dim=16, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=32,
                              vocab_size=300, max_seq_len=16))  # fmt: skip
    model.logits = model.decode = None  # refused before any step: nothing is sampled
    with pytest.raises(cl.FeedError, match=r"a text prompt needs a byte-level model .*300"):
        generate(model, "hi", 40)


# -- sampling: tiny temperatures, NaN logits ----------------------------------------------------
@pytest.mark.parametrize("top_k", [None, 2])
def test_a_tiny_temperature_samples_the_argmax(top_k):
    probs = next_token_distribution(np.array([1.0, 2.0, 0.5]), 1e-310, top_k)
    np.testing.assert_array_equal(probs, [0.0, 1.0, 0.0])
    probs = next_token_distribution(np.array([1e300, -1e300]), 1e-3, top_k)
    np.testing.assert_array_equal(probs, [1.0, 0.0])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_logits_that_are_not_numbers_are_a_numeric_error(bad, temperature):
    with pytest.raises(cl.NumericError, match="sampling: the logits hold .*diverged"):
        next_token_distribution(np.array([bad, 2.0]), temperature, None)


def test_generate_from_a_diverged_model_says_so():
    model = Llama(CONFIG, seed=1)
    model.params[HEAD] = model.params[HEAD] * np.nan
    with pytest.raises(cl.NumericError, match="diverged"):
        generate(model, [1, 2], 2, temperature=0.0)


# -- decode's shapes ----------------------------------------------------------------------------
def test_decode_refuses_an_empty_batch_or_prompt_as_logits_does():
    model = Llama(CONFIG, seed=1)
    wording = r"Llama: need batch >= 1 and 1 <= seq <= max_seq_len=8, got batch=\d, seq=\d"
    for shape in [(0, 2), (1, 0), (0, 0)]:
        tokens = np.zeros(shape, np.int64)
        with pytest.raises(cl.ShapeError, match=wording):
            model.logits(tokens)
        with pytest.raises(cl.ShapeError, match=wording):
            model.decode(tokens)
    _, cache = model.decode(np.array([[1, 2]]))  # after a prefill, no new token is no step
    logits, same = model.decode(np.zeros((1, 0), np.int64), cache)
    assert logits.shape == (1, 0, CONFIG.vocab_size) and same.length == 2


# -- the constructor, the history -----------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"init_std": float("nan")}, cl.ParameterError, "Llama: init_std must be a real number >= 0"),
    ({"init_std": -0.1}, cl.ParameterError, "Llama: init_std must be a real number >= 0"),
    ({"init_std": "0.02"}, cl.GraphError, "Llama: init_std must be a real number"),
    ({"seed": -1}, cl.ParameterError, "Llama: seed must be an integer >= 0"),
    ({"seed": 1.5}, cl.GraphError, "Llama: seed must be an integer"),
    ({"seed": True}, cl.GraphError, "Llama: seed must be an integer"),
    ({"dtype": np.int64}, cl.GraphError, "Llama: dtype must be a floating-point dtype"),
    ({"dtype": "text"}, cl.GraphError, "Llama: dtype: 'text' is not a dtype"),
])  # fmt: skip
def test_the_model_checks_its_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        Llama(CONFIG, **kwargs)


def test_the_model_takes_good_arguments_of_any_kind_and_no_bad_one():
    model = Llama(CONFIG, seed=np.int64(3), dtype="float64", init_std=np.float32(0.0))
    assert model.dtype == np.float64 and not model.params[HEAD].any()
    with pytest.raises(cl.GraphError, match="Llama: dtype must be a floating-point dtype"):
        Llama(CONFIG, dtype=bool)


@pytest.mark.parametrize("window", [0, -2, 2.5, "3", None])
def test_smoothed_checks_its_window(window):
    history = TrainHistory(losses=[3.0, 2.0, 1.0])
    with pytest.raises(cl.ShapeError, match="TrainHistory.smoothed: window must be a positive"):
        history.smoothed(window)
    np.testing.assert_allclose(history.smoothed(2), [3.0, 2.5, 1.5])


# -- state made on another device -----------------------------------------------------------------
def test_a_kv_cache_records_its_device_and_a_stale_one_is_refused():
    with cl.use_device("cpu"):
        model = Llama(CONFIG, seed=1)
        _, cache = model.decode(np.array([[1, 2, 3]]))
        assert cache.device == "cpu"
        model.to("strict")
        with pytest.raises(cl.DeviceError, match=r"KVCache was made on the 'cpu' device, .*"
                                                 r"'strict'; prefill again"):  # fmt: skip
            model.decode([[1]], cache)
        logits, fresh = model.decode(np.array([[1, 2, 3]]))  # the prefill again
        assert fresh.device == "strict" and logits.shape == (1, 3, CONFIG.vocab_size)


def test_train_takes_tokens_already_on_the_device():
    with cl.use_device("strict"):
        on_device = cl.to_device(TOKENS)
        losses = {}
        for name, tokens in (("host", TOKENS), ("device", on_device)):
            model = Llama(CONFIG, seed=1)
            history = train(model, tokens, 2, batch=2, seq=8, optimizer=AdamW(model.params),
                            progress=False, validation=on_device, eval_every=1)  # fmt: skip
            losses[name] = history.losses + history.val_losses
        assert losses["device"] == losses["host"]
        train_part, held_out = split_tokens(on_device)
        assert isinstance(train_part, np.ndarray) and held_out.size == 20


def test_an_optimiser_made_before_the_model_moved_is_refused_by_name():
    with cl.use_device("cpu"):
        model = Llama(CONFIG, seed=1)
        optimizer = AdamW(model.params)
        model.to("strict")
        with pytest.raises(cl.DeviceError, match=r"AdamW: its moments are on the 'cpu' device, "
                                                 r".*create the optimiser after "
                                                 r"model.to\('strict'\)"):  # fmt: skip
            _train(model, optimizer)
        assert optimizer.step_count == 0
        assert len(_train(model, AdamW(model.params)).losses) == 1  # made after the move


def test_one_array_under_two_parameter_names_is_refused_before_anything_is_written():
    tied = np.ones(3)
    arrays = {"a": tied, "b": tied}
    a, b = cl.variable("a", (3,), np.float64), cl.variable("b", (3,), np.float64)
    loss = cl.sum(a * 2.0) + cl.sum(b * 3.0)
    optimizer = SGD(lr=0.1)
    nodes = optimizer.update_nodes({"a": a, "b": b}, dict(zip("ab", cl.grad(loss, [a, b]))))
    new = cl.Executor(nodes).run({a: tied, b: tied, **optimizer.feed()})
    with pytest.raises(cl.ParameterError, match="parameter a and parameter b share memory"):
        optimizer.write_back(arrays, new)
    np.testing.assert_array_equal(tied, 1.0)
    base = np.ones(5)
    for overlapping in ({"a": tied, "b": tied[:]}, {"a": base[:3], "b": base[2:]}):
        with pytest.raises(cl.ParameterError, match="parameter a and parameter b share memory"):
            optimizer.write_back(overlapping, new)
    assert (tied == 1.0).all() and (base == 1.0).all()


def test_a_complex_state_dict_entry_is_refused_not_cast():
    model = Llama(CONFIG)
    state = {name: cl.to_numpy(a) for name, a in model.params.items()}
    state[EMBED] = state[EMBED] + 1j * np.inf
    with pytest.raises(cl.GraphError, match=f"state dict entry {EMBED} holds numbers"):
        load_hf_state_dict(Llama(CONFIG), state)


def _adamw_run(arrays):
    """An AdamW over ``arrays`` (name -> float32 vector) and one run's values (on the host)."""
    optimizer = AdamW(arrays, lr=0.1)
    ws = {n: cl.variable(n, a.shape, a.dtype) for n, a in arrays.items()}
    gs = {n: cl.variable(f"g{n}", a.shape, a.dtype) for n, a in arrays.items()}
    run = cl.Executor(optimizer.update_nodes(ws, gs))
    feed = {ws[n]: a for n, a in arrays.items()}
    feed |= {gs[n]: np.ones_like(a) for n, a in arrays.items()}
    return optimizer, run.run(feed | optimizer.feed())


@pytest.fixture
def on_host():
    with cl.backend.use_device("cpu"):  # NumPy's views, flags and memory are what is tested
        yield


def test_write_back_keeps_the_state_it_is_given_and_updates_parameters_in_place(on_host):
    arrays = {"a": np.zeros(4, np.float32), "b": np.ones(3, np.float32)}
    before = dict(arrays)
    optimizer, values = _adamw_run(arrays)
    optimizer.write_back(arrays, values)
    assert all(arrays[n] is before[n] for n in arrays)  # the model's arrays, changed in place
    assert (arrays["a"] < 0).all()
    states = [optimizer.m["a"], optimizer.v["a"], optimizer.m["b"], optimizer.v["b"]]
    assert all(s is v for s, v in zip(states, values[2:]))  # taken over, not copied
    assert optimizer.m["a"].flags.writeable and optimizer.m["a"].dtype == np.float32


def test_write_back_copies_state_values_that_share_memory_or_differ_in_kind(on_host):
    arrays = {"a": np.zeros(4, np.float32)}
    optimizer, (new_a, m, v) = _adamw_run(arrays)
    shared = np.ones(8, np.float32)
    frozen = m.copy()
    frozen.flags.writeable = False
    cases = {  # (m's value, v's value): m's must be copied into the old array
        "one array for both": (m, m),
        "a view of the parameter's own value": (new_a[:], v.copy()),
        "halves of one array that overlap": (shared[:4], shared[3:7]),
        "the parameter's array": (arrays["a"], v.copy()),
    }
    for why, (new_m, new_v) in cases.items():
        old_m = optimizer.m["a"]
        optimizer.write_back(arrays, [new_a, new_m, new_v])
        kept = optimizer.m["a"], optimizer.v["a"]
        assert kept[0] is old_m, why
        others = (kept[1], arrays["a"], new_a)
        assert not any(np.may_share_memory(kept[0], o) for o in others), why
        assert not any(np.may_share_memory(kept[1], o) for o in others[1:]), why
    for odd in (m.astype(np.float64), frozen, np.repeat(m, 2)[::2]):  # dtype, read-only, strided
        old_m = optimizer.m["a"]
        optimizer.write_back(arrays, [new_a, odd, v.copy()])
        assert optimizer.m["a"] is old_m and optimizer.m["a"].dtype == np.float32
        np.testing.assert_array_equal(old_m, odd)


def _strict_adamw_run(xp):
    """An AdamW over one strict-device vector "a" and one run's values (new a, m, v)."""
    arrays = {"a": xp.asarray(np.zeros(4, np.float32))}
    optimizer = AdamW(arrays, lr=0.1)
    w, g = cl.variable("a", (4,), np.float32), cl.variable("ga", (4,), np.float32)
    run = cl.Executor(optimizer.update_nodes({"a": w}, {"a": g}))
    feed = {w: arrays["a"], g: xp.asarray(np.ones(4, np.float32))} | optimizer.feed()
    return arrays, optimizer, run.run(feed)


def test_write_back_on_the_strict_device_copies_state_values_that_share_memory():
    # copied, as on the host: a device array's bytes are found from its data.ptr and strides
    with cl.backend.use_device("strict"):
        xp = cl.backend.xp()
        arrays, optimizer, (new_a, m, v) = _strict_adamw_run(xp)
        optimizer.write_back(arrays, [new_a, new_a[:], v])  # m's value: a view of a's value
        kept = cl.to_numpy(optimizer.m["a"])
        new_a[...] = xp.asarray(np.full(4, 7.0, np.float32))  # the caller's array, changed later
        np.testing.assert_array_equal(cl.to_numpy(optimizer.m["a"]), kept)

        shared = xp.asarray(np.arange(8.0, dtype=np.float32))
        optimizer.write_back(arrays, [new_a, shared[:4], shared[2:6]])  # m and v overlap
        kept = cl.to_numpy(optimizer.v["a"])
        optimizer.m["a"][...] = xp.asarray(np.zeros(4, np.float32))
        np.testing.assert_array_equal(cl.to_numpy(optimizer.v["a"]), kept)

        whole = xp.asarray(np.arange(16.0, dtype=np.float32))
        strided = {"a": whole[::4]}  # a parameter spanning 13 floats in 4 (its [2] is whole[8])
        optimizer.write_back(strided, [new_a, whole[8:12], v.copy()])  # m's value: whole[8:12]
        kept = cl.to_numpy(optimizer.m["a"])
        strided["a"][...] = xp.asarray(np.full(4, -1.0, np.float32))
        np.testing.assert_array_equal(cl.to_numpy(optimizer.m["a"]), kept)


def test_write_back_stores_the_values_as_they_were_when_it_was_called(on_host):
    """Values that are the targets' own arrays, swapped: each target gets what the other held
    before the call, not what an earlier copy of this call wrote there."""
    arrays = {"a": np.zeros(4, np.float32), "b": np.ones(4, np.float32)}
    optimizer, _ = _adamw_run(arrays)
    optimizer.m["a"][:], optimizer.v["a"][:] = 2.0, 3.0
    m, v = optimizer.m["a"], optimizer.v["a"]
    a, b = arrays["a"], arrays["b"]
    values = [b, a, v, m, optimizer.v["b"].copy(), optimizer.m["b"].copy()]
    optimizer.write_back(arrays, values)
    np.testing.assert_array_equal(arrays["a"], 1.0)
    np.testing.assert_array_equal(arrays["b"], 0.0)
    np.testing.assert_array_equal(optimizer.m["a"], 3.0)
    np.testing.assert_array_equal(optimizer.v["a"], 2.0)
