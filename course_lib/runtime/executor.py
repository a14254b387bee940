"""Define-then-run: compile output nodes into a schedule once, run it many times.

The schedule is a flat list of steps (compute function, input slots, output slot)
in topological order. Each intermediate's slot is cleared right after its last use,
and the executor tracks the bytes alive at every step to report the peak.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Mapping, Sequence

from .. import backend, params
from ..errors import FeedError, GraphError, ParameterError, ShapeError
from ..graph import COMPUTE_ERRORS, Node, compute_error, node_list, topological_order
from ..ops.control import DEAD, Switch
from ..passes import optimize as run_passes
from .host_memory import keep_freed_memory

_AMBIGUOUS = object()  # a name that several variables share
_skips = threading.local()  # .count: the ops this thread's current run skipped


class Executor:
    """Run a fixed set of output nodes for many different feeds.

    Parameters
    ----------
    outputs : Node or list of Node
        What to compute. ``run`` returns one array per output (or one array), never a view
        of a fed array or of another output: changing one later changes nothing else. A 0-d
        output is what the op's NumPy code gives, often a NumPy scalar (``np.float64``), the
        same with ``optimize=True``.
    optimize : bool
        Apply the graph optimisation passes first (:func:`course_lib.passes.optimize`);
        ``outputs`` then holds the optimised graph that runs.

    Attributes
    ----------
    variables : list of Node
        The variables that must be fed.
    peak_bytes : int
        The largest number of bytes held by live intermediates during the last run, each
        buffer once on every device (fed values and constants included, each until its last
        use; a view, such as a transpose, holds no bytes of its own but keeps the whole array
        it looks into alive, so a fed slice counts the array it was sliced from). The copies
        ``run`` makes of its outputs (see ``outputs``) come after it and are not counted.
    last_run : dict
        ``{"computed": ops run, "skipped": ops on untaken branches}`` for the last run (zeros
        before the first). A run that raised counts the ops before the one that failed and
        names that op's node under ``"failed"``; ``peak_bytes`` is then its peak so far.

    Several threads may run one executor at once (each run has its own values and counts),
    and an op may run it again inside a run; ``peak_bytes`` and ``last_run`` then each
    describe the run that recorded last, not necessarily the same one.
    """

    def __init__(self, outputs: Node | Sequence[Node], optimize: bool = False):
        optimize = params.flag(optimize, "Executor: optimize")
        self.single = isinstance(outputs, Node)
        outs = node_list(outputs, "Executor")
        for o in outs:
            if o.is_eager:
                raise GraphError(f"{o.name} is an eager Tensor; its value is {o.name}.numpy()")
        if optimize:
            outs = run_passes(outs)
        self.outputs = outs
        self.order = topological_order(outs)
        self.variables = [n for n in self.order if n.is_variable]
        self.peak_bytes = 0
        self.last_run = {"computed": 0, "skipped": 0}
        self._compile()

    def _compile(self) -> None:
        slot = {node: i for i, node in enumerate(self.order)}
        last_use = {}
        for node in self.order:
            for inp in node.inputs:
                last_use[slot[inp]] = slot[node]
        keep = {slot[o] for o in self.outputs}
        frees: dict[int, list[int]] = {}
        for s, at in last_use.items():
            if s not in keep:
                frees.setdefault(at, []).append(s)
        self._constants = [(slot[n], n.op) for n in self.order if n.is_constant]
        self._var_slot = {v: slot[v] for v in self.variables}
        control_flow = any(isinstance(n.op, Switch) for n in self.order)
        self._steps = [
            (
                _skipping_dead(node.op) if control_flow else node.op.compute,
                tuple(slot[i] for i in node.inputs),
                slot[node],
                tuple(frees.get(slot[node], ())),
                node,
            )
            for node in self.order
            if node.inputs
        ]
        self._out_slots = [slot[o] for o in self.outputs]
        self._names: dict = {}
        for v in self.variables:  # a name two variables share feeds neither (ambiguous)
            self._names[v.name] = _AMBIGUOUS if v.name in self._names else v

    # -- feeding ---------------------------------------------------------------------------
    def _resolve_feed(self, feed: Mapping | None, allow_unused: bool) -> dict:
        if feed is None:
            feed = {}
        if not isinstance(feed, Mapping):  # an array passed alone too (its truth is ambiguous)
            name = self.variables[0].name if self.variables else "x"
            raise FeedError(f"run() takes a dict {{variable or name: array}}, got "
                            f"{type(feed).__name__}; pass run({{{name!r}: array}})")  # fmt: skip
        values = {}
        unused = set()  # names fed that these outputs do not use (allow_unused=True)
        for key, value in feed.items():
            if isinstance(key, str):
                var = self._names.get(key)
                if var is _AMBIGUOUS:
                    raise FeedError(
                        f"feed names {key!r}, but several variables of these outputs are called "
                        f"{key!r}; feed them by node ({{variable: array}}) instead of by name"
                    )
            else:
                var = key
            if var is None or var not in self._var_slot:
                if not allow_unused:
                    raise self._unused(key)
                unused.add(_key_name(key))
                continue
            if var in values:
                raise FeedError(
                    f"variable {var.name} is fed twice (by node and by name); feed it once"
                )
            values[var] = value
        missing = [v for v in self.variables if v not in values]
        if missing:
            raise _missing(missing, unused)
        return values

    def _unused(self, key) -> FeedError:
        """The error for a feed key that names no variable of these outputs."""
        name = _key_name(key)
        if isinstance(key, Node) and name in self._names:
            return FeedError(_another_variable(name))
        expected = ", ".join(sorted(self._names)) or "nothing"
        return FeedError(
            f"feed names {name!r}, which these outputs do not use; expected {expected} "
            "(a derivative need not use every variable of its function: to give it the "
            "function's feed, pass allow_unused=True)"
        )

    @staticmethod
    def _check(var: Node, value):
        what = f"the value fed to variable {var.name}"
        if isinstance(value, Node):
            raise FeedError(f"{what} is the node {value.name}; feed arrays (evaluate it first)")
        try:
            array = backend.to_device(value, what)
        except ParameterError:  # the boundary's own refusal (a masked array) says it all
            raise
        except (ValueError, TypeError) as exc:  # ragged lists, objects NumPy cannot hold
            raise FeedError(f"{what} is not an array of numbers: {exc}") from None
        kind = getattr(getattr(array, "dtype", None), "kind", "O")
        if kind not in "biuf":
            raise FeedError(f"{what} holds {getattr(array, 'dtype', type(array).__name__)} "
                            "values; course_lib computes with booleans, integers and real "
                            "floats")  # fmt: skip
        if var.shape is not None:
            ok = len(array.shape) == len(var.shape) and all(
                d is None or d == a for d, a in zip(var.shape, array.shape)
            )
            if not ok:
                raise ShapeError(
                    f"variable {var.name} expects shape {var.shape} (None = any size), "
                    f"but was fed shape {tuple(array.shape)}"
                )
        if var.dtype is not None and array.dtype != var.dtype:
            raise FeedError(
                f"variable {var.name} expects dtype {var.dtype}, but was fed {array.dtype}; "
                f"convert with .astype({var.dtype.name!r})"
            )
        return array

    # -- running ---------------------------------------------------------------------------
    def run(self, feed: Mapping | None = None, *, allow_unused: bool = False):
        """Compute the outputs for ``feed`` ({variable or name: array}).

        A feed entry for a variable these outputs do not use is an error, unless
        ``allow_unused=True``.
        """
        return self._run(feed, allow_unused, self._steps)

    def _run(self, feed: Mapping | None, allow_unused: bool, steps: list):
        """:meth:`run` through ``steps`` (this run's own: another thread's may differ)."""
        xp = backend.xp()
        keep_freed_memory()  # each run reuses the memory the last one freed (host_memory.py)
        values: list = [None] * len(self.order)
        fed = []
        for var, value in self._resolve_feed(feed, allow_unused).items():
            values[self._var_slot[var]] = array = self._check(var, value)
            fed.append(array)
        for s, constant in self._constants:
            values[s] = constant.on(xp)  # copied to a device once, then reused
        if not backend.on_host(xp):  # device copies of constants are shared, not read-only
            fed += [values[s] for s, _ in self._constants if hasattr(values[s], "shape")]
        held = _HeldBytes(values)
        peak = held.bytes
        step = None  # the step that raised, if one does
        # this run's count of skipped ops; the run whose op runs this one gets its own back
        outer, _skips.count = getattr(_skips, "count", 0), 0
        try:
            for step in steps:
                compute, ins, out, frees, _ = step
                if len(ins) == 1:
                    result = compute(xp, values[ins[0]])
                elif len(ins) == 2:
                    result = compute(xp, values[ins[0]], values[ins[1]])
                else:
                    result = compute(xp, *[values[i] for i in ins])
                values[out] = result
                held.add(out, result)
                if held.bytes > peak:
                    peak = held.bytes
                for f in frees:
                    held.drop(f, values[f])
                    values[f] = None
            step = None
        except COMPUTE_ERRORS as exc:
            raise compute_error(step[4], [values[i] for i in step[1]], exc) from exc
        finally:  # also for a run that raised: what it did, not what the run before it did
            skipped, _skips.count = _skips.count, outer
            self._record(peak, step, steps, skipped)
        return self._results(values, fed, xp)

    def _record(self, peak: int, failed, steps: list, skipped: int) -> None:
        """Set ``peak_bytes`` and ``last_run`` for a run through ``steps`` that skipped
        ``skipped`` ops and ended at step ``failed`` (None: it ran every step)."""
        self.peak_bytes = peak
        if failed is None:
            self.last_run = {"computed": len(steps) - skipped, "skipped": skipped}
            return
        before = next(k for k, step in enumerate(steps) if step is failed)
        self.last_run = {"computed": before - skipped, "skipped": skipped,
                         "failed": failed[4].name}  # fmt: skip

    def seconds_by_node(self, feed: Mapping, runs: int = 3) -> tuple[dict[Node, float], float]:
        """Where a run's time goes, timed inside real runs: each op's seconds (its ``compute``
        timed where the schedule calls it, the device synchronised before and after) and the
        whole run's, medians of ``runs`` runs after an untimed one. The run's time less the
        ops' sum is the executor's own work (feeding, checking, freeing, its loop). Timing
        ops one by one instead (``models.compute.seconds_by_family``) finds their inputs warm
        in the caches and leaves that work out."""
        if params.integer(runs, "seconds_by_node: runs") < 1:
            raise ParameterError(f"seconds_by_node needs at least 1 run, got {runs}")
        seconds: dict[Node, list[float]] = {step[4]: [0.0] * runs for step in self._steps}
        current = [0]

        def timed(compute, node):
            def run(xp, *args):
                backend.synchronize()
                start = time.perf_counter()
                result = compute(xp, *args)
                backend.synchronize()
                seconds[node][current[0]] += time.perf_counter() - start
                return result

            return run

        # these runs' own steps: another thread's runs meanwhile are neither timed nor counted
        steps = [(timed(compute, node), *rest, node) for compute, *rest, node in self._steps]
        self._run(feed, False, steps)  # untimed: caches, memory and kernels warmed up
        for node in seconds:
            seconds[node][0] = 0.0
        whole = []
        for current[0] in range(runs):
            start = time.perf_counter()
            self._run(feed, False, steps)
            backend.synchronize()
            whole.append(time.perf_counter() - start)
        return {n: statistics.median(s) for n, s in seconds.items()}, statistics.median(whole)

    def _results(self, values: list, fed: list, xp):
        outs = []
        earlier = _Earlier(fed)
        for node, s in zip(self.outputs, self._out_slots):
            value = values[s]
            if value is DEAD:
                raise GraphError(f"output {node.name} is on a branch that was not taken")
            if earlier.aliased_by(xp, value) or not _writable(value):
                value = value.copy()  # a fed array (or an earlier output) seen through a view,
                # a read-only one (a constant) or a broadcast (a gradient): the caller's to change
            earlier.add(value)
            outs.append(value)
        return outs[0] if self.single else outs


def _skipping_dead(op):
    """``op.compute``, but an op with a DEAD input (an untaken branch) outputs DEAD unrun,
    counted in this thread's run."""
    if op.accepts_dead:
        return op.compute
    compute = op.compute

    def run(xp, *args):
        for arg in args:
            if arg is DEAD:
                _skips.count += 1
                return DEAD
        return compute(xp, *args)

    return run


