"""Review 9: items earlier rounds noticed and left (jit on methods, ...)."""

import importlib
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import course_lib as cl
from course_lib.errors import GraphError, ShapeError


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


def test_sgd_update_counts_the_flops_it_computes():
    from course_lib.models.optim import SGDUpdate

    # θ·(1 − lr·λ) − lr·g: a multiply, a multiply and a subtract per element
    assert SGDUpdate(0.1).flops((10,), (10,), (10,), ()) == 30
    assert SGDUpdate(0.0).flops((10,), (10,), (10,), ()) == 20


def test_train_checks_its_seed_and_closes_its_bar_when_a_step_fails(monkeypatch):
    from course_lib.errors import ParameterError
    from course_lib.models import Llama, LlamaConfig, train

    train_module = importlib.import_module("course_lib.models.train")  # not the function

    model = Llama(LlamaConfig(dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=32,
                              vocab_size=8, max_seq_len=8))  # fmt: skip
    tokens = np.arange(64) % 8
    for seed, error in ((-1, ParameterError), (1.5, GraphError)):
        with pytest.raises(error, match="train: seed"):
            train(model, tokens, 1, batch=2, seq=4, seed=seed, progress=False)
    closed = []
    monkeypatch.setattr(train_module.ProgressBar, "close", lambda self: closed.append(True))

    def failing(*args):
        raise ShapeError("the first step fails")

    monkeypatch.setattr(train_module, "_step", failing)
    with pytest.raises(ShapeError, match="the first step fails"):
        train(model, tokens, 2, batch=2, seq=4, progress=False)
    assert closed == [True]


def test_peak_bytes_counts_a_view_in_the_array_it_looks_into():
    x = cl.variable("x", (100, 100), np.float64)
    transposed = cl.Executor(cl.transpose(x))  # a view of the fed array: nothing more
    transposed.run({x: np.ones((100, 100))})
    assert transposed.peak_bytes == 80_000
    y = x * 2.0
    doubled = cl.Executor([y, cl.transpose(y)])
    doubled.run({x: np.ones((100, 100))})
    assert doubled.peak_bytes == 2 * 80_000 + 8  # x, y and the constant (yᵀ holds nothing new)


def test_concat_of_one_node_checks_its_axis():
    x = cl.variable("x", (2, 3))
    assert cl.concat([x], axis=-1) is x
    with pytest.raises(ShapeError, match="concat of x .*axis 99 is out of range"):
        cl.concat([x], axis=99)


def test_adamw_names_moments_the_step_does_not_train():
    from course_lib.errors import FeedError
    from course_lib.models import AdamW, Llama, LlamaConfig, train

    model = Llama(LlamaConfig(dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=32,
                              vocab_size=8, max_seq_len=8))  # fmt: skip
    optimizer = AdamW({**model.params, "extra": np.zeros(3, np.float32)})
    with pytest.raises(FeedError, match=r"moments for parameter\(s\) \['extra'\] that this step"):
        train(model, np.arange(64) % 8, 1, batch=2, seq=4, optimizer=optimizer, progress=False)


def test_release_modes_follow_the_files_bits_not_who_runs_it(monkeypatch):
    from course_lib import release

    monkeypatch.setattr(release.os, "access", lambda *args, **kwargs: True)  # root: any x bit
    files = release.release_files(Path(__file__).resolve().parents[1], None)
    assert files["course_lib/__init__.py"][1] == 0o644


def test_an_edition_in_the_environment_does_not_reach_make_site():
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run(["make", "-n", "site"], cwd=root, capture_output=True, text=True,
                         env={**os.environ, "EDITION": "instructor"}, check=True)  # fmt: skip
    assert '--edition "student"' in run.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
