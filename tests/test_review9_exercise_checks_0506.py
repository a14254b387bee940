"""Review 9 of the checks of notebooks 05 and 06 and of 01.evaluate, as a grader reads them:
correct answers written another way pass, and wrong answers a student would write fail, with
a hint that fits (or none rather than a wrong one)."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from exercise_notebooks import notebook_exercises, reference_answer

import course_lib as cl
from course_lib.exercises import verify
from course_lib.ops.broadcast import unbroadcast


def _reference(exercise_id):
    return reference_answer(notebook_exercises()[exercise_id])


# -- 05.add_views: an answer that writes to a view's buffer -----------------------------------
def test_add_views_writing_outside_the_views_is_refused_as_changing_its_input():
    """The check read the expected sums after the answer ran and never looked at the buffers:
    a right sum that also wrote to a buffer (here to an element the view does not read) passed."""
    right = _reference("05.add_views")

    def scribbles(a, b):
        result = right(a, b)
        read = {a.offset + sum(k * s for k, s in zip(index, a.strides))
                for index in np.ndindex(*a.shape)}  # fmt: skip
        unread = [i for i in range(a.buffer.size) if i not in read]
        if unread:
            a.buffer[unread[0]] = 0.0
        return result

    verdict = verify("05.add_views", scribbles)
    assert verdict.status == "failed", verdict.message
    assert verdict.mistake == "changed-input" and "buffer of a" in verdict.message


def test_add_views_summing_into_a_buffer_is_told_so_not_given_a_wrong_expected_value():
    """Summing into a's buffer and copying out gave "wrong at (0, 0): x instead of y", with y
    computed from the buffer the answer had changed."""

    def into_a(a, b):
        ndim = max(len(a.shape), len(b.shape))
        if len(a.shape) != ndim or any(m < n for m, n in zip(a.shape, b.shape[-ndim:])):
            return _reference("05.add_views")(a, b)
        strides = (0,) * (ndim - len(b.shape)) + tuple(
            0 if n == 1 else s for n, s in zip(b.shape, b.strides))
        out = np.empty(a.shape, a.buffer.dtype)
        for index in np.ndindex(*a.shape):
            i = a.offset + sum(k * s for k, s in zip(index, a.strides))
            a.buffer[i] += b.buffer[b.offset + sum(k * s for k, s in zip(index, strides))]
            out[index] = a.buffer[i]
        return out

    verdict = verify("05.add_views", into_a)
    assert verdict.status == "failed" and verdict.mistake == "changed-input", verdict.message
    assert "instead of" not in verdict.message


# -- 06.swiglu: needs, and the accesses hint --------------------------------------------------
def _swiglu(reference, **methods):
    return type("Variant", (reference,), {"name": "swiglu_variant", **methods})


def _needs_swapped(self, node, adjoint, needs):
    a, b = node.inputs
    s = cl.sigmoid(a)
    da = adjoint * b * s * (1.0 + a * (1.0 - s))
    return [unbroadcast(da, node, 0) if needs[1] else None,
            unbroadcast(adjoint * a * s, node, 1) if needs[0] else None]  # fmt: skip


def test_swiglu_gradient_that_reads_the_wrong_needs_is_refused():
    """The check only ever asked for both gradients (needs [True, True]), so a gradient that
    returns None where needs[k] is True passed; cl.grad with respect to a alone then gives 0."""
    verdict = verify("06.swiglu", _swiglu(_reference("06.swiglu"),
                                                       gradient=_needs_swapped))  # fmt: skip
    assert verdict.status == "failed", verdict.message
    assert "with respect to a alone (needs = [True, False])" in verdict.message


def test_swiglu_gradient_that_ignores_needs_still_passes():
    def always(self, node, adjoint, needs):
        a, b = node.inputs
        s = cl.sigmoid(a)
        return [unbroadcast(adjoint * b * (s + a * s * (1.0 - s)), node, 0),
                unbroadcast(adjoint * (a * s), node, 1)]  # fmt: skip

    verdict = verify("06.swiglu", _swiglu(_reference("06.swiglu"), gradient=always))
    assert verdict.passed, verdict.message


def test_swiglu_accesses_storing_twice_is_not_told_its_loads_are_output_sized():
    """With a and b of the output's size, right loads equal output-sized ones: the check named
    output-sized loads for a wrong store count."""

    def twice(self, out, a, b):
        return (math.prod(a), math.prod(b)), 2 * math.prod(out)

    verdict = verify("06.swiglu", _swiglu(_reference("06.swiglu"), accesses=twice))
    assert verdict.status == "failed" and verdict.mistake is None, verdict.message
    assert "stores 2048" in verdict.message


# -- 01.evaluate: a constant looked up in feed ------------------------------------------------
def test_evaluate_looking_constants_up_in_feed_is_not_told_it_frees_too_early():
    """Taking every node without inputs for a variable looks a constant up in feed: the
    KeyError got the frees-too-early hint, about deleting values."""

    def leaves_fed(outputs, feed):
        order = cl.topological_order(outputs)
        last = {s: i for i, n in enumerate(order) for s in n.inputs}
        values, peak = {}, 0
        for i, n in enumerate(order):
            values[n] = feed[n] if not n.inputs else n.op.compute(
                np, *[values[s] for s in n.inputs])
            peak = max(peak, sum(np.size(v) for v in values.values()))
            for s in set(n.inputs):
                if last[s] == i and s not in outputs:
                    del values[s]
        return [values[o] for o in outputs], peak

    verdict = verify("01.evaluate", leaves_fed)
    assert verdict.status == "failed" and verdict.mistake != "frees-too-early", verdict.message
    assert "the constant 2 is not in feed" in verdict.message


# -- pairs returned as lists ------------------------------------------------------------------
def test_fold_batchnorm_returning_the_pair_as_a_list_passes():
    def as_list(W, B, gamma, beta, mean, var, eps):
        R = gamma / np.sqrt(var + eps)
        return [W * R.reshape(-1, 1, 1, 1), (B - mean) * R + beta]

    verdict = verify("06.fold_batchnorm", as_list)
    assert verdict.passed, verdict.message


def test_permuted_returning_the_pair_as_a_list_passes():
    def as_list(shape, strides, axes):
        return [tuple(shape[a] for a in axes), tuple(strides[a] for a in axes)]

    verdict = verify("05.permuted", as_list)
    assert verdict.passed, verdict.message


# -- correct answers in other styles ----------------------------------------------------------
def _strides_by_cumprod(shape):
    if not shape:
        return ()
    return tuple(np.cumprod((tuple(shape[1:]) + (1,))[::-1], dtype=np.int64)[::-1])


def _permuted_by_a_table(shape, strides, axes):
    table = np.array([shape, strides], dtype=np.int64).T[list(axes)].T
    return tuple(table[0]), tuple(table[1])


def _can_view_by_brute_force(shape, strides, new_shape):
    """Every element's offset in order; the new shape's strides read off its unit steps."""
    if 0 in shape:
        return True
    offsets = [sum(i * s for i, s in zip(index, strides))
               for index in itertools.product(*map(range, shape))]  # fmt: skip
    unit = [math.prod(new_shape[k + 1:]) for k in range(len(new_shape))]
    steps = [offsets[u] - offsets[0] if n > 1 else 0 for n, u in zip(new_shape, unit)]
    return all(offsets[flat] == offsets[0] + sum(i * s for i, s in zip(index, steps))
               for flat, index in enumerate(itertools.product(*map(range, new_shape))))  # fmt: skip


def _add_views_vectorised(a, b):
    ndim = max(len(a.shape), len(b.shape))
    padded = [(1,) * (ndim - len(v.shape)) + tuple(v.shape) for v in (a, b)]
    shape = []
    for m, n in zip(*padded):
        if m != n and 1 not in (m, n):
            raise ValueError(f"{a.shape} and {b.shape} do not broadcast")
        shape.append(n if m == 1 else m)
    index = np.indices(shape).reshape(ndim, -1) if ndim else np.zeros((0, 1), np.int64)
    parts = []
    for view, pad in zip((a, b), padded):
        own = (0,) * (ndim - len(view.shape)) + tuple(view.strides)
        strides = np.array([0 if n == 1 else s for n, s in zip(pad, own)], dtype=np.int64)
        parts.append(view.buffer[view.offset + strides @ index])
    return (parts[0] + parts[1]).reshape(shape)


def _intensity_by_depth_first(outputs):
    seen, flops, moved = set(), 0, 0
    stack = [(node, False) for node in outputs]
    while stack:
        node, done = stack.pop()
        if done:
            if node.inputs:
                flops += node.op.flops(node.shape, *(i.shape for i in node.inputs))
                moved += sum(math.prod(i.shape) for i in node.inputs) + math.prod(node.shape)
        elif node not in seen:
            seen.add(node)
            stack += [(node, True)] + [(i, False) for i in node.inputs]
    return Fraction(flops, moved)


def _evaluate_by_use_counts(outputs, feed):
    order = cl.topological_order(outputs)
    uses = {}
    for node in order:
        for source in node.inputs:
            uses[source] = uses.get(source, 0) + 1
    kept = {id(o) for o in outputs}
    values, held, peak = {}, 0, 0
    for node in order:
        value = feed[node] if node.is_variable else node.op.compute(
            np, *[values[s] for s in node.inputs])
        values[node] = value
        held += np.size(value)
        peak = max(peak, held)
        for source in node.inputs:
            uses[source] -= 1
            if uses[source] == 0 and id(source) not in kept:
                held -= np.size(values.pop(source))
    return tuple(values[o] for o in outputs), np.int64(peak)


@pytest.mark.parametrize(("exercise_id", "answer"), [
    ("05.contiguous_strides", _strides_by_cumprod),
    ("05.permuted", _permuted_by_a_table),
    ("05.can_view", _can_view_by_brute_force),
    ("05.add_views", _add_views_vectorised),
    ("06.intensity", _intensity_by_depth_first),
    ("01.evaluate", _evaluate_by_use_counts),
])  # fmt: skip
def test_correct_answers_in_other_styles_pass(exercise_id, answer):
    verdict = verify(exercise_id, answer)
    assert verdict.passed, verdict.message
