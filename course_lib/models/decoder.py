"""What every decoder-only language model here shares: parameters as arrays, one graph per
(batch, seq) shape built once and run many times, logits, loss and gradients.

A subclass says which parameters it has (:meth:`DecoderLM.parameter_specs`) and how its
forward graph is wired (:meth:`DecoderLM.build_logits`); the rest is here.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .. import backend, params
from ..autodiff import grad
from ..backend import to_numpy
from ..errors import DeviceError, FeedError, GraphError, ParameterError, ShapeError
from ..graph import Node, variable
from ..ops import cross_entropy, reshape
from ..runtime import Executor
from .config import LlamaConfig


@dataclass(frozen=True)
class ForwardGraph:
    """The nodes of one model for one (batch, seq) shape.

    Attributes
    ----------
    tokens : Node
        The int64 variable (batch, seq) of token ids.
    logits : Node
        (batch, seq, vocab): position t predicts token t + 1.
    loss : Node or None
        The mean next-token cross-entropy over batch · (seq − 1) positions; ``None`` when
        seq is 1 (no position has a next token to predict).
    params : dict
        Parameter name -> its variable (Hugging Face names for LLaMA).
    attention : list of Node
        Each layer's attention probabilities (batch, heads, seq, seq).
    """

    tokens: Node
    logits: Node
    loss: Node | None
    params: dict
    attention: list = field(default_factory=list)

    @property
    def batch(self) -> int:
        return self.tokens.shape[0]

    @property
    def seq(self) -> int:
        return self.tokens.shape[1]


def spec_numbers(specs: dict) -> int:
    """How many numbers parameter specs (name -> (shape, kind)) ask for."""
    return sum(math.prod(shape) for shape, _ in specs.values())


class DecoderLM:
    """Base class: seeded parameters (``params``: name -> array) and cached executors.

    The parameters live on the device current at construction (``device``);
    :meth:`to` moves them (and nothing else: make the optimiser after moving the model).
    A copy or a pickle of a model holds its parameters, not its compiled graphs.

    Parameters
    ----------
    config : LlamaConfig
        The sizes, and the architecture switches a subclass may read.
    seed : int
        Seeds the initialisation (``numpy.random.default_rng(seed)``), an integer >= 0.
    dtype : numpy dtype
        A floating-point dtype: float32 for training, float64 for gradient checks.
    init_std : float
        Standard deviation (finite, >= 0) of the normal initialisation of matrices (HF's
        ``initializer_range``); norm weights start at 1, biases at 0.

    A config of more than :attr:`max_params` parameters is refused before anything is
    allocated.
    """

    #: The most parameters a model may have: 2**27, about 134 million (512 MiB in float32).
    #: A real LLM's config (``LlamaConfig.llama2_7b()``) is refused at once instead of filling
    #: the memory; the calculators (``param_count``, ``training_memory``) size such a config
    #: without building it. A class attribute: raise it for a bigger model that fits.
    max_params = 2**27

    def __init__(self, config: LlamaConfig, seed: int = 0, dtype=np.float32, init_std=0.02):
        what = type(self).__name__
        if not isinstance(config, LlamaConfig):
            raise GraphError(f"{what} needs a LlamaConfig, got {type(config).__name__}")
        self.config = config
        self.dtype = params.dtype(dtype, f"{what}: dtype")
        if self.dtype.kind != "f":
            raise GraphError(f"{what}: dtype must be a floating-point dtype (float32, float64), "
                             f"got {self.dtype}")  # fmt: skip
        init_std = params.in_range(init_std, f"{what}: init_std", 0.0)
        rng = np.random.default_rng(params.count(seed, f"{what}: seed", 0))
        numbers = self.parameter_numbers()
        if numbers > self.max_params:
            raise ParameterError(
                f"{what}: the config has {numbers:,} parameters "
                f"({numbers * self.dtype.itemsize / 2**30:.3g} GiB of {self.dtype}), more than "
                f"{what}.max_params = {self.max_params:,}; size a big config with param_count "
                f"or training_memory instead (or raise {what}.max_params for a model that fits)"
            )
        self.device = backend.get_device()
        self.params: dict = {}  # name -> array on self.device
        for name, (shape, kind) in self.parameter_specs().items():
            if kind == "normal":
                value = rng.standard_normal(shape) * init_std
            else:
                value = np.full(shape, 1.0 if kind == "ones" else 0.0)
            value = np.ascontiguousarray(value, dtype=self.dtype)  # drawn on the host: seeded
            self.params[name] = backend.to_device(value, f"parameter {name}")
        self._forget_compiled()

    def _forget_compiled(self) -> None:
        """Start with no graphs and no executors (each is built again on first use)."""
        self._graphs: dict[tuple, ForwardGraph] = {}
        self._executors: dict[tuple, Executor] = {}
        # executors of an owner (a training step's optimiser), forgotten with it
        self._owned: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __getstate__(self) -> dict:
        """What ``copy.deepcopy`` and ``pickle`` keep: the parameters and settings, not the
        compiled graphs (built again on first use)."""
        state = self.__dict__.copy()
        for compiled in ("_graphs", "_executors", "_owned"):
            state.pop(compiled, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._forget_compiled()

    # -- what a subclass defines -----------------------------------------------------------
    def parameter_specs(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Name -> (shape, "normal" | "ones" | "zeros"), in a fixed order."""
        raise NotImplementedError

    def parameter_numbers(self) -> int:
        """How many numbers :meth:`parameter_specs` asks for (checked against
        :attr:`max_params` before any is allocated)."""
        return spec_numbers(self.parameter_specs())

    def build_logits(self, tokens: Node, p: dict[str, Node]) -> tuple[Node, list[Node]]:
        """Wire the graph: logits (batch, seq, vocab) and each layer's attention probabilities."""
        raise NotImplementedError

    def to(self, device: str):
        """Move the parameters to ``device`` (``"cpu"``, ``"gpu"`` or ``"strict"``) and make it
        the current device; returns the model. An optimiser made before keeps its state where
        it was: make it after moving the model."""
        backend.set_device(device)
        self.params = {name: backend.to_device(to_numpy(a), f"parameter {name}")
                       for name, a in self.params.items()}  # fmt: skip
        self.device = backend.get_device()
        return self

    # -- graphs ----------------------------------------------------------------------------
    @property
    def n_params(self) -> int:
        """The number of trainable numbers."""
        return sum(int(a.size) for a in self.params.values())

    def forward_graph(self, batch: int, seq: int) -> ForwardGraph:
        """The graph for token batches of shape (batch, seq), built on first use and cached.

        Logits need seq >= 1; the loss (``None`` for seq = 1) needs seq >= 2.
        """
        what = f"{type(self).__name__}.forward_graph"
        key = (params.integer(batch, f"{what}: batch"), params.integer(seq, f"{what}: seq"))
        if key not in self._graphs:
            if key[0] < 1 or not 1 <= key[1] <= self.config.max_seq_len:
                raise self.shape_error(batch, seq)
            tokens = variable("tokens", key, np.int64)
            # the config's shapes, not those of ``params`` now: a wrong array is named when fed
            p = {name: variable(name, shape, self.dtype)
                 for name, (shape, _) in self.parameter_specs().items()}  # fmt: skip
            logits, attention = self.build_logits(tokens, p)
            loss = cross_entropy(logits[:, :-1], tokens[:, 1:]) if key[1] >= 2 else None
            self._graphs[key] = ForwardGraph(tokens, logits, loss, p, attention)
        return self._graphs[key]

    def shape_error(self, batch: int, seq: int) -> ShapeError:
        """The error for a token batch of a shape no graph of this model takes."""
        return ShapeError(
            f"{type(self).__name__}: need batch >= 1 and 1 <= seq <= "
            f"max_seq_len={self.config.max_seq_len}, got batch={batch}, seq={seq}"
        )

    def executor(
        self, key: tuple, build: Callable[[], list[Node]], optimize: bool = False, owner=None
    ) -> Executor:
        """An executor cached under ``key`` (built from ``build()`` the first time, after the
        graph optimisation passes when ``optimize``). With an ``owner`` (the optimiser of a
        training step) it is cached only as long as the owner lives."""
        cache = self._executors if owner is None else self._owned.setdefault(owner, {})
        key = (*key, optimize)
        if key not in cache:
            cache[key] = Executor(build(), optimize=optimize)
        return cache[key]

    def feed(self, graph: ForwardGraph, tokens) -> dict:
        """The feed for ``graph``: the checked tokens and every parameter array."""
        self.check_device()
        self.check_params()
        feed = {var: self.params[name] for name, var in graph.params.items()}
        feed[graph.tokens] = self.check_tokens(tokens)
        return feed

    def check_device(self) -> None:
        """Raise :class:`DeviceError` unless the parameters are on the current device."""
        current = backend.get_device()
        if current != self.device:
            raise DeviceError(
                f"{type(self).__name__}: the parameters are on the {self.device!r} device, but "
                f"course_lib runs on {current!r}; call model.to({current!r}) first"
            )

    def check_params(self) -> None:
        """Raise :class:`FeedError` unless ``params`` has the names of
        :meth:`parameter_specs` (no more: a misspelt name would be ignored), and
        :class:`ShapeError` unless each has its shape."""
        what, specs = type(self).__name__, self.parameter_specs()
        missing = [name for name in specs if name not in self.params]
        unexpected = [name for name in self.params if name not in specs]
        if missing or unexpected:
            raise FeedError(f"{what}: params must have the config's parameter names; missing "
                            f"{missing[:3]}, unexpected {unexpected[:3]}")  # fmt: skip
        for name, (shape, _) in specs.items():
            value = self.params[name]
            given = tuple(value.shape) if hasattr(value, "shape") else np.shape(value)
            if given != shape:
                raise ShapeError(f"{what}: params[{name!r}] has shape {given}, the config's is "
                                 f"{shape}")  # fmt: skip

    def check_tokens(self, tokens) -> np.ndarray:
        """Tokens as an int64 (batch, seq) NumPy array (checked on the host), or a clear
        error; a device array of tokens is copied to the host."""
        backend.refuse_foreign(tokens, "tokens")
        try:
            array = to_numpy(tokens)
        except ValueError:  # NumPy's "inhomogeneous shape"
            raise ShapeError("tokens must have shape (batch, seq), got rows of different "
                             "lengths") from None  # fmt: skip
        if array.ndim != 2:
            raise ShapeError(f"tokens must have shape (batch, seq), got shape {array.shape}")
        if array.dtype.kind not in "iu":
            raise FeedError(f"tokens must be integer ids, got dtype {array.dtype}")
        vocab = self.config.vocab_size
        if array.size and (array.min() < 0 or array.max() >= vocab):
            raise FeedError(
                f"token ids must lie in [0, {vocab}), got {array.min()} to {array.max()}"
            )
        return array.astype(np.int64, copy=False)

    # -- running ---------------------------------------------------------------------------
    def logits(self, tokens) -> np.ndarray:
        """Next-token logits (batch, seq, vocab) as a NumPy array."""
        tokens = self.check_tokens(tokens)
        graph = self.forward_graph(*tokens.shape)
        run = self.executor(("logits", tokens.shape), lambda: [graph.logits])
        return to_numpy(run.run(self.feed(graph, tokens))[0])

    def loss(self, tokens) -> float:
        """The mean next-token cross-entropy of ``tokens`` (batch, seq >= 2), forward only."""
        tokens = self.check_tokens(tokens)
        self._check_loss_shape(*tokens.shape)
        graph = self.forward_graph(*tokens.shape)
        run = self.executor(("loss", tokens.shape), lambda: [graph.loss])
        return float(run.run(self.feed(graph, tokens))[0])

    def attention_maps(self, tokens) -> list[np.ndarray]:
        """Each layer's attention probabilities (batch, heads, seq, seq)."""
        tokens = self.check_tokens(tokens)
        graph = self.forward_graph(*tokens.shape)
        run = self.executor(("attention", tokens.shape), lambda: list(graph.attention))
        # the parameters after the last attention layer (its MLP, the final norm, lm_head)
        # do not reach any attention map
        maps = run.run(self.feed(graph, tokens), allow_unused=True)
        return [to_numpy(m) for m in maps]

    def loss_graph(self, batch: int, seq: int) -> tuple[ForwardGraph, dict[str, Node]]:
        """The forward graph and each parameter's gradient node (reverse mode)."""
        graph = self.forward_graph(batch, seq)  # checks that both are integers
        self._check_loss_shape(graph.batch, graph.seq)
        names = list(graph.params)
        grads = grad(graph.loss, [graph.params[n] for n in names])
        return graph, dict(zip(names, grads))

    def _check_loss_shape(self, batch: int, seq: int) -> None:
        if seq < 2:
            raise ShapeError(
                f"{type(self).__name__}: the loss needs seq >= 2 (position t predicts token "
                f"t + 1), got batch={batch}, seq={seq}"
            )

    def loss_and_grads(self, tokens) -> tuple[float, dict[str, np.ndarray]]:
        """The mean shifted cross-entropy and the gradient of every parameter (by name)."""
        tokens = self.check_tokens(tokens)
        self._check_loss_shape(*tokens.shape)
        graph = self.forward_graph(*tokens.shape)

        def build():  # the gradient graph, built once per shape (not on every call)
            _, grads = self.loss_graph(*tokens.shape)
            return [graph.loss, *grads.values()]

        run = self.executor(("grads", tokens.shape), build)
        loss, *values = run.run(self.feed(graph, tokens))
        return float(loss), {name: to_numpy(v) for name, v in zip(graph.params, values)}


def flatten_rows(x: Node) -> Node:
    """(batch, seq, dim) -> (batch · seq, dim): the layers work on rows of tokens."""
    b, t, d = x.shape
    return reshape(x, (b * t, d))
