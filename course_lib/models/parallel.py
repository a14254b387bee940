"""Training memory and communication per GPU when a LLaMA-style model's step is split over GPUs.

The bytes per device come from :func:`~course_lib.models.memory.training_memory` (AdamW, ZeRO's
16 bytes per parameter in bf16) and :func:`~course_lib.models.memory.activation_elements`:

* ``"data"`` parallelism: every device holds the whole model, its gradients and optimizer
  states and runs ``batch / devices`` of the sequences; a ring all-reduce then sums the
  gradients, each device sending ``2 (n - 1) / n`` of the gradient bytes.
* ``"tensor"`` parallelism (Megatron-LM, Shoeybi et al., 2019): each block's attention heads
  (the columns of W_Q, W_K, W_V, the rows of W_O) and the SwiGLU's hidden units (the columns of
  W_gate, W_up, the rows of W_down) are split over the devices, with their gradients,
  optimizer states and the activations between the two halves (Q, K, V, P, the attention
  output, the MLP's four tensors). Replicated: the RMSNorm weights, the embedding and the LM
  head (Megatron also splits those two over the vocabulary; here they stay whole), the block
  inputs, the norms' outputs and the logits. Each block all-reduces a b·s·h activation twice
  in the forward pass (after W_O and W_down) and twice in the backward pass (the gradients of
  the block's two inputs); full recomputation reruns the forward pass and its two.
* ``"zero-1"``, ``"zero-2"``, ``"zero-3"`` (Rajbhandari et al., 2020): data parallelism with
  the optimizer states, then also the gradients, then also the weights split in ``n`` shards.
  ZeRO-1 and 2 reduce-scatter the gradients and all-gather the updated weights (the same bytes
  as an all-reduce); ZeRO-3 all-gathers the weights in the forward and again in the backward
  pass, 1.5 times the bytes.

Communication is counted as the bytes each device sends in one step over a ring: an all-reduce
sends ``2 (n - 1) / n`` of the buffer, a reduce-scatter or an all-gather ``(n - 1) / n``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import params
from ..errors import ParameterError
from ..tables import Table
from .config import (
    LlamaConfig,
    number_bytes,
    one_of,
    positive_size,
    recompute_choice,
    require_config,
)
from .memory import (
    TrainingMemory,
    activation_elements,
    param_count,
    parameter_breakdown,
    training_memory,
)

STRATEGIES = ("data", "tensor", "zero-1", "zero-2", "zero-3")

#: ZeRO's stage of each data-parallel strategy: from 1 the optimizer states are sharded,
#: from 2 the gradients, at 3 the weights.
_ZERO_STAGE = {"data": 0, "zero-1": 1, "zero-2": 2, "zero-3": 3}

#: Parameters and activations that tensor parallelism splits (keys of parameter_breakdown and
#: activation_elements); the others are replicated on every device.
TENSOR_SPLIT_PARAMETERS = ("attention (W_Q, W_K, W_V, W_O)", "MLP (W_gate, W_up, W_down)")
TENSOR_SPLIT_ACTIVATIONS = ("Q, K, V", "attention probabilities P", "attention outputs",
                            "MLP (gate, up, Swish, product)")
_FINAL = "final RMSNorm, logits, softmax"


@dataclass(frozen=True, repr=False)  # repr: the table
class ParallelMemory(TrainingMemory):
    """Bytes one device holds for a training step, and the bytes it sends during the step."""

    communication: float

    def table(self) -> Table:
        rows = [[name, f"{n / 2**30:,.2f}"] for name, n in self.parts().items()]
        rows.append(["total held", f"{self.total / 2**30:,.2f}"])
        rows.append(["sent per step", f"{self.communication / 2**30:,.2f}"])
        return Table(["per device", "GiB"], rows, self.title)


def ring_all_reduce_bytes(buffer_bytes: int, devices: int) -> float:
    """Bytes each of ``devices`` sends to all-reduce a buffer over a ring: a reduce-scatter and
    an all-gather, each passing ``n - 1`` of the buffer's ``n`` chunks."""
    buffer_bytes = params.real(buffer_bytes, "ring_all_reduce_bytes: buffer_bytes", minimum=0.0)
    devices = positive_size(devices, "devices", "ring_all_reduce_bytes")
    return 2 * (devices - 1) / devices * buffer_bytes


