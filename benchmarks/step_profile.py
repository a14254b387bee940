"""Where one training step's time goes, by op family: course_lib's ops beside PyTorch's profiler.

course_lib: each op of the step timed inside real runs of the step's executor
(``Executor.seconds_by_node``, medians of a few runs), grouped by the op names of
:data:`COURSE_LIB_FAMILIES`; the executor's own work (the run less its ops) counts as
bookkeeping, as autograd's does on PyTorch's side. PyTorch: ``torch.profiler`` (CPU) over
a few steps, each event's *self* time (nested events are not counted twice) given to the
family of its name or of the nearest enclosing call that names one (``Optimizer.step``,
``scaled_dot_product_attention``), divided by the number of steps. The families are coarse
on purpose: PyTorch's backward runs generic ``aten::mul``/``aten::sum`` kernels that no name
ties to RoPE or a norm, so everything elementwise (activations, gates, norms, RoPE, residual
adds, their backward) is one family.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

BOOKKEEPING = "copies, views, bookkeeping"  # and each library's own work between its ops
#: Family title -> course_lib op names (``Op.name``); other ops go to "elementwise and norms".
COURSE_LIB_FAMILIES = {
    "matrix products": ("matmul", "matmul_sum"),
    "attention (QK^T, softmax, PV)": (
        "head_scores", "causal_softmax", "head_mix", "head_mix_t", "softmax_grad",
    ),
    "optimizer (AdamW)": ("adam_moment", "adamw_update", "sgd_update"),
    "loss and embedding": (
        "cross_entropy", "softmax", "one_hot", "take", "take_adjoint", "scatter",
    ),
    BOOKKEEPING: ("reshape", "permute", "mT", "concat", "getitem", "broadcast_to"),
}  # fmt: skip
OTHER = "elementwise and norms"
TITLES = (*COURSE_LIB_FAMILIES, OTHER)

_TORCH_NAMES = {  # a substring of an event's name (or of an enclosing call's) -> family
    "Optimizer.step": "optimizer (AdamW)",
    "scaled_dot_product": "attention (QK^T, softmax, PV)",
    "log_softmax": "loss and embedding",
    "nll_loss": "loss and embedding",
    "embedding": "loss and embedding",
    "aten::mm": "matrix products",
    "aten::addmm": "matrix products",
    "aten::bmm": "matrix products",
}
_TORCH_COPIES = ("copy_", "fill_", "cat", "view", "as_strided", "transpose", "aten::t",
                 "reshape", "slice", "empty", "zero_", "clone", "contiguous", "expand",
                 "_to_copy", "detach", "select", "unsqueeze", "permute")  # fmt: skip


def torch_family(name: str, enclosing: list[str]) -> str:
    """The family of a PyTorch profiler event: the first family a name names, looking at the
    enclosing calls outermost first (an ``aten::mul`` inside ``Optimizer.step`` is the
    optimizer's), then the event's own name; copies, views and autograd's own bookkeeping;
    else elementwise."""
    for candidate in [*enclosing, name]:
        for part, family in _TORCH_NAMES.items():
            if part in candidate:
                return family
    if any(part in name for part in _TORCH_COPIES) or "Backward" in name or "autograd" in name:
        return BOOKKEEPING
    return OTHER


def course_lib_seconds(executor, feed: Mapping) -> dict[str, float]:
    """Seconds per family of one run of ``executor`` on ``feed``, each op timed inside the
    runs; the run's time that no op took (the executor's own work) is bookkeeping."""
    from course_lib.models.compute import seconds_by_family_in_runs  # noqa: PLC0415

    totals, own = seconds_by_family_in_runs(executor, feed, families=COURSE_LIB_FAMILIES)
    by_title = {title: totals.get(title if title != OTHER else "other", 0.0) for title in TITLES}
    by_title[BOOKKEEPING] += own
    return by_title


def torch_seconds(step: Callable[[], object], steps: int = 3) -> dict[str, float]:
    """Seconds per family of one call of ``step`` under ``torch.profiler`` (CPU), the mean of
    ``steps`` profiled calls after one unprofiled one."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    totals = dict.fromkeys(TITLES, 0.0)
    for event in prof.events():
        enclosing, parent = [], event.cpu_parent
        while parent is not None:
            enclosing.insert(0, parent.name)
            parent = parent.cpu_parent
        totals[torch_family(event.name, enclosing)] += event.self_cpu_time_total * 1e-6
    return {title: seconds / steps for title, seconds in totals.items()}


def profile_table(threads: int, step_medians: Mapping[str, float], by_family: Mapping) -> str:
    """One table for one thread count: each family's milliseconds per library and the ratio,
    then the sums and the measured step medians (the sums are runs of the step alone; the
    medians count course_lib's write-back of the new parameters and the timers' noise)."""
    names = list(by_family)
    lines = [f"--- {threads} thread{'s' if threads != 1 else ''}: ms per step by family ---",
             f"{'family':32s}" + "".join(f"{n:>12s}" for n in names) + "       ratio"]  # fmt: skip

    def row(title: str, values: list[float]) -> str:
        ratio = f"{values[0] / values[1]:12.2f}" if len(values) == 2 and values[1] else ""
        return f"{title:32s}" + "".join(f"{v * 1e3:12.1f}" for v in values) + ratio

    for title in TITLES:
        lines.append(row(title, [by_family[n][title] for n in names]))
    lines.append(row("sum of the families", [sum(by_family[n].values()) for n in names]))
    lines.append(row("whole step (median)", [step_medians[n] for n in names]))
    return "\n".join(lines)
