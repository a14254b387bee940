"""The ablation of notebook 08 (original Transformer -> LLaMA one switch at a time) and the
batch-order seed of ``train`` that its noise row relies on."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.models import ARCHITECTURE, AdamW, Llama, LlamaConfig, train
from course_lib.models.ablation import (
    CHANGES,
    Ablation,
    AblationRun,
    ablation,
    ablation_rows,
    variant,
)
from course_lib.models.train import TrainHistory

CONFIG = LlamaConfig(dim=16, n_layers=1, n_heads=4, n_kv_heads=4, ffn_dim=40, vocab_size=32,
                     max_seq_len=8)  # fmt: skip


def test_rows_change_one_switch_at_a_time_and_end_with_llama_twice():
    rows = ablation_rows(CONFIG, noise_seed=7)
    assert set(CHANGES) == set(ARCHITECTURE)
    assert [label for label, _, _ in rows] == [
        "original Transformer", "+ pre-norm", "+ RMSNorm", "+ SwiGLU", "+ RoPE = LLaMA",
        "LLaMA, seed 7",
    ]  # fmt: skip
    assert [seed for _, _, seed in rows] == [0, 0, 0, 0, 0, 7]
    configs = [config for _, config, _ in rows]
    assert configs[0].changes_from_llama == {f: c[1] for f, c in ARCHITECTURE.items()}
    for before, after, field in zip(configs, configs[1:], ARCHITECTURE):
        changed = set(before.changes_from_llama) - set(after.changes_from_llama)
        assert changed == {field}, field
    assert configs[4] == configs[5] == CONFIG  # LLaMA: the given config, its ffn_dim kept
    assert [c.ffn_dim for c in configs] == [64, 64, 64, 40, 40, 40]  # ReLU rows: 4·dim


def test_variant_keeps_every_other_field():
    relu = variant(CONFIG, {"mlp": "relu", "positions": "sinusoidal"})
    assert (relu.mlp, relu.positions, relu.ffn_dim) == ("relu", "sinusoidal", 4 * CONFIG.dim)
    assert (relu.dim, relu.n_heads, relu.norm, relu.vocab_size) == (16, 4, "rms", 32)
    assert variant(CONFIG, {}) == CONFIG
    with pytest.raises(cl.ParameterError, match="LlamaConfig.mlp"):
        variant(CONFIG, {"mlp": "gelu"})


@pytest.mark.parametrize("seed", [0, -1, 1.5, True])
def test_the_noise_row_needs_another_integer_seed(seed):
    with pytest.raises(cl.ParameterError, match="ablation: noise_seed"):
        ablation_rows(CONFIG, noise_seed=seed)


def test_train_seed_sets_the_batch_order_and_nothing_else():
    tokens = np.random.default_rng(3).integers(0, CONFIG.vocab_size, 500)
    held_out = np.random.default_rng(4).integers(0, CONFIG.vocab_size, 200)

    def run(seed):
        model = Llama(CONFIG, seed=0)  # the same initialisation every time
        return train(model, tokens, 4, batch=2, seq=8, seed=seed, progress=False,
                     optimizer=AdamW(model.params, lr=1e-2), validation=held_out,
                     eval_every=4)  # fmt: skip

    a, again, other = run(5), run(5), run(6)
    assert a.losses == again.losses and a.val_losses == again.val_losses
    assert a.losses[0] != other.losses[0]  # other windows from the first step on
    assert a.val_losses[0] == other.val_losses[0]  # the held-out windows do not move


def _history(held_out):
    history = TrainHistory(losses=[3.0] * 12, val_steps=[0, 12], val_losses=[5.5, held_out])
    return history


def _made_up(held_outs):
    labels = ["original", "a", "b", "c", "LLaMA", "LLaMA, seed 1"]
    runs = [AblationRun(label, int(label.endswith("1")), 100, _history(h))
            for label, h in zip(labels, held_outs)]  # fmt: skip
    return Ablation(runs, steps=12, batch=2, seq=8, lr=0.01)


def test_rows_beyond_the_noise_are_strictly_further_from_llama_than_the_seed_gap():
    table = _made_up([2.9, 2.7, 2.75, 2.85, 2.8, 2.85])  # LLaMA 2.8, noise 0.05
    assert table.noise == pytest.approx(0.05)
    assert table.beyond_noise() == ["original", "a"]  # 0.1 and 0.1; b is 0.05 away: a tie
    assert "0.050 nats" in table.summary() and "original, a (2 of 4)" in table.summary()
    text = repr(table)
    assert "minus LLaMA's" in text and "+0.000" in text and "-0.100" in text
    assert "after 12 steps of 2 windows of 8 tokens" in text


def test_a_diverged_row_or_noise_is_never_within_the_noise():
    assert _made_up([np.nan, 2.8, 2.8, 2.8, 2.8, 2.8]).beyond_noise() == ["original"]
    same = _made_up([2.8, 2.8, 2.8, 2.8, 2.8, 2.8])  # zero noise: no row differs either
    assert same.noise == 0 and same.beyond_noise() == [] and "none (0 of 4)" in same.summary()
    diverged = _made_up([2.8, 2.7, 2.8, 2.8, 2.8, np.inf])
    assert diverged.beyond_noise() == ["original", "a", "b", "c"]


def test_ablation_trains_every_row_the_same_way():
    tokens = np.random.default_rng(0).integers(0, CONFIG.vocab_size, 400)
    held_out = np.random.default_rng(1).integers(0, CONFIG.vocab_size, 100)
    result = ablation(CONFIG, tokens, held_out, steps=3, batch=2, seq=8, lr=1e-2)
    assert [r.seed for r in result.runs] == [0, 0, 0, 0, 0, 1]
    for run, (_, config, seed) in zip(result.runs, ablation_rows(CONFIG)):
        assert run.n_params == Llama(config, seed=seed).n_params
        assert len(run.history.losses) == 3 and run.history.val_steps == [0, 3]
        assert np.isfinite(run.held_out)
    first, second = result.runs[-2:]  # LLaMA twice: other weights, other batches
    assert first.history.val_losses[0] != second.history.val_losses[0]
    assert result.noise == abs(first.held_out - second.held_out) > 0
    with pytest.raises(cl.ShapeError, match="ablation: steps must be a positive integer"):
        ablation(CONFIG, tokens, held_out, steps=0)
