"""Answers that try to fool ``verify`` itself (issue 22, item 2): exact types, answers that no
signal stops, exceptions that are not ``Exception``, ``os._exit``, and calling the library
function the exercise asks the student to write (refused by the identity of its code)."""

import math
import os
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest

import course_lib as cl
from course_lib import gradcheck
from course_lib.autodiff import reverse
from course_lib.exercises import verify
from course_lib.models.batchnorm import batchnorm_affine
from course_lib.models.flops import training_flops
from course_lib.ops.elementwise import Elementwise, Silu
from course_lib.perf.counts import op_cost, op_nodes
from course_lib.strides import StridedView


class _Yes(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class _YesTuple(tuple):
    def __eq__(self, other):
        return True

    __hash__ = tuple.__hash__


class _Disguised(int):
    """An int subclass that says it is a builtin (review round 3: exact trusted __module__)."""

    __module__ = "builtins"

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


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
        ("05.contiguous_strides", lambda shape: (_Disguised(0),) * len(shape),
         "a subclass of int made by your code"),
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


def _norm_grads_by_the_engine(kind, dy, x, gamma, eps):
    """RMS norm's gradients from its own adjoint ops (the rules the exercise asks for)."""
    dy, x, gamma = map(cl.constant, (dy, x, gamma))
    ops = (cl.ops.norms.RMSNormGradX(eps), cl.ops.norms.RMSNormGradW(eps))
    return dict(zip(("x", "gamma"), cl.evaluate([cl.graph.apply(op, dy, x, gamma) for op in ops])))


def _decoded_by_the_model_layer(cache, q, k, v, position):
    """The step by course_lib's ops: RoPE from the position, then causal attention."""
    keys = cl.concat([cl.constant(cache[0][None]), cl.rope(
        cl.constant(k[None, None]), seq_axis=1, start=position)], axis=1)
    values = cl.constant(np.concatenate([cache[1], v[None]])[None])
    query = cl.rope(cl.constant(q[None, None]), seq_axis=1, start=position)
    out = cl.evaluate(cl.causal_attention(query, keys, values)[0])
    return cl.to_numpy(out)[0, 0], tuple(cl.to_numpy(cl.evaluate(n))[0] for n in (keys, values))


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


def _mlp_grads_eager(x, y, w1, w2):
    w1, w2 = cl.Tensor(w1, requires_grad=True), cl.Tensor(w2, requires_grad=True)
    loss = cl.mean((cl.relu(cl.Tensor(x) @ w1) @ w2 - cl.Tensor(y)) ** 2)
    loss.backward()
    return w1.grad.numpy(), w2.grad.numpy()


def _softmax_ce_grad_eager(logits, targets):
    logits = cl.Tensor(logits, requires_grad=True)
    cl.cross_entropy(logits, targets).backward()
    return logits.grad.numpy()


def _permuted_by_the_view(shape, strides, axes):
    view = StridedView(np.zeros(1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides))),
                       tuple(shape), tuple(strides)).permute(*axes)  # fmt: skip
    return view.shape, view.strides


def _intensity_by_op_cost(outputs):
    costs = [op_cost(node) for node in op_nodes(outputs)]
    return Fraction(sum(c.flops for c in costs), sum(c.elements for c in costs))


def _fold_by_affine(W, B, gamma, beta, mean, var, eps):
    scale, shift = batchnorm_affine(gamma, beta, mean, var, eps)
    return W * scale[:, None, None, None], B * scale + shift


class _SwiGLUForward(Elementwise):
    """silu(a) * b computed into its result (the forward 06.swiglu asks for)."""

    def compute(self, xp, a, b):
        out = xp.empty(np.broadcast_shapes(a.shape, b.shape), xp.result_type(a.dtype, b.dtype))
        xp.negative(a, out=out)
        xp.exp(out, out=out)
        out += 1.0
        xp.divide(a, out, out=out)
        out *= b
        return out


class _GradOfTheUnfusedGraph(_SwiGLUForward):
    def gradient(self, node, adjoint, needs):
        a, b = node.inputs
        return cl.grad(cl.sum(cl.silu(a) * b * adjoint), [a, b])


class _CallsSilu(Elementwise):
    def compute(self, xp, a, b):
        return Silu().compute(xp, a) * b


class _FusedByThePass(Elementwise):
    def compute(self, xp, a, b):
        x, y = cl.variable("a", a.shape, a.dtype), cl.variable("b", b.shape, b.dtype)
        return cl.evaluate(cl.passes.fuse_elementwise(cl.silu(x) * y), {x: a, y: b})


