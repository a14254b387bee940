"""Review 9 (training): optimisers, the training loop and their input checks."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.models import AdamW, Llama, LlamaConfig, cosine_schedule, train
from course_lib.models.optim import SGD, AdamWUpdate
from course_lib.models.train import held_out_loss, training_step

CONFIG = LlamaConfig(dim=16, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=32, vocab_size=13,
                     max_seq_len=8)  # fmt: skip
TOKENS = np.arange(200) % CONFIG.vocab_size


def _one_step(optimizer, arrays):
    """The update nodes of ``loss = sum(a·a)`` over ``arrays`` (name -> float64 vector) and
    one run's values."""
    nodes = {n: cl.variable(n, a.shape, a.dtype) for n, a in arrays.items()}
    loss = sum(cl.sum(w * w) for w in nodes.values())
    grads = dict(zip(nodes, cl.grad(loss, list(nodes.values()))))
    run = cl.Executor(optimizer.update_nodes(nodes, grads))
    return run.run({nodes[n]: a for n, a in arrays.items()} | optimizer.feed())


@pytest.mark.parametrize("target", [[1.0, 2.0], 3.0])
@pytest.mark.parametrize("make", [lambda: SGD(0.1), lambda: AdamW({"a": np.ones(2)})])
def test_write_back_names_a_target_that_is_not_an_array(make, target):
    # was AttributeError: 'list' object has no attribute 'size' (the overlap check ran first)
    optimizer = make()
    values = _one_step(optimizer, {"a": np.ones(2)})
    with pytest.raises(cl.GraphError, match=r"write_back: parameter a is a (list|float), not an"):
        optimizer.write_back({"a": target}, values)


@pytest.mark.parametrize("arrays", [[np.ones(2)], None, 1e-3])
def test_adamw_refuses_arrays_that_are_not_a_mapping(arrays):
    # was AttributeError: 'list' object has no attribute 'items'
    with pytest.raises(cl.GraphError, match=r"AdamW: arrays must map each parameter name"):
        AdamW(arrays)


@pytest.mark.parametrize("make", [lambda: SGD(0.1), lambda: AdamW(dict.fromkeys("ab", np.ones(2)))])
def test_update_nodes_names_a_parameter_without_a_gradient(make):
    a, b = cl.variable("a", (2,), np.float64), cl.variable("b", (2,), np.float64)
    (g,) = cl.grad(cl.sum(a * a), [a])
    with pytest.raises(cl.FeedError, match=r"update_nodes: no gradient for parameter\(s\) \['b'\]"):
        make().update_nodes({"a": a, "b": b}, {"a": g})  # was a bare KeyError: 'b'


def test_adamw_refuses_moments_of_another_dtype_than_their_parameter():
    # moments made for float32 arrays, a float64 model: the update was computed in float64
    # and the moments rounded back to float32 every step, silently
    optimizer = AdamW(Llama(CONFIG, seed=0).params)
    model = Llama(CONFIG, seed=0, dtype=np.float64)
    with pytest.raises(cl.GraphError, match=r"adamw_update: parameter .* is float64, but its "
                                            r"moments are float32"):  # fmt: skip
        train(model, TOKENS, 1, batch=2, seq=8, optimizer=optimizer, progress=False)


def test_adamw_update_flops_count_no_decay_without_weight_decay():
    assert AdamWUpdate(0.9, 0.95, 1e-8, 0.1).flops((10,), (10,)) == 70
    assert AdamWUpdate(0.9, 0.95, 1e-8, 0.0).flops((10,), (10,)) == 60  # was 70


def test_held_out_loss_refuses_no_batches():
    for batches in (0, -1):  # was a NaN loss (the mean of no batches) and a RuntimeWarning
        with pytest.raises(cl.ShapeError, match="held_out_loss: batches must be a positive"):
            held_out_loss(Llama(CONFIG, seed=0), TOKENS, 2, 8, batches=batches)


@pytest.mark.parametrize("kwargs, message", [
    ({"final_fraction": -0.5}, "final_fraction must be a real number \\[0, 1\\]"),
    ({"final_fraction": 2.0}, "final_fraction must be a real number \\[0, 1\\]"),
    ({"warmup": -5}, "warmup must be an integer >= 0"),
    ({"base_lr": -1e-3}, "base_lr must be a real number >= 0"),
    ({"steps": -1}, "steps must be an integer >= 0"),
])  # fmt: skip
def test_cosine_schedule_checks_its_arguments_when_made(kwargs, message):
    # final_fraction -0.5 gave negative learning rates late in a run (the run then failed
    # there); warmup -5 started the decay half-way, silently
    arguments = {"base_lr": 1e-3, "steps": 100} | kwargs
    with pytest.raises(cl.ParameterError, match=f"cosine_schedule: {message}"):
        cosine_schedule(**arguments)


def test_an_interrupted_step_does_not_advance_the_step_count():
    """A KeyboardInterrupt inside the run (a notebook's stop button) is a step that did not
    happen, as a failed one is: AdamW's bias corrections must not count it."""
    model = Llama(CONFIG, seed=0)
    optimizer = AdamW(model.params)
    run = training_step(model, optimizer, 2, 8)  # the executor train will use (cached)

    def interrupted(feed):
        raise KeyboardInterrupt

    run.run = interrupted
    with pytest.raises(KeyboardInterrupt):
        train(model, TOKENS, 3, batch=2, seq=8, optimizer=optimizer, progress=False)
    assert optimizer.step_count == 0  # was 1


def test_adamw_with_edge_betas_matches_pytorch_over_several_steps():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 2e-5)):
        for shape in ((), (0, 3), (3, 4)):
            for betas in ((0.0, 0.0), (0.9, 0.95), (0.999999, 0.9999999)):
                w0 = rng.standard_normal(shape).astype(dtype)
                params = {"w": w0.copy()}
                optimizer = AdamW(params, lr=0.1, betas=betas, weight_decay=0.1)
                w, g = cl.variable("w", shape, dtype), cl.variable("g", shape, dtype)
                run = cl.Executor(optimizer.update_nodes({"w": w}, {"w": g}))
                t = torch.tensor(w0.copy(), requires_grad=True)
                reference = torch.optim.AdamW([t], lr=0.1, betas=betas, weight_decay=0.1)
                for _ in range(3):
                    gradient = rng.standard_normal(shape).astype(dtype)
                    feed = {w: params["w"], g: gradient, **optimizer.feed()}
                    optimizer.write_back(params, run.run(feed))
                    t.grad = torch.tensor(gradient)
                    reference.step()
                    np.testing.assert_allclose(params["w"], t.detach().numpy(), rtol=rtol,
                                               atol=1e-7, err_msg=f"{shape} {betas}")  # fmt: skip
