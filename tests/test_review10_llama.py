"""Review 10 of the LLaMA model: loading Hugging Face weights (torch dtypes NumPy lacks,
course_lib tensors, keys that are no strings), the q/k permutation on torch tensors, the
config's RoPE check, training's checks of its text, and parity with Hugging Face and with
PyTorch's AdamW (a float64 reference written out in torch, no download)."""

import numpy as np
import pytest

import course_lib as cl
from conftest import oracle_import
from course_lib.models import Llama, LlamaConfig, load_hf_state_dict
from course_lib.models.corpus import random_windows
from course_lib.models.llama import interleaved_to_half_split
from course_lib.models.optim import AdamW
from course_lib.models.train import held_out_loss, train
from course_lib.runtime import Tensor

SMALL = LlamaConfig(dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=8, vocab_size=11,
                    max_seq_len=8)  # fmt: skip


def torch_state_dict(torch, model):
    return {name: torch.tensor(a.copy()) for name, a in model.params.items()}


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "bfloat16"])
def test_a_state_dict_of_a_float_dtype_numpy_lacks_is_widened(dtype):
    torch = oracle_import("torch")
    source = Llama(SMALL, seed=1, init_std=0.5)
    state = {n: t.to(getattr(torch, dtype)) for n, t in torch_state_dict(torch, source).items()}
    model = load_hf_state_dict(Llama(SMALL), state)
    for name, tensor in state.items():
        np.testing.assert_array_equal(model.params[name], tensor.float().numpy())


def test_a_state_dict_of_course_lib_tensors_loads():
    source = Llama(SMALL, seed=1)
    model = load_hf_state_dict(Llama(SMALL), {n: Tensor(a) for n, a in source.params.items()})
    for name, array in source.params.items():
        np.testing.assert_array_equal(model.params[name], array)


def test_a_key_that_is_no_string_is_named_as_unexpected():
    state = {**Llama(SMALL).params, 3: np.zeros(2)}
    with pytest.raises(cl.FeedError, match=r"unexpected \[3\]"):
        load_hf_state_dict(Llama(SMALL), state)


@pytest.mark.oracle
@pytest.mark.parametrize("kind", ["bfloat16", "requires_grad"])
def test_interleaved_to_half_split_takes_torch_tensors_as_hugging_face_permutes(kind):
    torch = oracle_import("torch")
    n_heads, d, dim = 3, 6, 5
    weight = torch.randn(n_heads * d, dim, dtype=torch.float64)
    # convert_llama_weights_to_hf.py's permute
    expected = weight.view(n_heads, d // 2, 2, dim).transpose(1, 2).reshape(n_heads * d, dim)
    if kind == "bfloat16":
        weight, expected = weight.bfloat16(), expected.bfloat16().float()
    else:
        weight = weight.clone().requires_grad_(True)
    out = interleaved_to_half_split(weight, n_heads)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, expected.detach().numpy())


def test_an_odd_head_dim_is_refused_for_rope_only():
    sizes = dict(dim=6, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=8, vocab_size=7,
                 max_seq_len=8)  # fmt: skip
    with pytest.raises(cl.ShapeError, match="head_dim=3 must be even for RoPE"):
        LlamaConfig(**sizes)
    model = Llama(LlamaConfig(**sizes, positions="sinusoidal"), dtype=np.float64, init_std=0.5)
    tokens = np.array([[1, 2, 3, 4, 5]])
    prefill, cache = model.decode(tokens[:, :3])
    step, _ = model.decode(tokens[:, 3:4], cache)
    np.testing.assert_allclose(np.concatenate([prefill, step], 1), model.logits(tokens[:, :4]),
                               rtol=1e-12, atol=1e-12)  # fmt: skip
    assert np.isfinite(model.loss(tokens))


@pytest.mark.parametrize("which", ["tokens", "validation"])
def test_train_names_the_text_too_short_for_a_window(which):
    text = {"tokens": np.arange(50) % 11, "validation": np.arange(50) % 11}
    text[which] = text[which][:4]
    with pytest.raises(cl.ShapeError, match=f"train: {which}: need .* at least seq=6"):
        train(Llama(SMALL), text["tokens"], 1, batch=2, seq=6, progress=False,
              validation=text["validation"])  # fmt: skip
    with pytest.raises(cl.ShapeError, match="held_out_loss: tokens: need"):
        held_out_loss(Llama(SMALL), np.arange(4), 2, 6)


def test_held_out_batches_may_hold_more_tokens_than_the_text():
    model = Llama(SMALL, dtype=np.float64)
    text = np.arange(7) % 11
    rng = np.random.default_rng(0)
    windows = [random_windows(text, 8, 6, rng) for _ in range(4)]
    assert held_out_loss(model, text, 8, 6)() == pytest.approx(
        np.mean([model.loss(w) for w in windows]), rel=1e-12
    )


