"""The training loop: one graph (forward + backward + update nodes) built once, run per step."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from ..runtime import Executor
from .corpus import random_windows
from .decoder import DecoderLM
from .optim import AdamW, Optimizer


@dataclass
class TrainHistory:
    """Per-step loss, learning rate and elapsed seconds (since the first step started)."""

    losses: list = field(default_factory=list)
    lrs: list = field(default_factory=list)
    seconds: list = field(default_factory=list)

    @property
    def steps(self) -> np.ndarray:
        return np.arange(1, len(self.losses) + 1)

    def smoothed(self, window: int = 10) -> np.ndarray:
        """The losses averaged over the last ``window`` steps (fewer at the start)."""
        losses = np.asarray(self.losses, dtype=np.float64)
        sums = np.cumsum(np.concatenate([[0.0], losses]))
        lo = np.maximum(0, np.arange(1, losses.size + 1) - window)
        return (sums[1:] - sums[lo]) / (np.arange(1, losses.size + 1) - lo)


def training_step(model: DecoderLM, optimizer: Optimizer, batch: int, seq: int) -> Executor:
    """The executor of one step (outputs: loss, then the update nodes), cached on the model."""

    def build():
        graph, grads = model.loss_graph(batch, seq)
        return [graph.loss, *optimizer.update_nodes(graph.params, grads)]

    return model.executor(("train", optimizer, batch, seq), build)  # the key keeps it alive


def train(
    model: DecoderLM,
    tokens: np.ndarray,
    steps: int,
    batch: int = 16,
    seq: int = 128,
    optimizer: Optimizer | None = None,
    lr_schedule: Callable[[int], float] | None = None,
    seed: int = 0,
    progress: bool = True,
) -> TrainHistory:
    """Train ``model`` on random windows of ``tokens`` (a 1-D id array) for ``steps`` steps.

    The optimiser defaults to :class:`AdamW` (lr 1e-3); ``lr_schedule(step)`` overrides the
    learning rate per step. Parameters are updated in place. Returns the loss history.
    """
    optimizer = AdamW(model.params) if optimizer is None else optimizer
    run = training_step(model, optimizer, batch, seq)
    graph = model.forward_graph(batch, seq)
    rng = np.random.default_rng(seed)
    history = TrainHistory()
    start = time.perf_counter()
    bar = tqdm(range(steps), desc="training", disable=not progress, mininterval=0.5)
    for step in bar:
        lr = optimizer.lr if lr_schedule is None else lr_schedule(step)
        feed = model.feed(graph, random_windows(tokens, batch, seq, rng))
        feed.update(optimizer.feed(lr))
        loss = float(run.run(feed)[0])
        history.losses.append(loss)
        history.lrs.append(lr)
        history.seconds.append(time.perf_counter() - start)
        bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
    return history