def test_the_grader_kills_a_process_the_kernel_left_in_a_session_and_environment_of_its_own(
    tmp_path,
):
    import subprocess
    import time

    from course_lib.exercises import grade

    pid_file = tmp_path / "pid"
    # a worker (a subreaper, as grade's) whose child starts a sleeper with no environment in a
    # session of its own, then exits: the orphaned sleeper is neither in the worker's session
    # nor marked
    leaver = ("import subprocess; p = subprocess.Popen(['sleep', '300'], env={}, "
              f"start_new_session=True); open({str(pid_file)!r}, 'w').write(str(p.pid))")
    worker = ("from course_lib.exercises import grade; import subprocess, sys, time; "
              "grade._become_subreaper(); "
              f"subprocess.run([sys.executable, '-c', {leaver!r}]); time.sleep(300)")  # fmt: skip
    process = subprocess.Popen([sys.executable, "-c", worker], start_new_session=True)
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.05)
    sleeper = int(pid_file.read_text())
    grade._kill_run("no-such-marker", process)
    for _ in range(100):  # dead: gone, or a zombie until init reads its status
        try:
            state = Path(f"/proc/{sleeper}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        os.kill(sleeper, 9)
        pytest.fail("the sleeper outlived the run")


def test_kernel_sources_read_as_utf8_in_an_ascii_locale():
    import subprocess

    code = ("import locale; from course_lib.kernels import sources; "
            "print(locale.getpreferredencoding(False)); "
            "[sources.read_source(f) for f in sources.kernel_files()]; "
            "sources.expand_includes('#include \"cpu_pool.hpp\"', 'x.cpp'); print('read')")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
           "PYTHONCOERCECLOCALE": "0"}  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, cwd=root, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    encoding, done = result.stdout.split()
    if "UTF" in encoding.upper():
        pytest.skip(f"the C locale's encoding is {encoding} here")
    assert done == "read"


def test_an_integer_to_a_negative_power_is_a_parameter_error_in_eager_mode_too():
    from course_lib.errors import ParameterError

    with pytest.raises(ParameterError, match="pow"):
        cl.Tensor(np.array([2, 3])) ** -1


def test_a_table_row_of_text_is_not_split_into_characters():
    from course_lib.tables import Table

    with pytest.raises(ShapeError, match="row 1 is the text 'ab'; give a list of cells"):
        Table(["x", "y"], [["1", "2"], "ab"])
    with pytest.raises(ShapeError, match="headers is the text"):
        Table("xy", [["1", "2"]])


@pytest.mark.parametrize("length", [50, 400, 5000])
def test_a_deep_graph_pickles_and_keeps_what_its_outputs_share(length):
    import pickle

    x = cl.variable("x", (2,), np.float64)
    h = x
    for k in range(length):
        h = cl.sin(h) + 0.5 if k % 2 else h * 1.01
    ends = [h, cl.exp(h), h * 2.0]  # three outputs sharing the chain
    back = pickle.loads(pickle.dumps(ends))
    assert back[1].inputs[0] is back[0] and back[2].inputs[0] is back[0]
    (x_back,) = [n for n in cl.graph.topological_order(back) if n.is_variable]
    value = np.array([0.25, -1.0])
    for mine, theirs in zip(cl.evaluate(ends, {x: value}), cl.evaluate(back, {x_back: value})):
        np.testing.assert_array_equal(mine, theirs)
    again = pickle.loads(pickle.dumps(ends[0]))  # a second pickle of the same graph
    assert again is back[0]


@pytest.mark.skipif(not os.environ.get("CI") and shutil.which("g++") is None,
                    reason="the CUDA emulator needs g++ on PATH")  # fmt: skip
def test_the_emulator_keeps_what_a_kernel_writes_through_a_const_pointer():
    from course_lib.kernels.emulator import EmulatedModule
    source = ('extern "C" __global__ void cheat(const float* x, float* y) {\n'
              '    ((float*)x)[threadIdx.x] = 7.0f; y[threadIdx.x] = 1.0f; }\n')  # fmt: skip
    kernel = EmulatedModule(source, "cheat.cu").get_function("cheat")
    x, y = np.zeros(4, np.float32), np.zeros(4, np.float32)
    kernel((1,), (4,), (x, y))
    np.testing.assert_array_equal(x, 7.0)  # as on a GPU: the input-written checks see it
    np.testing.assert_array_equal(y, 1.0)


def test_a_memory_budget_in_gib_is_told_to_count_bytes(capsys):
    from course_lib.exercises import check

    def in_gib(config, batch, seq, dtype_bytes=2, recompute="none"):
        return dict.fromkeys(("weights", "gradients", "optimizer", "activations", "kv_cache"), 1.5)

    check("09.training_memory", in_gib)
    out = capsys.readouterr().out
    assert "must return an int of bytes (not GiB" in out, out
