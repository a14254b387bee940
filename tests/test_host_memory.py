"""An executor's runs reuse the memory the last run freed (runtime/host_memory.py)."""

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.runtime import host_memory

ROOT = Path(__file__).resolve().parents[1]

# A training step of a small LLaMA, run three times; prints the page faults of the third.
STEPS = """
import resource
import numpy as np
from course_lib.models import Llama, LlamaConfig
from course_lib.models.optim import AdamW
from course_lib.models.train import training_step
from course_lib.runtime import host_memory

config = LlamaConfig.tiny()
model = Llama(config, seed=0)
optimizer = AdamW(model.params, lr=1e-3)
run = training_step(model, optimizer, 4, 64)
graph = model.forward_graph(4, 64)
tokens = np.random.default_rng(0).integers(0, config.vocab_size, (4, 64))

def step():
    values = model.feed(graph, tokens)
    values.update(optimizer.feed())
    loss, *new = run.run(values)
    optimizer.write_back(model.params, new)

step(); step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
step()
after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(after - before, host_memory.keep_freed_memory())
"""

glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="the thresholds are glibc's (Linux)",
)


def _third_step(**env) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items() if k not in host_memory.USER_SETTINGS}
    result = subprocess.run(
        [sys.executable, "-c", STEPS], capture_output=True, text=True, timeout=300,
        check=True, env={**clean, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env},
    )  # fmt: skip
    faults, kept = result.stdout.split()
    return int(faults), kept


@glibc
def test_a_step_reuses_the_memory_the_last_step_freed():
    kept, answer = _third_step()
    assert answer == "True"
    # the user's own thresholds, left alone: at 128 kB (glibc's starting value, fixed)
    # the step's arrays come back as fresh pages every step
    fresh, answer_default = _third_step(MALLOC_MMAP_THRESHOLD_="131072",
                                        MALLOC_TRIM_THRESHOLD_="131072")  # fmt: skip
    assert answer_default == "False", "the user's own glibc settings are left alone"
    assert fresh > 2000, f"the default allocator faulted only {fresh} pages: test too weak"
    assert kept < fresh / 10, f"{kept} page faults with memory kept vs {fresh} without"


def test_the_thresholds_are_set_once_and_the_answer_kept(monkeypatch):
    monkeypatch.setattr(host_memory, "_done", [])
    calls = []
    monkeypatch.setattr(host_memory, "_raise_thresholds", lambda: calls.append(1) or True)
    assert host_memory.keep_freed_memory() is True
    assert host_memory.keep_freed_memory() is True
    assert calls == [1]


@pytest.mark.parametrize(
    ("name", "value"),
    [*((name, "1") for name in host_memory.USER_SETTINGS),
     ("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536")],
)  # fmt: skip
def test_a_users_glibc_setting_is_left_alone(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    assert host_memory._raise_thresholds() is False


@glibc
def test_tunables_of_something_else_do_not_switch_it_off(monkeypatch):
    for name in host_memory.USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.pthread.rseq=0")
    assert host_memory._raise_thresholds() is True


def test_another_c_library_is_left_alone(monkeypatch):
    monkeypatch.setattr(platform, "libc_ver", lambda: ("musl", "1.2"))
    for name in host_memory.USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    assert host_memory._raise_thresholds() is False