class _SiluItself(Silu):
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
        ("04.norm_backward", _norm_grads_by_the_engine),
        ("08.decode_step", _decoded_by_the_model_layer),
        ("08.decode_step", lambda cache, q, k, v, position: (__import__(
            "course_lib.kernels.reference", fromlist=["x"]).attention(
                q[None, :, None], k[None, :, None], v[None, :, None])[0, :, 0], cache)),
        ("04.norm_backward", lambda kind, dy, x, gamma, eps: dict(zip(("x", "gamma"), cl.grad(
            cl.sum(cl.rms_norm(cl.constant(x), cl.constant(gamma), eps)), [])))),
        (
            "06.intensity",
            lambda outputs: Fraction(cl.perf.arithmetic_intensity(outputs).flops, 1),
        ),
        ("06.swiglu", _GradOfTheUnfusedGraph),
        ("06.swiglu", _CallsSilu),
        ("06.swiglu", _FusedByThePass),
        ("06.swiglu", _SiluItself),
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
        ("09.parallel_memory", lambda config, batch, seq, devices, strategy: {
            k: getattr(__import__("course_lib.models.parallel", fromlist=["x"]).parallel_memory(
                config, batch, seq, devices, strategy), k)
            for k in ("weights", "gradients", "optimizer", "activations", "communication")}),
        ("09.parallel_memory", lambda config, batch, seq, devices, strategy: {
            "weights": 0, "gradients": 0, "optimizer": 0, "activations": 0,
            "communication": __import__("course_lib.models.parallel", fromlist=["x"])
            .ring_all_reduce_bytes(2, devices)}),
        ("09.forward_flops", lambda config, batch, seq: __import__(
            "course_lib.models.flops", fromlist=["x"]).flops_table(config, batch, seq).total),
        # the same work reached through another library function
        ("02.central_difference", lambda f, x, eps: gradcheck.central_difference(f, x, eps)),
        ("02.central_difference", lambda f, x, eps: float(gradcheck.numerical_gradient(
            lambda v: f(float(v)), np.array(x), eps))),
        ("04.mlp_grads", _mlp_grads_eager),
        ("04.softmax_ce_grad", _softmax_ce_grad_eager),
        ("03.div_rule", lambda node, adjoint, needs: cl.grad(
            cl.sum(node * adjoint), list(node.inputs))),
        ("01.guard_key", lambda args: cl.jit(lambda *a: a[0])._guard(args)[0]),
        ("05.contiguous_strides", lambda shape: StridedView(np.zeros(math.prod(shape)),
                                                            tuple(shape)).strides),
        ("05.contiguous_strides", lambda shape: tuple(reversed(
            cl.strides.col_major_strides(tuple(reversed(shape)))))),
        ("05.permuted", _permuted_by_the_view),
        ("06.intensity", _intensity_by_op_cost),
        ("06.fold_batchnorm", _fold_by_affine),
        ("09.count_params", lambda config: sum(__import__(
            "course_lib.models.memory", fromlist=["x"]).parameter_breakdown(config).values())),
        ("09.forward_flops", lambda config, batch, seq: training_flops(config, batch, seq).total
         // 3),
    ],
)  # fmt: skip
def test_calling_the_library_function_the_exercise_asks_for_is_refused(exercise_id, answer):
    verdict = verify(exercise_id, answer)
    assert verdict.status == "failed", verdict
    assert verdict.mistake is not None and verdict.mistake.startswith("uses-"), verdict


def _ce_grad_through_ravel(logits, targets):
    """Right for row-major logits only: on a column-major array ``ravel`` is a copy, so the
    subtraction of the one-hot targets is lost."""
    n, c = logits.shape
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    probs.ravel()[np.arange(n) * c + targets] -= 1.0
    return probs / n


def test_an_answer_that_depends_on_how_its_inputs_lie_in_memory_fails():
    from course_lib.exercises.core import LAYOUTS, laid_out

    logits = np.arange(6.0).reshape(2, 3)
    for layout in LAYOUTS:
        given = laid_out(logits, layout)
        assert np.array_equal(given, logits) and not np.shares_memory(given, logits)
    assert laid_out(logits, "F").flags.f_contiguous
    assert not laid_out(logits, "strided").flags.c_contiguous
    right = _ce_grad_through_ravel(np.ones((2, 3)), np.array([0, 2]))  # row major: right
    assert right[0, 0] < 0 and right[1, 2] < 0
    verdict = verify("04.softmax_ce_grad", _ce_grad_through_ravel)
    assert verdict.status == "failed" and "rows" in verdict.message, verdict
