"""Answers that try to fool ``verify`` itself (issue 22, item 2): exact types, answers that no
signal stops, exceptions that are not ``Exception``, ``os._exit``, and calling the library
function the exercise asks the student to write (refused by the identity of its code)."""

import os
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest

import course_lib as cl
from course_lib.autodiff import reverse
from course_lib.exercises import verify


class _Yes(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class _YesTuple(tuple):
    def __eq__(self, other):
        return True

    __hash__ = tuple.__hash__


class _Mine(BaseException):
    pass


def _swallows_everything(shape):
    while True:
        try:
            while True:
                pass
        except BaseException:
            pass


def _raises(error):
    def answer(shape):
        raise error

    return answer


@pytest.mark.parametrize(
    "exercise_id, answer, expected",
    [
        ("09.count_params", lambda config: _Yes(0), "a subclass of int made by your code"),
        ("05.contiguous_strides", lambda shape: _YesTuple(), "a subclass of tuple"),
        ("05.contiguous_strides", lambda shape: (_Yes(1),) * len(shape), "a subclass of int"),
        ("05.contiguous_strides", _raises(_Mine("no")), "raised _Mine: no"),
        ("05.contiguous_strides", _raises(GeneratorExit()), "raised GeneratorExit"),
        ("05.contiguous_strides", _raises(KeyboardInterrupt), "raised KeyboardInterrupt"),
        ("05.contiguous_strides", lambda shape: os._exit(3), "ended the process"),
    ],
)
def test_cheats_on_types_and_exceptions_fail(exercise_id, answer, expected):
    verdict = verify(exercise_id, answer)
    assert verdict.status == "failed", verdict
    assert expected in verdict.message


@pytest.mark.parametrize(
    "answer", [_swallows_everything, lambda shape: sum(range(10**12)) and (1,) * len(shape)]
)
def test_answers_no_signal_stops_are_killed(answer):
    verdict = verify("05.contiguous_strides", answer, time_limit=1.0)
    assert verdict.status == "failed" and "did not finish within 1 s" in verdict.message


def test_what_the_answer_prints_is_shown_and_its_changes_die_with_the_check(capsys):
    def answer(shape):
        print("debugging", shape)
        np.allclose = lambda *args, **kwargs: True  # dies with the child process
        return (1,) * len(shape)

    verdict = verify("05.contiguous_strides", answer)
    assert verdict.status == "failed" and "debugging ()" in capsys.readouterr().out
    assert np.allclose.__module__.startswith("numpy")


def test_a_patched_allclose_does_not_pass_a_wrong_answer(monkeypatch):
    monkeypatch.setattr(np, "allclose", lambda *args, **kwargs: True)
    ref = cl.Dual  # any exercise comparing floats: fold_batchnorm giving its inputs back
    assert ref
    verdict = verify("06.fold_batchnorm", lambda W, B, gamma, beta, mean, var, eps: (W, B))
    assert verdict.status == "failed"


_real = reverse.gradient  # captured before any check runs


def _aliased_gradient(out, wrt):
    order = cl.topological_order(out)
    grads = _real(out, list(wrt), cl.constant(np.ones(())), order)
    return [grads[x] for x in wrt]


def _interpreted(outputs, feed):
    values = cl.graph.interpret(outputs, dict(feed), np)
    return [values[o] for o in outputs], sum(np.size(v) for v in values.values())


def _strided_can_view(shape, strides, new_shape):
    try:
        cl.strides.StridedView.from_numpy(np.empty(shape)).reshape(*new_shape)
    except Exception:
        return False
    return True


def _dual_namespace():
    return SimpleNamespace(Dual=cl.Dual, sin=np.sin, exp=np.exp, log=np.log)


class _MyDual(cl.Dual):
    pass


def _by_the_engine(differentiate):
    """An op rule that builds the op's graph and has the library differentiate it."""

    def rule(op, inputs, output, v, **attrs):
        xs = [cl.variable(f"x{k}", np.shape(a)) for k, a in enumerate(inputs)]
        out = getattr(cl, op)(*xs, **attrs)
        return differentiate(out, xs, v, dict(zip(xs, inputs)))

    return rule


@pytest.mark.parametrize(
    "exercise_id, answer",
    [
        ("01.evaluate", lambda outputs, feed: (cl.evaluate(outputs, feed), 0)),
        ("01.evaluate", lambda outputs, feed: (cl.Executor(outputs).run(feed), 0)),
        ("01.evaluate", _interpreted),
        ("01.evaluate", lambda outputs, feed: (__import__(
            "course_lib.exercises.core", fromlist=["x"]).run_graph(outputs, feed), 0)),
        ("05.contiguous_strides", cl.strides.row_major_strides),
        ("05.contiguous_strides", lambda shape: cl.strides.row_major_strides(shape)),
        ("05.can_view", _strided_can_view),
        ("05.add_views", lambda a, b: a.to_numpy() + b.to_numpy()),
        ("05.add_views", lambda a, b: np.array([[a[i, j] + b[j] for j in range(3)]
                                                for i in range(2)])),
        ("03.gradient", lambda out, wrt: cl.grad(out, list(wrt))),
        ("03.gradient", _aliased_gradient),
        ("03.div_rule", lambda node, adjoint, needs: node.op.gradient(node, adjoint, needs)),
        ("02.dual", _dual_namespace()),
        ("02.jvp_rules", _by_the_engine(lambda out, xs, dots, feed: cl.evaluate(
            cl.jvp(out, dict(zip(xs, dots))), feed))),
        ("02.jvp_rules", _by_the_engine(lambda out, xs, dots, feed: cl.evaluate(
            out.op.jvp(out, *map(cl.constant, dots)), feed))),
        ("03.vjp_rules", _by_the_engine(lambda out, xs, g, feed: tuple(cl.evaluate(
            cl.grad(out, xs, cl.constant(g)), feed)))),
        ("03.vjp_rules", _by_the_engine(lambda out, xs, g, feed: tuple(cl.evaluate(
            out.op.gradient(out, cl.constant(g), [True] * len(xs)), feed)))),
        ("02.dual", SimpleNamespace(Dual=_MyDual, sin=np.sin, exp=np.exp, log=np.log)),
        ("04.mlp_grads", lambda x, y, w1, w2: cl.grad(cl.constant(x).sum(), [])),
        (
            "06.intensity",
            lambda outputs: Fraction(cl.perf.arithmetic_intensity(outputs).flops, 1),
        ),
        ("06.fold_batchnorm", lambda *args: __import__(
            "course_lib.models.batchnorm", fromlist=["x"]).fold_batchnorm(*args)),
        ("09.count_params", lambda config: __import__(
            "course_lib.models.memory", fromlist=["x"]).param_count(config)),
        ("09.training_memory", lambda config, batch, seq, dtype_bytes=2, recompute="none": {
            "weights": 0, "gradients": 0, "optimizer": 0, "kv_cache": 0,
            "activations": __import__("course_lib.models.memory", fromlist=["x"])
            .training_memory(config, batch, seq, dtype_bytes, recompute=recompute).activations}),
        ("09.training_memory", lambda config, batch, seq, dtype_bytes=2, recompute="none": {
            "weights": 0, "gradients": 0, "optimizer": 0, "activations": 0,
            "kv_cache": __import__("course_lib.models.inference", fromlist=["x"])
            .kv_cache_bytes(config, seq, batch, dtype_bytes)}),
        ("09.training_memory", lambda config, batch, seq, dtype_bytes=2, recompute="none": {
            "weights": 0, "gradients": 0, "optimizer": 0, "kv_cache": 0, "activations": sum(
                __import__("course_lib.models.memory", fromlist=["x"])
                .activation_elements(config, batch, seq, recompute).values())}),
        ("09.forward_flops", lambda config, batch, seq: __import__(
            "course_lib.models.flops", fromlist=["x"]).flops_table(config, batch, seq).total),
    ],
)  # fmt: skip
def test_calling_the_library_function_the_exercise_asks_for_is_refused(exercise_id, answer):
    verdict = verify(exercise_id, answer)
    assert verdict.status == "failed", verdict
    assert verdict.mistake is not None and verdict.mistake.startswith("uses-"), verdict
