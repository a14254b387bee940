"""An ablation: the original Transformer's block turned into LLaMA's one switch at a time.

Every row is trained the same way (model size, initialisation seed, batches, optimiser,
steps) and measured on the same held-out text; a last row trains LLaMA again with another
seed for both the initialisation and the batch order, so that the table carries its own
measure of run-to-run noise.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass

import numpy as np

from .. import params
from ..errors import GraphError, ParameterError
from ..tables import ShownAsTable, Table
from .config import ARCHITECTURE, LlamaConfig
from .llama import Llama
from .optim import AdamW, cosine_schedule
from .train import TrainHistory, train

#: The row label of each switch of :data:`ARCHITECTURE` set to LLaMA's choice.
CHANGES = {"norm_position": "pre-norm", "norm": "RMSNorm", "mlp": "SwiGLU", "positions": "RoPE"}


def variant(config: LlamaConfig, switches: dict) -> LlamaConfig:
    """``config`` with the architecture ``switches`` (fields of :data:`ARCHITECTURE`); a ReLU
    MLP gets an inner size of 4·dim, about the parameters of a SwiGLU MLP of (8/3)·dim (three
    matrices, not two)."""
    if not isinstance(config, LlamaConfig):
        raise GraphError(f"ablation: config must be a LlamaConfig, got {type(config).__name__}")
    others = sorted(set(switches) - set(ARCHITECTURE))
    if others:
        raise ParameterError(f"ablation: {others} are not switches; the switches are "
                             f"{', '.join(ARCHITECTURE)}")  # fmt: skip
    config = dataclasses.replace(config, **switches)
    return dataclasses.replace(config, ffn_dim=4 * config.dim) if config.mlp == "relu" else config


def ablation_rows(config: LlamaConfig, noise_seed: int = 1) -> list[tuple[str, LlamaConfig, int]]:
    """The rows (label, config, seed): the original Transformer's choices (seed 0), then one
    switch of :data:`ARCHITECTURE` after another set to LLaMA's (each row keeping the changes
    above it, the last one LLaMA), then LLaMA again with ``noise_seed``."""
    is_integer = isinstance(noise_seed, numbers.Integral) and not isinstance(noise_seed, bool)
    if not is_integer or noise_seed < 1:
        raise ParameterError(
            f"ablation: noise_seed must be a positive integer (the other rows use seed 0), "
            f"got {noise_seed}"
        )
    switches = {field: choices[1] for field, choices in ARCHITECTURE.items()}
    rows = [("original Transformer", variant(config, switches), 0)]
    for field, choices in ARCHITECTURE.items():
        switches[field] = choices[0]
        rows.append((f"+ {CHANGES[field]}", variant(config, switches), 0))
    label, llama, _ = rows.pop()
    return [*rows, (f"{label} = LLaMA", llama, 0), (f"LLaMA, seed {noise_seed}", llama, noise_seed)]


@dataclass
class AblationRun:
    """One trained row: its label, seed (initialisation and batch order), parameter count and
    training history (with the held-out loss after the last step)."""

    label: str
    seed: int
    n_params: int
    history: TrainHistory

    @property
    def held_out(self) -> float:
        return self.history.val_losses[-1]


@dataclass(repr=False)
class Ablation(ShownAsTable):
    """The trained rows of :func:`ablation`: the variants, LLaMA last among them, then LLaMA
    with another seed. Prints as a table; :meth:`summary` compares every row's distance
    from LLaMA with the distance between the two LLaMA runs."""

    runs: list
    steps: int
    batch: int
    seq: int
    lr: float

    @property
    def noise(self) -> float:
        """The held-out gap between the two LLaMA runs (one draw of run-to-run noise)."""
        return abs(self.runs[-1].held_out - self.runs[-2].held_out)

    def beyond_noise(self) -> list[str]:
        """The variants whose held-out loss differs from LLaMA's by more than :attr:`noise`
        (all of them if a loss is NaN or infinite: a diverged run is never within the noise,
        nor does a diverged LLaMA run measure it)."""
        llama, noise = self.runs[-2].held_out, self.noise
        return [r.label for r in self.runs[:-2] if not abs(r.held_out - llama) <= noise < np.inf]

    def summary(self) -> str:
        beyond = self.beyond_noise()
        return (
            f"the two LLaMA runs (other initialisation, other batches) differ by "
            f"{self.noise:.3f} nats on held-out text; rows further than that from LLaMA: "
            f"{', '.join(beyond) if beyond else 'none'} ({len(beyond)} of {len(self.runs) - 2})"
        )

    def table(self) -> Table:
        llama = self.runs[-2].held_out
        rows = [
            [r.label, f"{r.n_params:,}", f"{r.history.smoothed(10)[-1]:.3f}",
             f"{r.held_out:.3f}", f"{r.held_out - llama:+.3f}"]
            for r in self.runs
        ]  # fmt: skip
        title = (
            f"after {self.steps} steps of {self.batch} windows of {self.seq} tokens (AdamW, "
            f"lr {self.lr:g}, cosine); training loss: mean of the last 10 steps"
        )
        headers = ["model", "parameters", "training loss", "held-out loss", "minus LLaMA's"]
        return Table(headers, rows, title)


def ablation(
    config: LlamaConfig,
    tokens: np.ndarray,
    held_out: np.ndarray,
    steps: int,
    batch: int = 8,
    seq: int = 32,
    lr: float = 1e-2,
    noise_seed: int = 1,
) -> Ablation:
    """Train every row of :func:`ablation_rows` on ``tokens`` the same way — AdamW at ``lr``
    with a cosine schedule (warm-up: a tenth of the ``steps``), ``batch`` windows of ``seq``
    tokens drawn in the order of the row's seed — and measure each on ``held_out`` tokens
    before the first step and after the last. Returns the :class:`Ablation`."""
    params.positive_size(steps, "ablation: steps")
    runs = []
    for label, row, seed in ablation_rows(config, noise_seed):
        model = Llama(row, seed=seed)
        history = train(
            model, tokens, steps, batch=batch, seq=seq, seed=seed, progress=False,
            optimizer=AdamW(model.params, lr=lr),
            lr_schedule=cosine_schedule(lr, steps, warmup=steps // 10),
            validation=held_out, eval_every=steps,
        )  # fmt: skip
        runs.append(AblationRun(label, seed, model.n_params, history))
    return Ablation(runs, steps, batch, seq, lr)
