"""Review 11 (training): the optimisers and the training loop against torch.optim, and the
settings a compiled step must not keep from before."""

import copy
import dataclasses

import numpy as np
import pytest

import course_lib as cl
from course_lib.models import AdamW, Llama, LlamaConfig, cosine_schedule, train
from course_lib.models.corpus import random_windows
from course_lib.models.optim import SGD

CONFIG = LlamaConfig(dim=16, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=32, vocab_size=13,
                     max_seq_len=8)  # fmt: skip
TOKENS = np.arange(200) % CONFIG.vocab_size


def _params_equal(a, b) -> bool:
    return all(np.array_equal(a.params[n], b.params[n]) for n in a.params)


def test_a_weight_decay_changed_between_runs_is_the_one_the_next_run_uses():
    # the step compiled by the first train() kept weight_decay=0.5 in its update nodes: the
    # new value was ignored, silently
    changed, fresh = Llama(CONFIG, seed=0), Llama(CONFIG, seed=0)
    optimizer = SGD(0.1, weight_decay=0.5)
    train(changed, TOKENS, 1, batch=2, seq=8, optimizer=optimizer, progress=False)
    optimizer.weight_decay = 0.0
    train(changed, TOKENS, 1, batch=2, seq=8, optimizer=optimizer, progress=False, seed=1)
    train(fresh, TOKENS, 1, batch=2, seq=8, optimizer=SGD(0.1, weight_decay=0.5), progress=False)
    train(fresh, TOKENS, 1, batch=2, seq=8, optimizer=SGD(0.1), progress=False, seed=1)
    assert _params_equal(changed, fresh)


def test_adamw_betas_and_eps_changed_between_runs_are_used():
    changed, fresh = Llama(CONFIG, seed=0), Llama(CONFIG, seed=0)
    optimizer = AdamW(changed.params, lr=0.01)
    train(changed, TOKENS, 1, batch=2, seq=8, optimizer=optimizer, progress=False)
    optimizer.betas, optimizer.eps = (0.5, 0.6), 1e-3
    train(changed, TOKENS, 1, batch=2, seq=8, optimizer=optimizer, progress=False, seed=1)
    reference = AdamW(fresh.params, lr=0.01)
    train(fresh, TOKENS, 1, batch=2, seq=8, optimizer=reference, progress=False)
    other = AdamW(fresh.params, lr=0.01, betas=(0.5, 0.6), eps=1e-3)
    other.m, other.v, other.step_count = reference.m, reference.v, reference.step_count
    train(fresh, TOKENS, 1, batch=2, seq=8, optimizer=other, progress=False, seed=1)
    assert _params_equal(changed, fresh)


def test_an_sgd_trains_a_model_again_after_training_another():
    # was ShapeError: "12 values for the update nodes of 21 parameter(s)" (write_back took the
    # names of the second model's step for the first's values)
    small = Llama(CONFIG, seed=0)
    deeper = Llama(dataclasses.replace(CONFIG, n_layers=2), seed=0)
    alone = Llama(CONFIG, seed=0)
    optimizer = SGD(0.1)
    for model in (small, deeper, small):
        train(model, TOKENS, 1, batch=2, seq=8, optimizer=optimizer, progress=False)
    for _ in range(2):
        train(alone, TOKENS, 1, batch=2, seq=8, optimizer=SGD(0.1), progress=False)
    assert _params_equal(small, alone)


@pytest.mark.parametrize("make", [lambda: SGD(0.1), lambda: AdamW({"a": np.ones(2)})])
@pytest.mark.parametrize("lr", [-0.1, float("nan")])
def test_an_lr_set_on_the_optimiser_is_checked_when_fed(make, lr):
    optimizer = make()
    optimizer.lr = lr  # was fed as it was: a negative step size trained uphill
    with pytest.raises(cl.ParameterError, match=r": lr must be a real number >= 0"):
        optimizer.feed()
    assert optimizer.step_count == 0


def test_loss_and_grads_builds_the_gradient_graph_once_per_shape(monkeypatch):
    # it ran reverse mode again on every call (the cached executor then ignored the result)
    model = Llama(CONFIG, seed=0, dtype=np.float64)
    tokens = TOKENS[:16].reshape(2, 8)
    expected = model.loss_and_grads(tokens)
    calls = []
    loss_graph = model.loss_graph
    monkeypatch.setattr(model, "loss_graph", lambda *a: calls.append(a) or loss_graph(*a))
    loss, grads = model.loss_and_grads(tokens)
    assert calls == []
    assert loss == expected[0] and list(grads) == list(model.params)
    assert all(np.array_equal(grads[n], expected[1][n]) for n in grads)


def test_train_with_a_cosine_schedule_is_torchs_loop_on_the_same_batches():
    """train() against torch.optim.AdamW and SequentialLR(LinearLR, CosineAnnealingLR) stepped
    on the same windows and gradients (course_lib's), float64: losses, lrs and parameters."""
    torch = pytest.importorskip("torch")
    steps, batch, seq, warmup = 6, 3, 8, 2
    model = Llama(CONFIG, seed=3, dtype=np.float64, init_std=0.2)
    reference = copy.deepcopy(model)
    hyper = {"lr": 0.05, "betas": (0.8, 0.9), "eps": 1e-6, "weight_decay": 0.1}
    history = train(model, TOKENS, steps, batch=batch, seq=seq, optimizer=AdamW(model.params,
                    **hyper), lr_schedule=cosine_schedule(0.05, steps, warmup), seed=7,
                    progress=False)  # fmt: skip
    tensors = {n: torch.from_numpy(a) for n, a in reference.params.items()}  # shared memory
    optimizer = torch.optim.AdamW(list(tensors.values()), **hyper)
    schedule = torch.optim.lr_scheduler
    scheduler = schedule.SequentialLR(optimizer, [
        schedule.LinearLR(optimizer, 1 / warmup, 1.0, total_iters=warmup - 1),
        schedule.CosineAnnealingLR(optimizer, T_max=steps - warmup, eta_min=0.005),
    ], milestones=[warmup])  # fmt: skip
    rng, losses, lrs = np.random.default_rng(7), [], []
    for _ in range(steps):
        loss, grads = reference.loss_and_grads(random_windows(TOKENS, batch, seq, rng))
        for name, tensor in tensors.items():
            tensor.grad = torch.from_numpy(grads[name])
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
        losses.append(loss)
    np.testing.assert_allclose(history.losses, losses, rtol=1e-12)
    np.testing.assert_allclose(history.lrs, lrs, rtol=1e-12)
    for name in model.params:
        np.testing.assert_allclose(model.params[name], reference.params[name], rtol=1e-10,
                                   atol=1e-13, err_msg=name)  # fmt: skip
