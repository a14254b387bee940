"""Optimisers as graph update nodes: θ(t+1) = f(θ(t), ∇L) is part of the training graph.

An update node takes a parameter, its gradient node and the optimiser's state (fed as
variables) and computes the *new* value out of place; it changes nothing it reads. Graphs
stay pure, so every optimisation pass may reorder or rebuild nodes without changing what a
step computes. After a run, :meth:`Optimizer.write_back` stores the new values into the
parameter arrays and the optimiser's state (as optax and JAX do), never a node during the
run. The learning rate and the step count are fed each step, so schedules need no new graph.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.lib.array_utils import byte_bounds

from .. import backend, params
from ..backend import on_host, to_numpy
from ..errors import DeviceError, FeedError, GraphError, ParameterError, ShapeError
from ..graph import Node, Op, apply, variable
from ..kernels import cpu_kernels
from ..kernels.dispatch import run_on_gpu


class SGDUpdate(Op):
    """``θ' = θ − lr · (g + weight_decay · θ)``, computed as ``θ·(1 − lr·weight_decay) − lr·g``
    (3 FLOPs per element, 2 without decay), out of place; inputs (θ, g, lr)."""

    name = "sgd_update"
    attributes = ("weight_decay",)

    def __init__(self, weight_decay: float = 0.0):
        super().__init__(weight_decay=float(weight_decay))

    def infer_shape(self, param, g, lr):
        return param

    def infer_dtype(self, param, g, lr):
        return param

    def compute(self, xp, param, g, lr):
        if self.weight_decay:
            param = param * _factor(1.0 - lr * self.weight_decay, param)
        return param - _factor(lr, param) * g

    def flops(self, out_shape, *in_shapes):
        return (3 if self.weight_decay else 2) * math.prod(out_shape)


class AdamMoment(Op):
    """An exponential moving average of the gradient (``power=1``: m) or of its square
    (``power=2``: v): ``m' = β·m + (1−β)·g^power``, out of place; inputs (m, g). One pass
    over memory on either device: ``adamw.cu`` on a GPU, ``kernels.cpu_kernels`` for large
    float32 host arrays (NumPy's bits)."""

    name = "adam_moment"
    attributes = ("beta", "power")

    def __init__(self, beta: float, power: int):
        super().__init__(beta=float(beta), power=int(power))

    def infer_shape(self, m, g):
        return m

    def infer_dtype(self, m, g):
        return m

    def gpu_kernel(self, launch, m, g):
        """``adamw.cu``: one pass instead of three (and no temporaries)."""
        return launch.adam_moment(m, g, self.beta, self.power)

    def compute(self, xp, m, g):
        out = run_on_gpu(self, xp, m, g)  # adamw.cu on a GPU
        if out is not None:
            return out
        if on_host(xp) and cpu_kernels.worth_it(m, g):  # one pass, NumPy's bits
            return cpu_kernels.adam_moment(m, g, self.beta, self.power)
        step = g * g if self.power == 2 else g
        return m * self.beta + (1.0 - self.beta) * step

    def flops(self, out_shape, *in_shapes):
        return (4 if self.power == 2 else 3) * math.prod(out_shape)


class AdamWUpdate(Op):
    """Decoupled-weight-decay Adam (PyTorch's ``AdamW``): the new θ from the new moments.

    Inputs (θ, m', v', lr, step); ``step`` counts from 1 for the bias corrections::

        θ' = θ·(1 − lr·λ) − lr · (m' / (1−β₁ᵗ)) / (sqrt(v' / (1−β₂ᵗ)) + ε)

    computed as ``(θ·decay) − (m' / (sqrt(v')·bias2 + ε))·step_size`` with the three factors
    rounded to the parameter's dtype; one pass on either device (``adamw.cu``,
    ``kernels.cpu_kernels`` for large float32 host arrays, NumPy's bits).
    """

    name = "adamw_update"
    attributes = ("beta1", "beta2", "eps", "weight_decay")
    kernel_scalar_inputs = 2  # lr (float64) and step (int64) go to the kernel as they are

    def __init__(self, beta1: float, beta2: float, eps: float, weight_decay: float):
        # eps a Python float: added to float32 it stays float32 (a np.float64 would not)
        super().__init__(beta1=beta1, beta2=beta2, eps=float(eps), weight_decay=weight_decay)

    def infer_shape(self, param, m, v, lr, step):
        return param

    def infer_dtype(self, param, *dtypes):
        return param

    def gpu_kernel(self, launch, param, m, v, lr, step):
        """``adamw.cu``: one pass instead of six. The kernel reads ``lr`` and ``step`` on the
        device, so the step is not checked there (the check below reads it on the host: on
        a GPU that is a synchronisation per parameter); ``AdamW.feed`` counts from 1."""
        return launch.adamw_update(param, m, v, lr, step, self.beta1, self.beta2, self.eps,
                                   self.weight_decay)  # fmt: skip

    def compute(self, xp, param, m, v, lr, step):
        out = run_on_gpu(self, xp, param, m, v, lr, step)  # adamw.cu on a GPU (float32)
        if out is not None:
            return out
        if int(step) < 1:  # one read of a number per parameter (on a GPU: a synchronisation)
            raise ParameterError(
                f"adamw_update: step counts from 1 (the bias corrections divide by "
                f"1 − β^step), got {int(step)}; feed optimizer.feed()"
            )
        b1, b2, t = self.beta1, self.beta2, step
        decay = _factor(1.0 - lr * self.weight_decay, param) if self.weight_decay else None
        bias2 = _factor(1.0 / xp.sqrt(1.0 - b2**t), param)
        step_size = _factor(lr / (1.0 - b1**t), param)
        if on_host(xp) and cpu_kernels.worth_it(param, m, v):  # one pass, NumPy's bits
            return cpu_kernels.adamw_update(param, m, v, decay=decay, bias2=bias2,
                                            eps=self.eps, step_size=step_size)  # fmt: skip
        if decay is not None:
            param = param * decay
        denom = xp.sqrt(v)
        denom *= bias2
        denom += self.eps
        update = m / denom
        update *= step_size
        return param - update

    def flops(self, out_shape, *in_shapes):
        return (7 if self.weight_decay else 6) * math.prod(out_shape)


def _floating(dtype, what: str) -> None:
    """Optimisers update floating-point parameters only: an integer one would round every
    step to nothing (``lr`` cast to 0) and train silently on."""
    if dtype is not None and np.dtype(dtype).kind != "f":
        raise GraphError(f"{what} is {np.dtype(dtype)}; optimisers update floating-point "
                         "parameters only (convert it with .astype(np.float32))")  # fmt: skip


def _distinct_targets(what: str, targets: Sequence[tuple[str, object]]) -> None:
    """Each update needs memory of its own: written twice, memory keeps only the last update
    (a weight tied by giving one array, or views of it, two names would take one of its two
    gradients)."""
    for owner, label in _overlaps(targets):
        raise ParameterError(
            f"{what}: {owner} and {label} share memory, so one update would overwrite the "
            "other; a tied weight is one parameter (one name, used twice in the graph)"
        )


def _overlaps(arrays: Sequence[tuple[str, object]]):
    """Pairs of labels whose arrays share bytes: the ranges sorted by start, each compared
    with the furthest-reaching one before it. Every array that overlaps another is in a
    pair (not every overlapping pair is listed)."""
    furthest, owner = None, None  # the end of the spans so far, and whose it is
    for start, end, label in sorted((*_byte_span(a), label) for label, a in arrays if a.size):
        if furthest is not None and start < furthest:
            yield owner, label
        if furthest is None or end > furthest:
            furthest, owner = end, label


def _byte_span(array) -> tuple[int, int]:
    """The bytes ``array``'s elements lie in: NumPy's bounds; a device array's (CuPy's, the
    strict device's) from the first element's address (``data.ptr``) and its strides, as
    NumPy computes them; else the object itself (an array type that says neither)."""
    if isinstance(array, np.ndarray):
        return byte_bounds(array)
    pointer = getattr(getattr(array, "data", None), "ptr", None)
    if pointer is None:
        return id(array), id(array) + 1
    low, high = pointer, pointer + array.itemsize
    for size, stride in zip(array.shape, array.strides):
        if stride < 0:
            low += (size - 1) * stride
        else:
            high += (size - 1) * stride
    return low, high


def _check_target(what: str, label: str, target, value) -> None:
    """An error naming ``label`` unless ``value`` can be written into ``target`` in place."""
    if not hasattr(target, "shape"):
        raise GraphError(f"{what}: {label} is a {type(target).__name__}, not an array")
    if isinstance(target, np.ndarray) and not target.flags.writeable:
        raise ParameterError(
            f"{what}: the array of {label} is read-only, so the step cannot be stored; "
            "nothing was written (give the model writable arrays: np.array(a) copies one)"
        )
    if tuple(getattr(value, "shape", ())) != tuple(target.shape):
        raise ShapeError(f"{what}: the new value of {label} has shape "
                         f"{tuple(getattr(value, 'shape', ()))}, its array "
                         f"{tuple(target.shape)}; nothing was written")  # fmt: skip


def _factor(scalar, like):
    """A scalar factor (a 0-d array computed in float64 from the fed lr and step) in the
    parameters' dtype, left on the device: reading it into a Python float would wait for
    the GPU once per parameter. The same float32 value a Python float would round to."""
    return scalar.astype(like.dtype)


class Optimizer:
    """Builds update nodes for named parameters, feeds their state each step and writes
    the new values back after the run."""

    def __init__(self, lr: float):
        self.lr = params.in_range(lr, f"{type(self).__name__}: lr", 0.0)
        self.step_count = 0
        self.lr_var = variable("lr", (), np.float64)
        self._names: list[str] = []

    def update_nodes(self, params: dict[str, Node], grads: dict[str, Node]) -> list[Node]:
        """The new value of every parameter (in ``params``' order), then of the optimiser's
        own state: pure nodes to run, whose results go to :meth:`write_back`."""
        missing = [name for name in params if name not in grads]
        if missing:
            raise FeedError(f"{type(self).__name__}.update_nodes: no gradient for parameter(s) "
                            f"{missing}")  # fmt: skip
        self._names = list(params)
        return [self._update(name, params[name], grads[name]) for name in params] + [
            node for name in params for node in self._state_updates(name)
        ]

    def _update(self, name: str, param: Node, grad: Node) -> Node:
        raise NotImplementedError

    def settings(self) -> tuple:
        """The hyper-parameters its update nodes are built with (all but ``lr``, which is
        fed): a compiled training step is built again when one of them changes."""
        return ()

    def writes_to(self, names) -> None:
        """Make :meth:`write_back` take the results of update nodes built for the parameters
        ``names`` (in order), as a compiled step run again after another model's returns."""
        self._names = list(names)

    def _state_updates(self, name: str) -> list[Node]:
        return []

    def feed(self, lr: float | None = None) -> dict:
        """Advance the step count; the state to feed this step (``lr`` overrides the base)."""
        lr = params.in_range(self.lr if lr is None else lr, f"{type(self).__name__}: lr", 0.0)
        self.step_count += 1
        return {self.lr_var: np.float64(lr)}

    def write_back(self, arrays: dict[str, np.ndarray], values: Sequence) -> None:
        """Store one run's results of :meth:`update_nodes` (same order): the new parameters
        into ``arrays`` (in place, so the model sees them), the new state into the optimiser.
        A target array on the host gets a host copy of its value (a device's result).

        The optimiser's own state is not copied where it need not be: a new value that is an
        array like the old one (type, dtype, shape, C-contiguous, writable) and shares no
        memory with any other value or target takes the old array's place, as an executor's
        fresh outputs do (a training step's moments are two thirds of what it would copy);
        any other value is copied into the old array. Every target gets its value as it was
        when ``write_back`` was called (values that share memory with targets or with each
        other, even swapped ones, are copied first).

        All or nothing: every target is checked (it exists, is writable and has its value's
        shape) before any is written, so a refused step leaves everything as it was."""
        what = f"{type(self).__name__}.write_back"
        state = self._state_in_order()
        if len(values) != len(self._names) + len(state):
            raise ShapeError(
                f"{what}: {len(values)} values for the update nodes of {len(self._names)} "
                "parameter(s); pass the results of exactly the nodes update_nodes returned, "
                "in order"
            )
        missing = [name for name in self._names if name not in arrays]
        if missing:
            raise FeedError(f"{what}: no array for parameter(s) {missing}")
        params = [(f"parameter {n}", arrays[n]) for n in self._names]
        targets = params + [(label, store[key]) for label, store, key in state]
        for (label, target), value in zip(targets, values):
            _check_target(what, label, target, value)
        _distinct_targets(what, targets)
        shared = _shared(targets, values)
        # a value that shares memory with a target (or another value) as it was at the call,
        # before a copy below writes into that memory
        values = [value.copy() if label in shared else value
                  for (label, _), value in zip(targets, values)]  # fmt: skip
        for (_, target), value in zip(params, values):
            _copy_into(target, value)
        for (label, store, key), value in zip(state, values[len(params):]):
            if label in shared or not _like(value, store[key]):
                _copy_into(store[key], value)
            else:
                store[key] = value

    def _state_in_order(self) -> list[tuple[str, dict, str]]:
        """(label, dict, key) of each array of the optimiser's state, in the order of its
        update nodes."""
        return []


def _copy_into(target, value) -> None:
    if isinstance(target, np.ndarray):
        cpu_kernels.assign(target, to_numpy(value))  # large copies split over threads
    else:
        target[...] = value


def _shared(targets: list[tuple[str, object]], values: Sequence) -> set[str]:
    """The labels of the values that share memory with another value or another target
    (a value that is its own target changes nothing and is left out)."""
    arrays = list(targets)
    arrays += [(label, v) for (label, t), v in zip(targets, values) if v is not t
               and hasattr(v, "size")]  # fmt: skip
    return {label for pair in _overlaps(arrays) for label in pair}


def _like(value, target) -> bool:
    """Can ``value`` take ``target``'s place: the same kind of array, dtype and shape, and
    C-contiguous and writable (as the executor's outputs are)?"""
    flags = getattr(value, "flags", None)
    return (
        type(value) is type(target)
        and flags is not None
        and value.dtype == target.dtype
        and value.shape == target.shape
        and flags.c_contiguous
        and getattr(flags, "writeable", True)
    )


class SGD(Optimizer):
    """Plain gradient descent, optionally with (decoupled) weight decay."""

    def __init__(self, lr: float = 0.1, weight_decay: float = 0.0):
        super().__init__(lr)
        self.weight_decay = params.in_range(weight_decay, "SGD: weight_decay", 0.0)

    def _update(self, name, param, grad):
        _floating(param.dtype, f"SGD: parameter {name}")
        return apply(SGDUpdate(self.weight_decay), param, grad, self.lr_var, name=f"update({name})")

    def settings(self):
        return (self.weight_decay,)


class AdamW(Optimizer):
    """AdamW with PyTorch's defaults except a smaller β₂ (0.95) usual for language models.

    ``arrays`` maps each parameter name to its array; the moments m and v are zeros of the
    same shapes, fed every step and replaced by their new values in :meth:`write_back`.
    Weight decay applies to every parameter given (norm weights and embeddings included, as
    ``torch.optim.AdamW(model.parameters())`` does).
    """

    def __init__(self, arrays: dict[str, np.ndarray], lr: float = 1e-3, betas=(0.9, 0.95),
                 eps: float = 1e-8, weight_decay: float = 0.01):  # fmt: skip
        super().__init__(lr)
        if not isinstance(arrays, Mapping):
            raise GraphError(f"AdamW: arrays must map each parameter name to its array "
                             f"(AdamW(model.params)), got {type(arrays).__name__}")  # fmt: skip
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise GraphError(f"AdamW: betas must be a pair (beta1, beta2), got {betas!r}")
        self.betas = tuple(params.in_range(b, f"AdamW: betas[{k}]", 0.0, 1.0, open_high=True)
                           for k, b in enumerate(betas))  # fmt: skip
        self.eps = params.in_range(eps, "AdamW: eps", 0.0)
        self.weight_decay = params.in_range(weight_decay, "AdamW: weight_decay", 0.0)
        xp = backend.xp()  # the moments live where the parameters do
        self.device = backend.get_device()
        arrays = {n: backend.to_device(a, f"AdamW: parameter {n}") for n, a in arrays.items()}
        for n, a in arrays.items():
            _floating(a.dtype, f"AdamW: parameter {n}")
        self.m = {n: xp.zeros_like(a) for n, a in arrays.items()}
        self.v = {n: xp.zeros_like(a) for n, a in arrays.items()}
        self.step_var = variable("step", (), np.int64)
        self._state_vars = {
            n: (variable(f"m({n})", a.shape, a.dtype), variable(f"v({n})", a.shape, a.dtype))
            for n, a in arrays.items()
        }
        self._new_moments: dict[str, tuple[Node, Node]] = {}

    def update_nodes(self, params, grads):
        missing = [name for name in params if name not in self._state_vars]
        if missing:
            raise FeedError(
                f"adamw_update: no moments for parameter(s) {missing}; give AdamW the arrays "
                "of every parameter the model trains (AdamW(model.params))"
            )
        extra = [name for name in self._state_vars if name not in params]
        if extra:  # their moments would be fed to a step that does not use them
            raise FeedError(f"adamw_update: moments for parameter(s) {extra[:3]} that this step "
                            "does not train; give AdamW the arrays of the parameters it trains "
                            "(AdamW(model.params))")  # fmt: skip
        return super().update_nodes(params, grads)

    def _update(self, name, param, grad):
        (b1, b2), (m, v) = self.betas, self._state_vars[name]
        if param.dtype is not None and param.dtype != m.dtype:
            raise GraphError(f"adamw_update: parameter {name} is {param.dtype}, but its moments "
                             f"are {m.dtype}; make the optimiser from this model's arrays "
                             "(AdamW(model.params))")  # fmt: skip
        new_m = apply(AdamMoment(b1, 1), m, grad, name=f"m'({name})")
        new_v = apply(AdamMoment(b2, 2), v, grad, name=f"v'({name})")
        self._new_moments[name] = (new_m, new_v)
        op = AdamWUpdate(b1, b2, self.eps, self.weight_decay)
        return apply(op, param, new_m, new_v, self.lr_var, self.step_var, name=f"update({name})")

    def _state_updates(self, name):
        return list(self._new_moments[name])

    def settings(self):
        return (*self.betas, self.eps, self.weight_decay)

    def _state_in_order(self):
        return [(f"{moment}({name})", state, name) for name in self._names
                for moment, state in (("m", self.m), ("v", self.v))]  # fmt: skip

    def feed(self, lr=None):
        current = backend.get_device()
        if current != self.device:
            raise DeviceError(
                f"AdamW: its moments are on the {self.device!r} device, but course_lib runs on "
                f"{current!r}; create the optimiser after model.to({current!r})"
            )
        feed = super().feed(lr)
        feed[self.step_var] = np.int64(self.step_count)
        for name, (m, v) in self._state_vars.items():
            feed[m], feed[v] = self.m[name], self.v[name]
        return feed


def cosine_schedule(base_lr: float, steps: int, warmup: int = 0, final_fraction: float = 0.1):
    """A function step -> lr: linear warm-up, then cosine decay to ``final_fraction · base_lr``
    (``final_fraction`` in [0, 1])."""
    base_lr = params.in_range(base_lr, "cosine_schedule: base_lr", 0.0)
    steps = params.count(steps, "cosine_schedule: steps", 0)
    warmup = params.count(warmup, "cosine_schedule: warmup", 0)
    final_fraction = params.in_range(final_fraction, "cosine_schedule: final_fraction", 0.0, 1.0)
    if warmup > steps:
        raise ParameterError(
            f"cosine_schedule: warmup={warmup} is longer than steps={steps}, so the learning "
            f"rate would never reach base_lr={base_lr}; use warmup <= steps"
        )

    def lr_at(step: int) -> float:
        if step < warmup:
            return base_lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return base_lr * (final_fraction + (1.0 - final_fraction) * cosine)

    return lr_at
