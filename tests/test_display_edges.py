"""The display edges of notebooks 00–03 on a device: exercise checks, trace tables, pictures,
plots and dual numbers take results that stay on the device (here the strict stand-in, which
refuses implicit conversion as CuPy does) and show the same text as on the CPU.

These tests pin the strict device themselves, so they check the boundary on every run."""

import numpy as np
import pytest
from exercise_notebooks import notebook_exercises, reference_answer

import course_lib as cl
from course_lib import strict_device, viz
from course_lib.exercises import EXERCISES, verify
from course_lib.exercises.core import close, host, mismatch, show
from course_lib.viz.figure import format_value
from course_lib.viz.plots import host_numbers

_ON_DEVICE = "course_lib.strict_device"


@pytest.fixture
def strict():
    with cl.use_device("strict"):
        yield


def _on_device(value):
    return strict_device.asarray(np.asarray(value, dtype=float))


@pytest.mark.parametrize("exercise_id", sorted(EXERCISES))
def test_reference_answers_pass_when_results_stay_on_the_device(strict, exercise_id):
    verdict = verify(exercise_id, reference_answer(notebook_exercises()[exercise_id]))
    assert verdict.passed, verdict.message


def test_a_wrong_answer_on_the_device_gets_its_hint_not_a_crash(strict):
    def no_seed_sum(out, wrt):  # forgets that the adjoint of out is 1: gives zeros
        return [cl.zeros_like(x) for x in wrt]

    verdict = verify("03.gradient", no_seed_sum)
    assert (verdict.status, verdict.mistake) == ("failed", "no-seed")
    assert verdict.message.startswith("gradient(x, [x]): the gradient for x gives 0., expected 1.")


def test_checks_compare_and_show_device_values_on_the_host():
    got, want = _on_device([1.0, 2.0]), np.array([1.0, 3.0])
    assert close(got, _on_device([1.0, 2.0])) and close([got, got], [np.array([1.0, 2.0])] * 2)
    assert not close(got, want)
    assert mismatch(got, want) == "gives [1. 2.], expected [1. 3.]"
    assert mismatch(_on_device(np.arange(8.0)), np.arange(8.0) + 1).startswith("is off by up to 1")
    assert show(_on_device(2.5)) == show(np.asarray(2.5)) and show(got) == "[1. 2.]"
    assert type(host((got, [got]))[1][0]) is np.ndarray


def test_trace_tables_and_pictures_of_device_results_read_as_on_the_cpu(lecture_graph):
    v1, v2, *_, v7 = lecture_graph
    feed = {v1: 2.0, v2: 5.0}
    shown = {}
    for device in ("cpu", "strict"):
        with cl.use_device(device):
            dv1, trace = cl.gradient_trace(v7, v1)
            shown[device] = [
                str(viz.evaluation_trace(lecture_graph, feed, tangents={v1: 1.0})),
                str(viz.adjoint_trace(trace, feed)),
                repr(viz.StepThrough(trace, feed)),
                viz.draw_graph(v7, feed=feed).source,
            ]
    assert shown["strict"] == shown["cpu"]
    assert format_value(_on_device([1.0, 2.0])) == "[1.000, 2.000]"
    assert format_value([0.5]) == "0.500"


@pytest.mark.parametrize(
    "draw",
    [
        lambda d: viz.plot_curve(d([0.0, 1.0]), {"loss": [d(2.0), d(1.0)]}, "step", "loss",
                                 points={"data": (d([0.5]), d([1.5]))}),
        lambda d: viz.plot_difference_errors(d([1e-3, 1e-2]), {"forward": d([1e-4, 1e-3]),
                                                              "central": d([1e-6, 1e-4])}),
        lambda d: viz.plot_breakdown({"matmul": d(3.0), "softmax": d(1.0)}, "FLOPs"),
        lambda d: viz.plot_attention([d(np.eye(3))], list("abc"), ["head 0"]),
    ],
    ids=["curve", "difference_errors", "breakdown", "attention"],
)
def test_plots_take_device_arrays_and_lists_of_device_scalars(draw, tmp_path):
    fig = draw(_on_device)
    fig.savefig(tmp_path / "plot.png")  # drawing reads every number
    assert fig.axes


def test_host_numbers_copies_device_arrays_and_stacks_lists():
    stacked = host_numbers([_on_device(1.0), 2.0, np.float32(3.0)])
    assert type(stacked) is np.ndarray and stacked.tolist() == [1.0, 2.0, 3.0]
    assert type(host_numbers(_on_device([[1.0]]))) is np.ndarray
    assert host_numbers(range(3)).tolist() == [0, 1, 2]


def test_a_dual_made_from_a_device_scalar_holds_python_floats(strict):
    x = cl.variable("x", shape=())
    value = cl.evaluate(x * 2.0, {x: 1.5})
    assert type(value).__module__ == _ON_DEVICE  # results stay on the device
    d = cl.Dual(value, 1.0) * 2.0
    assert (type(d.val), type(d.dot)) == (float, float)
    assert repr(d) == "Dual(6, 2)"
