"""The training loop: one graph (forward + backward + update nodes) built once, run per step."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .. import params
from ..errors import ShapeError
from ..passes import accumulate_products
from ..perf import median_seconds
from ..runtime import Executor
from .corpus import host_tokens, random_windows
from .decoder import DecoderLM
from .optim import AdamW, Optimizer


@dataclass
class TrainHistory:
    """Per-step loss, learning rate and elapsed seconds (since the first step started), and
    the loss on held-out text after the steps in ``val_steps`` (0: before the first)."""

    losses: list = field(default_factory=list)
    lrs: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    val_steps: list = field(default_factory=list)
    val_losses: list = field(default_factory=list)

    @property
    def steps(self) -> np.ndarray:
        return np.arange(1, len(self.losses) + 1)

    def smoothed(self, window: int = 10) -> np.ndarray:
        """The losses averaged over the last ``window`` steps (fewer at the start)."""
        window = params.positive_size(window, "TrainHistory.smoothed: window")
        losses = np.asarray(self.losses, dtype=np.float64)
        sums = np.cumsum(np.concatenate([[0.0], losses]))
        lo = np.maximum(0, np.arange(1, losses.size + 1) - window)
        return (sums[1:] - sums[lo]) / (np.arange(1, losses.size + 1) - lo)


def training_step(
    model: DecoderLM, optimizer: Optimizer, batch: int, seq: int, optimize: bool = False
) -> Executor:
    """The executor of one step (outputs: loss, then the optimiser's update nodes, whose
    results go to ``optimizer.write_back``), cached on the model as long as the optimiser
    lives (built again when its ``settings()`` change); ``optimize`` runs the graph
    optimisation passes on it first. Either way the sums with matrix products among their
    terms (the backward pass's, the forward residual adds) become ``matmul_sum`` nodes
    (:func:`~course_lib.passes.accumulate_products`, run on the graph as built: on the host,
    BLAS adds each product after the first term into the sum)."""

    def build():
        graph, grads = model.loss_graph(batch, seq)
        return accumulate_products([graph.loss, *optimizer.update_nodes(graph.params, grads)])

    key = ("train", batch, seq, *optimizer.settings())  # a changed weight decay: a new step
    run = model.executor(key, build, optimize, owner=optimizer)
    optimizer.writes_to(model.forward_graph(batch, seq).params)  # after another model's step
    return run


class ProgressBar:
    """tqdm.auto over ``range(total)``, and a finished bar in a saved notebook.

    In Jupyter the widget is shown with a display id and shown again by :meth:`close`, so the
    text a saved notebook keeps (what GitHub or nbconvert show) is the finished bar with its
    rate and last loss, not the ``0/total`` of the moment it appeared.
    """

    def __init__(self, total: int, desc: str, enabled: bool = True):
        # imported here: tqdm.notebook loads ipywidgets, which a FLOP calculator never needs
        from tqdm.auto import tqdm  # noqa: PLC0415
        from tqdm.notebook import tqdm as notebook_tqdm  # noqa: PLC0415

        in_notebook = enabled and issubclass(tqdm, notebook_tqdm)
        extra = {"display": False} if in_notebook else {}
        self.bar = tqdm(range(total), desc=desc, disable=not enabled, mininterval=0.5, **extra)
        self._handle = None
        if in_notebook:
            from IPython.display import display  # noqa: PLC0415 (only inside Jupyter)

            self._handle = display(self.bar.container, display_id=True)

    def __iter__(self):
        return iter(self.bar)

    def show(self, **values) -> None:
        """Values shown after the bar (``loss=...``), drawn at its next refresh."""
        self.bar.set_postfix(refresh=False, **values)

    def close(self) -> None:
        self.bar.close()
        if self._handle is not None:
            self._handle.update(self.bar.container)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()  # a failed or interrupted run's bar stops where it was


def _step_feed(model, optimizer, tokens, batch, seq, rng, lr) -> dict:
    """The feed of one step: random windows of ``tokens``, the parameters, the optimiser's
    state (which advances its step count)."""
    feed = model.feed(model.forward_graph(batch, seq), random_windows(tokens, batch, seq, rng))
    feed.update(optimizer.feed(lr))
    return feed


def seconds_per_step(
    model: DecoderLM,
    tokens: np.ndarray,
    batch: int = 16,
    seq: int = 128,
    optimizer: Optimizer | None = None,
    repeats: int = 3,
    optimize: bool = False,
) -> float:
    """The median wall time of one training step of :func:`train` with these arguments, to
    say how long a training run will take before it starts.

    The step is compiled and run ``repeats`` times without writing its results back: the
    graph is pure, so the model and the optimiser (its step count restored) are exactly as
    before. The compiled step is kept for a later :func:`train` with the same
    ``optimizer``; without one, a fresh :class:`AdamW` is timed and forgotten with it.
    """
    optimizer = AdamW(model.params) if optimizer is None else optimizer
    run = training_step(model, optimizer, batch, seq, optimize)
    rng = np.random.default_rng(0)
    step_count = optimizer.step_count
    try:
        feed = _step_feed(model, optimizer, tokens, batch, seq, rng, optimizer.lr)
        return median_seconds(lambda: run.run(feed), repeats, warmup=0)  # waits for a GPU
    finally:
        optimizer.step_count = step_count


def _step(run, model, optimizer, make_feed) -> float:
    """One training step: its feed (which advances the optimiser's step count), the run, the
    new values written into the parameters and the optimiser's state; returns the loss. A
    failed or interrupted step (KeyboardInterrupt too) did not happen: the count goes back."""
    step_count = optimizer.step_count
    try:
        loss, *new_values = run.run(make_feed())
        optimizer.write_back(model.params, new_values)  # the graph is pure: changes here
    except BaseException:
        optimizer.step_count = step_count
        raise
    return float(loss)


def _text(tokens, seq: int, caller: str, name: str) -> np.ndarray:
    """``tokens`` on the host if they are a 1-D array of at least ``seq`` ids (one window),
    else a ShapeError naming ``caller`` and the argument ``name``."""
    what = f"{caller}: {name}"
    tokens = host_tokens(tokens, what)
    if tokens.ndim != 1 or tokens.size < params.positive_size(seq, f"{caller}: seq"):
        raise ShapeError(f"{what}: need a 1-D token array of at least seq={seq} tokens (one "
                         f"window), got shape {tokens.shape}")  # fmt: skip
    return tokens


def held_out_loss(
    model: DecoderLM, tokens: np.ndarray, batch: int, seq: int, batches: int = 4, seed: int = 0
) -> Callable[[], float]:
    """A function giving the model's mean loss on ``batches`` fixed batches of windows of
    ``tokens`` (drawn once, so successive calls compare the same text)."""
    batches = params.positive_size(batches, "held_out_loss: batches")
    rng = np.random.default_rng(params.count(seed, "held_out_loss: seed", 0))
    tokens = _text(tokens, seq, "held_out_loss", "tokens")
    windows = [random_windows(tokens, batch, seq, rng) for _ in range(batches)]
    return lambda: float(np.mean([model.loss(w) for w in windows]))


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
    optimize: bool = False,
    validation: np.ndarray | None = None,
    eval_every: int = 50,
) -> TrainHistory:
    """Train ``model`` on random windows of ``tokens`` (a 1-D id array) for ``steps`` steps.

    The optimiser defaults to :class:`AdamW` (lr 1e-3); ``lr_schedule(step)`` overrides the
    learning rate per step; ``seed`` fixes which windows each step reads (two runs with
    different seeds read the text in a different order). After each step the new parameters
    are written into ``model.params`` in place. ``optimize`` compiles the step
    after the graph optimisation passes (same values). With ``validation`` tokens (text the
    steps never see), the loss on 4 fixed batches of it is recorded before the first step,
    every ``eval_every`` steps and after the last (:func:`held_out_loss`). Returns the
    history.
    """
    steps = params.count(steps, "train: steps", 0)
    seed = params.count(seed, "train: seed", 0)
    tokens = _text(tokens, seq, "train", "tokens")
    if validation is not None:
        validation = _text(validation, seq, "train", "validation")
    optimizer = AdamW(model.params) if optimizer is None else optimizer
    run = training_step(model, optimizer, batch, seq, optimize)
    rng = np.random.default_rng(seed)
    history = TrainHistory()
    evaluate = None if validation is None else held_out_loss(model, validation, batch, seq)
    if evaluate is not None:
        params.positive_size(eval_every, "train: eval_every")
        history.val_steps.append(0)
        history.val_losses.append(evaluate())
    start = time.perf_counter()
    with ProgressBar(steps, "training", progress) as bar:
        for step in bar:
            lr = optimizer.lr if lr_schedule is None else lr_schedule(step)
            feed = functools.partial(_step_feed, model, optimizer, tokens, batch, seq, rng, lr)
            loss = _step(run, model, optimizer, feed)
            history.losses.append(loss)
            history.lrs.append(lr)
            history.seconds.append(time.perf_counter() - start)
            if evaluate is not None and (step + 1 == steps or (step + 1) % eval_every == 0):
                history.val_steps.append(step + 1)
                history.val_losses.append(evaluate())
            bar.show(loss=f"{loss:.3f}")
    return history
