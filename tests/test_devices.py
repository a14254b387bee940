"""The device boundary: host data enters the current device where it is handed in, results
stay there until .numpy()/to_numpy, and an array of another device is refused by name.

These tests pin the strict stand-in device (course_lib.strict_device) themselves, so they say
the same on every device `make test` runs them on.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import course_lib as cl
from course_lib import strict_device
from course_lib.models import AdamW, Llama, LlamaConfig, generate, train
from course_lib.strict_device import StrictArray

SMALL = LlamaConfig(dim=8, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=12, vocab_size=11,
                    max_seq_len=8)  # fmt: skip


@pytest.fixture
def strict():
    with cl.use_device("strict"):
        yield


# -- the stand-in device refuses what CuPy refuses ----------------------------------------------
def test_strict_arrays_refuse_numpy_operands_and_implicit_conversion():
    a = strict_device.asarray(np.arange(3.0))
    assert isinstance(a, StrictArray) and not isinstance(a, np.ndarray)
    for mix in (lambda: a + np.ones(3), lambda: np.ones(3) * a, lambda: a @ np.eye(3),
                lambda: strict_device.exp(np.ones(3)), lambda: np.asarray(a),
                lambda: np.array(a)):  # fmt: skip
        with pytest.raises(TypeError):
            mix()
    with pytest.raises(TypeError):
        round(a[0])  # CuPy arrays have no __round__ either
    assert float(a[1]) == 1.0 and a.tolist() == [0.0, 1.0, 2.0]  # CuPy's explicit ways out
    np.testing.assert_array_equal(a.get(), [0.0, 1.0, 2.0])
    assert isinstance(a * np.float32(2), StrictArray) and isinstance(2.0 - a, StrictArray)
    assert isinstance(np.exp(a), StrictArray)  # a ufunc on device arrays stays on the device
    assert not hasattr(a.flags, "writeable")  # no read-only device arrays, as on CuPy


def test_strict_results_of_zero_d_operations_are_device_arrays():
    a = strict_device.asarray(2.0)
    for value in (a * 2, a.sum(), strict_device.sqrt(a), a[()], np.float64(1) + a):
        assert isinstance(value, StrictArray), type(value)


# -- values enter the device where they are handed in -------------------------------------------
def test_feeds_constants_and_tensors_enter_the_device(strict):
    x = cl.variable("x")
    y = x * np.ones(3) + cl.constant([1.0, 2.0, 3.0])
    for feed in (np.arange(3.0), [0.0, 1.0, 2.0], cl.to_device(np.arange(3.0))):
        out = cl.evaluate(y, {"x": feed})
        assert isinstance(out, StrictArray)
        np.testing.assert_array_equal(cl.to_numpy(out), [1.0, 3.0, 5.0])
    t = cl.Tensor(np.array([2.0]), requires_grad=True)
    (cl.exp(t) * t).backward()
    assert isinstance(t.grad._data, StrictArray)
    np.testing.assert_allclose(t.grad.numpy(), [3 * np.exp(2.0)])


def test_a_constant_is_copied_to_a_device_once_and_a_result_cannot_change_it(strict):
    c = cl.constant(np.array([1.0, 2.0]))
    run = cl.Executor(c)
    first = run.run()
    assert c.op.on(strict_device) is c.op.on(strict_device)  # cached per device
    first[0] = 5.0  # a copy: the cached constant is not the returned array
    np.testing.assert_array_equal(cl.to_numpy(run.run()), [1.0, 2.0])


@pytest.fixture
def cpu():
    with cl.use_device("cpu"):
        yield


def test_an_array_of_another_device_is_refused_by_name(cpu):
    on_strict = strict_device.asarray(np.ones(2))
    x = cl.variable("x")
    with pytest.raises(cl.DeviceError, match=r"to variable x is on the 'strict' device.*on 'cpu'"):
        cl.evaluate(x * 2.0, {x: on_strict})
    with pytest.raises(cl.DeviceError, match="Tensor"):
        cl.Tensor(on_strict)


def test_unknown_devices_and_a_gpu_without_cupy_are_clear_errors():
    with pytest.raises(cl.DeviceError, match="'tpu' is not a device"):
        cl.set_device("tpu")
    if not cl.backend.gpu_available():
        with pytest.raises(cl.DeviceError, match="CuPy is not installed or sees no CUDA device"):
            cl.set_device("gpu")
    env = {**os.environ, "COURSE_LIB_DEVICE": "tpu"}
    result = subprocess.run([sys.executable, "-c", "import course_lib as cl; cl.get_device()"],
                            env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode != 0 and "COURSE_LIB_DEVICE='tpu' is not a device" in result.stderr


def test_a_device_name_is_read_alike_by_set_device_and_the_environment(cpu):
    cl.set_device(" Strict ")
    assert cl.get_device() == "strict"
    cl.set_device("CPU")
    assert cl.get_device() == "cpu"
    for wrong in (None, 3, ["cpu"], ""):
        with pytest.raises(cl.DeviceError, match="is not a device; use one of cpu, gpu, strict"):
            cl.set_device(wrong)
    assert cl.get_device() == "cpu"


def test_use_device_goes_back_even_after_an_error():
    before = cl.get_device()
    with pytest.raises(RuntimeError), cl.use_device("strict"):
        assert cl.get_device() == "strict"
        raise RuntimeError
    assert cl.get_device() == before


# -- models ------------------------------------------------------------------------------------
def test_a_model_trains_and_generates_on_the_device_with_the_cpus_losses():
    tokens = np.random.default_rng(0).integers(0, 11, 200)
    losses, texts = {}, {}
    for device in ("cpu", "strict"):
        with cl.use_device(device):
            model = Llama(SMALL, seed=0, init_std=0.3)
            assert all(cl.backend.device_of(a) == device for a in model.params.values())
            optimizer = AdamW(model.params, lr=1e-2)
            assert all(cl.backend.device_of(m) == device for m in optimizer.m.values())
            history = train(model, tokens, 3, batch=2, seq=6, optimizer=optimizer, progress=False)
            losses[device] = history.losses
            texts[device] = model.decode(tokens[None, :5])[0]
    np.testing.assert_allclose(losses["strict"], losses["cpu"], rtol=1e-6)
    np.testing.assert_allclose(texts["strict"], texts["cpu"], rtol=1e-5, atol=1e-6)


def test_a_model_on_another_device_says_so_and_moves_with_to(cpu):
    model = Llama(SMALL, seed=0)
    tokens = np.zeros((1, 4), np.int64)
    with cl.use_device("strict"):
        with pytest.raises(cl.DeviceError, match=r"on the 'cpu' device.*model.to\('strict'\)"):
            model.logits(tokens)
    before = model.logits(tokens)
    model.to("strict")
    try:
        assert all(isinstance(a, StrictArray) for a in model.params.values())
        np.testing.assert_allclose(model.logits(tokens), before, rtol=1e-6)
        assert isinstance(generate(model, [1, 2], 3, seed=0), list)
    finally:
        model.to("cpu")
    assert cl.get_device() == "cpu" and isinstance(model.params["lm_head.weight"], np.ndarray)


# -- what is CPU-only by nature refuses device arrays -------------------------------------------
def test_cpu_only_parts_refuse_device_arrays_by_name():
    from course_lib.kernels import launch  # noqa: PLC0415
    from course_lib.perf import vectorization  # noqa: PLC0415

    on_strict = strict_device.asarray(np.ones(4, np.float32))
    with pytest.raises(cl.DeviceError, match="StridedView's buffer is on the 'strict' device"):
        cl.strides.StridedView(on_strict, (2, 2))
    with pytest.raises(cl.DeviceError, match="emulated kernel's input .* CPU only"):
        launch.vector_add(on_strict, on_strict, mode="emulator")
    with pytest.raises(cl.DeviceError, match="loop 'add'"):
        vectorization.reference("add", on_strict, on_strict)