def parallel_memory(
    config: LlamaConfig,
    batch: int,
    seq: int,
    devices: int,
    strategy: str,
    dtype_bytes: int = 2,
    recompute: str = "none",
) -> ParallelMemory:
    """Per-device bytes of a training step with AdamW (``batch`` sequences of ``seq`` tokens in
    all) split over ``devices`` by ``strategy``, and the bytes each device sends (see the module
    docstring for what each strategy splits).

    Examples
    --------
    >>> tp = parallel_memory(LlamaConfig.llama2_7b(), 8, 4096, 8, "tensor")
    >>> tp.weights, round(tp.communication / 2**30, 1)
    (2143821824, 56.0)
    """
    c = require_config(config, "parallel_memory")
    batch = positive_size(batch, "batch", "parallel_memory")
    seq = positive_size(seq, "seq", "parallel_memory")
    n = positive_size(devices, "devices", "parallel_memory")
    one_of(strategy, STRATEGIES, "parallel_memory: strategy")
    dtype_bytes = number_bytes(dtype_bytes, "dtype_bytes", "parallel_memory")
    recompute_choice(recompute, "parallel_memory")
    title = f"{strategy} parallelism over {n} devices, b={batch} in all, s={seq}"
    title += f", {recompute} recomputation" * (recompute != "none")
    if strategy == "tensor":
        return _tensor_parallel(c, batch, seq, n, dtype_bytes, recompute, title)
    if batch % n:
        raise ParameterError(f"parallel_memory: {n} devices cannot share a batch of {batch}")
    local = training_memory(c, batch // n, seq, dtype_bytes, "adamw", recompute)
    stage, params = _ZERO_STAGE[strategy], param_count(c)

    def held(part: int, sharded_from: int) -> int:
        return -(-params // n) * (part // params) if stage >= sharded_from else part

    if stage == 0:
        sent = ring_all_reduce_bytes(local.gradients, n)
    else:  # reduce-scatter the gradients, all-gather the weights (twice at stage 3)
        sent = (n - 1) / n * (local.gradients + local.weights * (2 if stage == 3 else 1))
    return ParallelMemory(weights=held(local.weights, 3), gradients=held(local.gradients, 2),
                          optimizer=held(local.optimizer, 1), activations=local.activations,
                          title=title, communication=sent)


def _tensor_parallel(c, batch, seq, n, dtype_bytes, recompute, title) -> ParallelMemory:
    for field in ("n_heads", "n_kv_heads", "ffn_dim"):
        if getattr(c, field) % n:
            raise ParameterError(
                f"parallel_memory: tensor parallelism over {n} devices splits {field}="
                f"{getattr(c, field)} evenly; it must be a multiple of {n}"
            )
    whole = training_memory(c, batch, seq, dtype_bytes, "adamw", recompute)
    params = param_count(c)
    split = sum(parameter_breakdown(c)[k] for k in TENSOR_SPLIT_PARAMETERS)
    held_params = params - split + split // n

    kept = activation_elements(c, batch, seq, "none" if recompute == "full" else recompute)
    per_device = {k: v // n if k in TENSOR_SPLIT_ACTIVATIONS else v for k, v in kept.items()}
    elements = sum(per_device.values())
    if recompute == "full":  # every block's input, one block's activations, the final ones
        one_block = (elements - per_device[_FINAL]) // c.n_layers
        elements = c.n_layers * batch * seq * c.dim + one_block + per_device[_FINAL]
    all_reduces = c.n_layers * (6 if recompute == "full" else 4)
    sent = all_reduces * ring_all_reduce_bytes(batch * seq * c.dim * dtype_bytes, n)
    return ParallelMemory(
        weights=whole.weights // params * held_params,
        gradients=whole.gradients // params * held_params,
        optimizer=whole.optimizer // params * held_params,
        activations=elements * dtype_bytes, title=title, communication=sent,
    )
