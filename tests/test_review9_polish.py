"""Review 9: items earlier rounds noticed and left (jit on methods, ...)."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.errors import GraphError


class Scaled:
    def __init__(self, w):
        self.w = w

    @cl.jit
    def times(self, x):
        return x * self.w


def test_jit_on_a_method_passes_the_instance():
    a, b = Scaled(2.0), Scaled(3.0)
    np.testing.assert_array_equal(a.times(np.ones(2)), [2.0, 2.0])
    np.testing.assert_array_equal(b.times(np.ones(2)), [3.0, 3.0])  # its own trace
    np.testing.assert_array_equal(a.times(np.ones(2)), [2.0, 2.0])
    assert Scaled.times.stats["traces"] >= 2 and Scaled.times.stats["hits"] >= 1


def test_jit_on_a_method_of_an_unhashable_instance_is_a_graph_error():
    class Unhashable(Scaled):
        __hash__ = None

    with pytest.raises(GraphError, match="argument 0 .*hashable"):
        Unhashable(2.0).times(np.ones(2))


def test_jit_on_a_class_is_still_the_function():
    assert isinstance(Scaled.times, cl.jit(lambda x: x).__class__)


def test_measure_vectorization_refuses_no_elements():
    from course_lib.errors import ParameterError
    from course_lib.perf.vectorization import measure_vectorization

    with pytest.raises(ParameterError, match="n must be an integer >= 1, got 0"):
        measure_vectorization("add", 0)
