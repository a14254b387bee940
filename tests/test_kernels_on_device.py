"""Which arrays the kernels take on each device (notebook 07's ``xp``): CuPy arrays on a GPU;
host (NumPy) arrays in the CPU emulator, which is where the kernels run on the CPU and on the
strict stand-in device; a device array handed to the emulator is refused by name."""

import numpy as np
import pytest

import course_lib as cl
from course_lib import kernels as K
from course_lib import strict_device

pytestmark = pytest.mark.skipif(not K.emulator_available(), reason="needs g++ for the emulator")


@pytest.mark.parametrize("device", ["cpu", "strict"])
def test_the_kernels_take_host_arrays_where_they_are_emulated(device):
    with cl.use_device(device):
        assert K.default_mode() == "emulator" and K.array_module() is np
        xp = K.array_module()
        a = xp.arange(5, dtype=np.float32)
        c = xp.empty_like(a)
        K.get_kernel("vector_add.cu", "vector_add")((1,), (32,), (a, a, c, np.int32(5)))
        np.testing.assert_array_equal(c, 2 * a)
        np.testing.assert_array_equal(K.vector_add_float4(a, a), 2 * a)


def test_a_device_array_handed_to_an_emulated_kernel_is_refused_by_name():
    on_strict = strict_device.asarray(np.ones(4, np.float32))
    kernel = K.get_kernel("vector_add.cu", "vector_add", mode="emulator")
    with pytest.raises(K.KernelLaunchError, match=r"argument 0 .*'strict' device.*to_numpy"):
        kernel((1,), (32,), (on_strict, on_strict, on_strict, np.int32(4)))
    with pytest.raises(cl.DeviceError, match="emulated kernel's input"):
        K.softmax(on_strict)  # the launchers say the same through backend.host_array