# -- oracles: Hugging Face's LlamaForCausalLM and a float64 LLaMA written out in torch -----
def reference_logits(torch, weights, config, tokens):
    """LLaMA in float64 torch from HF-named weights: RMSNorm, half-split RoPE, GQA by
    ``repeat_interleave``, SwiGLU (HF itself rounds the norms and softmax to float32)."""
    c, w = config, weights
    batch, seq = tokens.shape
    d = c.dim // c.n_heads
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * c.rope_theta ** (
        -torch.arange(0, d, 2, dtype=torch.float64) / d
    )
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)

    def norm(x, name):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + c.norm_eps) * w[name]

    def heads(x, name, n):
        return (x @ w[name].T).view(batch, seq, n, d).transpose(1, 2)

    def rotate(x):
        return x * cos + torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1) * sin

    mask = torch.full((seq, seq), float("-inf"), dtype=torch.float64).triu(1)
    h = w["model.embed_tokens.weight"][torch.as_tensor(tokens)]
    for i in range(c.n_layers):
        layer = f"model.layers.{i}"
        x = norm(h, f"{layer}.input_layernorm.weight")
        q, k, v = (heads(x, f"{layer}.self_attn.{n}_proj.weight", count) for n, count in
                   (("q", c.n_heads), ("k", c.n_kv_heads), ("v", c.n_kv_heads)))  # fmt: skip
        q, k = rotate(q), rotate(k)
        k, v = (a.repeat_interleave(c.n_heads // c.n_kv_heads, 1) for a in (k, v))
        probs = torch.softmax(q @ k.transpose(-1, -2) / d**0.5 + mask, -1)
        out = (probs @ v).transpose(1, 2).reshape(batch, seq, c.dim)
        h = h + out @ w[f"{layer}.self_attn.o_proj.weight"].T
        x = norm(h, f"{layer}.post_attention_layernorm.weight")
        gate, up = (x @ w[f"{layer}.mlp.{n}_proj.weight"].T for n in ("gate", "up"))
        h = h + (torch.nn.functional.silu(gate) * up) @ w[f"{layer}.mlp.down_proj.weight"].T
    return norm(h, "model.norm.weight") @ w["lm_head.weight"].T


def relative(ours, theirs):
    return np.linalg.norm(ours - theirs) / np.linalg.norm(theirs)


PARITY = {
    "gqa, untied, theta 77, eps 0.3": (
        LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=40, vocab_size=37,
                    max_seq_len=20, rope_theta=77.0, norm_eps=0.3), False),
    "mqa, tied, theta 1e6, eps 1e-2": (
        LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=1, ffn_dim=40, vocab_size=37,
                    max_seq_len=20, rope_theta=1e6, norm_eps=1e-2), True),
}  # fmt: skip


@pytest.mark.oracle
@pytest.mark.parametrize("kind", sorted(PARITY))
def test_logits_match_hugging_face_and_a_float64_reference(kind):
    torch, transformers = oracle_import("torch"), oracle_import("transformers")
    config, tied = PARITY[kind]
    hf_config = transformers.LlamaConfig(
        vocab_size=config.vocab_size, hidden_size=config.dim, intermediate_size=config.ffn_dim,
        num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads, max_position_embeddings=config.max_seq_len,
        rms_norm_eps=config.norm_eps, rope_theta=config.rope_theta, initializer_range=0.3,
        tie_word_embeddings=tied, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(hf_config).double()
    with torch.no_grad():
        for name, param in hf.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.3 * torch.randn_like(param))
    state = hf.state_dict()
    model = load_hf_state_dict(Llama(config, dtype=np.float64), state)
    tokens = np.random.default_rng(1).integers(0, config.vocab_size, (3, 17))
    with torch.no_grad():
        theirs = hf(torch.tensor(tokens)).logits.numpy()
        reference = reference_logits(torch, state, config, tokens).numpy()
    ours = model.logits(tokens)
    assert relative(reference, theirs) <= 1e-5  # the reference is Hugging Face's model
    # RoPE's cos/sin tables are float32 even in a float64 model (course_lib/ops/rope.py)
    assert relative(ours, reference) <= 1e-6
    model.params["lm_head.weight"][0] += 1.0  # trained apart: the tied twin stays
    assert not np.array_equal(model.params["lm_head.weight"],
                              model.params["model.embed_tokens.weight"])  # fmt: skip


@pytest.mark.oracle
def test_training_steps_match_torch_adamw_and_survive_a_pickle():
    import pickle  # noqa: PLC0415

    torch = oracle_import("torch")
    config = LlamaConfig(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=24,
                         vocab_size=13, max_seq_len=8, rope_theta=50.0, norm_eps=1e-3)  # fmt: skip
    model = Llama(config, dtype=np.float64, init_std=0.3, seed=3)
    weights = {n: torch.tensor(a.copy(), requires_grad=True) for n, a in model.params.items()}
    text = np.random.default_rng(1).integers(0, 13, 40)
    optimizer = AdamW(model.params, lr=3e-2, weight_decay=0.1)
    ours = train(model, text, 3, batch=3, seq=7, optimizer=optimizer, progress=False, seed=4)
    model, optimizer = pickle.loads(pickle.dumps((model, optimizer)))
    ours.losses += train(model, text, 3, batch=3, seq=7, optimizer=optimizer, progress=False,
                         seed=5).losses  # fmt: skip

    reference = torch.optim.AdamW(list(weights.values()), lr=3e-2, betas=(0.9, 0.95),
                                  eps=1e-8, weight_decay=0.1)  # fmt: skip
    losses = []
    for seed in (4, 5):
        rng = np.random.default_rng(seed)
        for _ in range(3):
            window = random_windows(text, 3, 7, rng)
            reference.zero_grad()
            logits = reference_logits(torch, weights, config, window)
            loss = torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, 13), torch.tensor(window[:, 1:]).reshape(-1)
            )
            loss.backward()
            reference.step()
            losses.append(loss.item())
    np.testing.assert_allclose(ours.losses, losses, rtol=1e-6)
    for name, weight in weights.items():
        np.testing.assert_allclose(model.params[name], weight.detach().numpy(), atol=1e-6)