class _Earlier:
    """The arrays an output must not share memory with (the feeds, the earlier outputs), kept
    so that each output is checked in time proportional to the views among them, not to all
    of them (a training step has hundreds of outputs)."""

    def __init__(self, arrays: list):
        self.ids, self.views, self.arrays = set(), [], []
        for array in arrays:
            self.add(array)

    def add(self, array) -> None:
        if hasattr(array, "shape"):
            self.ids.add(id(array))
            self.arrays.append(array)
            if getattr(array, "base", None) is not None:
                self.views.append(array)

    def aliased_by(self, xp, value) -> bool:
        """Whether ``value`` may share memory with one of them. An array that owns its memory
        is new unless it is one of them or the base of one that is a view (``[y[0], y]``: the
        row came first); a view gets NumPy's cheap test of bounds against all of them. A
        number (a scalar constant's value) aliases nothing."""
        if not hasattr(value, "shape"):
            return False
        if getattr(value, "base", None) is None:
            return id(value) in self.ids or any(xp.may_share_memory(value, v) for v in self.views)
        return any(xp.may_share_memory(value, other) for other in self.arrays)


def _writable(value) -> bool:
    """Can each element of ``value`` be written alone? Not in a read-only NumPy array, nor in
    a broadcast (an axis of stride 0): NumPy's are read-only, but a device's arrays have no
    such flag, so writing one element of a CuPy broadcast would write them all."""
    flags = getattr(value, "flags", None)  # a number has none
    if flags is None:
        return True
    strides = value.strides
    return getattr(flags, "writeable", True) and (
        0 not in strides or all(stride or size < 2 for stride, size in zip(strides, value.shape))
    )


