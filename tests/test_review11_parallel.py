"""Review 11 of the LLM systems arithmetic (parallel.py, gpu_time.py, crossover.py): what a
hand count or an inverse function showed wrong."""

import pytest

import course_lib as cl
from course_lib.models.gpu_time import achieved_mfu, seconds_at_mfu


@pytest.mark.parametrize("flops, n_gpus, gpu", [
    (3e23, 1, "H100"), (1e23, 3, "H100"), (1e15, 7, "A100"), (8.08e22, 7, "A100"),
])  # fmt: skip
def test_a_run_at_the_peak_gives_back_an_mfu_of_one(flops, n_gpus, gpu):
    # seconds_at_mfu at MFU 1, then achieved_mfu on those GPU-seconds: round-off made the MFU
    # 1 + 2**-52 and the run "1 times the peak; an MFU cannot exceed 1" (a ParameterError)
    seconds = seconds_at_mfu(flops, gpu, 1.0, n_gpus)
    mfu = achieved_mfu(flops, seconds * n_gpus, gpu)
    assert mfu == 1.0
    assert seconds_at_mfu(flops, gpu, mfu, n_gpus) == seconds  # and it is an MFU again


def test_an_mfu_above_one_beyond_round_off_is_still_refused():
    with pytest.raises(cl.ParameterError, match="cannot exceed 1"):
        achieved_mfu(312e12 * (1 + 1e-9), 1.0, "A100")
