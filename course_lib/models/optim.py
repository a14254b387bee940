"""Optimisers as graph update nodes: θ(t+1) = f(θ(t), ∇L) is part of the training graph.

An update node takes a parameter, its gradient node and the optimiser's state (fed as
variables) and writes the new value into the parameter's array in place, like TensorFlow's
``ApplyAdam`` on a variable; its value is the updated parameter. Update nodes are built
after every gradient node, so in the executor's (creation) order they run after the whole
backward pass has read the old parameters. The learning rate and the step count are fed
each step, so schedules need no new graph.
"""

from __future__ import annotations

import math

import numpy as np

from ..graph import Node, Op, apply, variable


class SGDUpdate(Op):
    """``θ ← θ − lr · (g + weight_decay · θ)`` in place; inputs (θ, g, lr)."""

    name = "sgd_update"

    def __init__(self, weight_decay: float = 0.0):
        super().__init__(weight_decay=float(weight_decay))
        self.weight_decay = float(weight_decay)

    def infer_shape(self, param, g, lr):
        return param

    def infer_dtype(self, param, g, lr):
        return param

    def compute(self, xp, param, g, lr):
        if self.weight_decay:
            param *= 1.0 - float(lr) * self.weight_decay
        param -= param.dtype.type(lr) * g
        return param

    def flops(self, out_shape, *in_shapes):
        return (4 if self.weight_decay else 2) * math.prod(out_shape)


class AdamWUpdate(Op):
    """Decoupled-weight-decay Adam (PyTorch's ``AdamW``), in place on (θ, m, v).

    Inputs (θ, g, m, v, lr, step); ``step`` counts from 1 for the bias corrections::

        m ← β₁m + (1−β₁)g;  v ← β₂v + (1−β₂)g²
        θ ← θ·(1 − lr·λ) − lr · (m / (1−β₁ᵗ)) / (sqrt(v / (1−β₂ᵗ)) + ε)
    """

    name = "adamw_update"

    def __init__(self, beta1: float, beta2: float, eps: float, weight_decay: float):
        super().__init__(beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay)
        self.beta1, self.beta2, self.eps, self.weight_decay = beta1, beta2, eps, weight_decay

    def infer_shape(self, param, g, m, v, lr, step):
        return param

    def infer_dtype(self, param, *dtypes):
        return param

    def compute(self, xp, param, g, m, v, lr, step):
        b1, b2, lr, t = self.beta1, self.beta2, float(lr), int(step)
        m *= b1
        m += (1.0 - b1) * g
        v *= b2
        v += (1.0 - b2) * (g * g)
        if self.weight_decay:
            param *= 1.0 - lr * self.weight_decay
        denom = xp.sqrt(v)
        denom *= 1.0 / math.sqrt(1.0 - b2**t)
        denom += self.eps
        update = m / denom
        update *= lr / (1.0 - b1**t)
        param -= update
        return param

    def flops(self, out_shape, *in_shapes):
        return 12 * math.prod(out_shape)


class Optimizer:
    """Builds update nodes for named parameters and feeds their state each step."""

    def __init__(self, lr: float):
        self.lr = float(lr)
        self.step_count = 0
        self.lr_var = variable("lr", (), np.float64)

    def update_nodes(self, params: dict[str, Node], grads: dict[str, Node]) -> list[Node]:
        """One update node per parameter (call after building every gradient node)."""
        raise NotImplementedError

    def feed(self, lr: float | None = None) -> dict:
        """Advance the step count; the state to feed this step (``lr`` overrides the base)."""
        self.step_count += 1
        return {self.lr_var: np.float64(self.lr if lr is None else lr)}


class SGD(Optimizer):
    """Plain gradient descent, optionally with (decoupled) weight decay."""

    def __init__(self, lr: float = 0.1, weight_decay: float = 0.0):
        super().__init__(lr)
        self.weight_decay = weight_decay

    def update_nodes(self, params, grads):
        op = SGDUpdate(self.weight_decay)
        return [apply(op, params[n], grads[n], self.lr_var, name=f"update({n})") for n in params]


class AdamW(Optimizer):
    """AdamW with PyTorch's defaults except a smaller β₂ (0.95) usual for language models.

    ``arrays`` maps each parameter name to its array; the moments m and v are zeros of the
    same shapes, fed (and updated in place) every step.
    """

    def __init__(self, arrays: dict[str, np.ndarray], lr: float = 1e-3, betas=(0.9, 0.95),
                 eps: float = 1e-8, weight_decay: float = 0.01):  # fmt: skip
        super().__init__(lr)
        self.betas, self.eps, self.weight_decay = tuple(betas), float(eps), float(weight_decay)
        self.m = {n: np.zeros_like(a) for n, a in arrays.items()}
        self.v = {n: np.zeros_like(a) for n, a in arrays.items()}
        self.step_var = variable("step", (), np.int64)
        self._state_vars = {
            n: (variable(f"m({n})", a.shape, a.dtype), variable(f"v({n})", a.shape, a.dtype))
            for n, a in arrays.items()
        }

    def update_nodes(self, params, grads):
        op = AdamWUpdate(*self.betas, self.eps, self.weight_decay)
        nodes = []
        for name, param in params.items():
            m, v = self._state_vars[name]
            inputs = (param, grads[name], m, v, self.lr_var, self.step_var)
            nodes.append(apply(op, *inputs, name=f"update({name})"))
        return nodes

    def feed(self, lr=None):
        feed = super().feed(lr)
        feed[self.step_var] = np.int64(self.step_count)
        for name, (m, v) in self._state_vars.items():
            feed[m], feed[v] = self.m[name], self.v[name]
        return feed


def cosine_schedule(base_lr: float, steps: int, warmup: int = 0, final_fraction: float = 0.1):
    """A function step -> lr: linear warm-up, then cosine decay to ``final_fraction · base_lr``."""

    def lr_at(step: int) -> float:
        if step < warmup:
            return base_lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return base_lr * (final_fraction + (1.0 - final_fraction) * cosine)

    return lr_at