def _key_name(key):
    return key if isinstance(key, str) else getattr(key, "name", key)


def _missing(missing: list[Node], unused: set) -> FeedError:
    """The error for the variables left unfed, named with their shapes and dtypes; ``unused``
    holds the names fed but not used."""
    for var in missing:
        if var.name in unused:  # fed, but as another node of that name
            return FeedError(_another_variable(var.name))
    return FeedError(
        f"missing feed for variable(s) {', '.join(map(_declared, missing))}; "
        f"pass run({{{missing[0].name!r}: array, ...}})"
    )


def _declared(var: Node) -> str:
    """``x (shape (None, 3), float32)``: a variable with the shape and dtype it expects."""
    shape = "any shape" if var.shape is None else f"shape {var.shape}"
    return f"{var.name} ({shape}, {'any dtype' if var.dtype is None else var.dtype})"


def _another_variable(name: str) -> str:
    return (
        f"the feed's {name} is another variable named {name!r} than the one these outputs were "
        "built from (was the cell that defines it run again?): re-run the cells that build the "
        f"graph, or feed by name ({{{name!r}: array}})"
    )


class _HeldBytes:
    """The bytes a run's live values hold, each buffer once: a view (a transpose, a reshape,
    a broadcast) adds nothing to the array it looks into, and keeps all of it alive."""

    def __init__(self, values: list):
        self.bytes = 0
        self._buffers: dict = {}  # buffer key -> [owner, live values in it]
        self._slots: list = [None] * len(values)  # slot -> the key its value was counted in
        for slot, value in enumerate(values):
            if value is not None:
                self.add(slot, value)

    def add(self, slot: int, value) -> None:
        owner = _owner(value)
        if owner is None:  # DEAD, or a number: no buffer to share
            self.bytes += _nbytes(value)
            return
        key = self._slots[slot] = _buffer_key(owner)
        if (entry := self._buffers.get(key)) is not None:
            entry[1] += 1
        else:
            self._buffers[key] = [owner, 1]
            self.bytes += owner.nbytes

    def drop(self, slot: int, value) -> None:
        key, self._slots[slot] = self._slots[slot], None
        if key is None:
            self.bytes -= _nbytes(value)
            return
        entry = self._buffers[key]
        entry[1] -= 1
        if not entry[1]:
            del self._buffers[key]
            self.bytes -= entry[0].nbytes


def _owner(value):
    """The array whose memory ``value`` uses (itself unless it is a view), None for a value
    that is not an array."""
    if not hasattr(value, "shape") or not hasattr(value, "nbytes"):
        return None
    while hasattr(getattr(value, "base", None), "nbytes"):  # NumPy's and CuPy's views
        value = value.base
    return value


def _buffer_key(owner) -> int:
    """Which buffer ``owner`` is: its ``id`` on the host, ``(where its memory starts,)`` on
    a device (the strict device's ``base`` is a new wrapper at each call; two live buffers
    never start at one address, and the entry holds its owner alive)."""
    pointer = getattr(getattr(owner, "data", None), "ptr", None)
    return id(owner) if pointer is None else (pointer,)


def _nbytes(value) -> int:
    return 0 if value is DEAD else getattr(value, "nbytes", 8)


def evaluate(nodes: Node | Sequence[Node], feed: Mapping | None = None, *,
             allow_unused: bool = False):  # fmt: skip
    """Compute ``nodes`` once for ``feed`` (an :class:`Executor` built and run once);
    ``allow_unused=True`` lets the feed name variables the nodes do not use (a tangent that
    does not depend on x, fed the same feed as the function)."""
    return Executor(nodes).run(feed, allow_unused=allow_unused)
