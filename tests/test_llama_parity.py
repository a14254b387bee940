"""Our Llama against Hugging Face's LlamaForCausalLM: logits, loss and every gradient.

Built offline from a config (no download), initialised with std 0.2 (at the usual 0.02
convention bugs hide below 1e-2) and with random norm weights, then copied in with
``load_hf_state_dict``. Runs with the ``oracle`` extra (torch, transformers)."""

import numpy as np
import pytest

from course_lib.models import Llama, LlamaConfig, load_hf_state_dict

torch = pytest.importorskip("torch", reason="the oracle extra (PyTorch) is not installed")
transformers = pytest.importorskip(
    "transformers", reason="the oracle extra (transformers) is not installed"
)
pytestmark = pytest.mark.oracle

CONFIGS = {
    "gqa": LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, vocab_size=64,
                       max_seq_len=16, rope_theta=500.0, norm_eps=1e-5),
    "mha": LlamaConfig(dim=24, n_layers=2, n_heads=3, n_kv_heads=3, ffn_dim=40, vocab_size=50,
                       max_seq_len=16),
    "mqa": LlamaConfig(dim=32, n_layers=1, n_heads=4, n_kv_heads=1, ffn_dim=64, vocab_size=40,
                       max_seq_len=16, norm_eps=1e-6),
}  # fmt: skip


def hf_model(config: LlamaConfig, seed: int):
    hf_config = transformers.LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.dim,
        intermediate_size=config.ffn_dim,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads,
        max_position_embeddings=config.max_seq_len,
        rms_norm_eps=config.norm_eps,
        rope_theta=config.rope_theta,
        initializer_range=0.2,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(hf_config).double()
    with torch.no_grad():  # norm weights start at 1; make them random so they are tested
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.2 * torch.randn_like(param))
    return model


def relative(ours, theirs):
    return np.linalg.norm(ours - theirs) / np.linalg.norm(theirs)


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_logits_loss_and_gradients_match_hugging_face(kind):
    config = CONFIGS[kind]
    hf = hf_model(config, seed=1)
    ours = load_hf_state_dict(Llama(config, dtype=np.float64), hf.state_dict())
    tokens = np.random.default_rng(2).integers(0, config.vocab_size, (3, 11))

    t_tokens = torch.tensor(tokens)
    out = hf(input_ids=t_tokens, labels=t_tokens)
    out.loss.backward()
    logits = ours.logits(tokens)
    loss, grads = ours.loss_and_grads(tokens)

    assert relative(logits, out.logits.detach().numpy()) <= 1e-4
    assert abs(loss - out.loss.item()) <= 1e-5
    named = dict(hf.named_parameters())
    assert set(grads) == set(named)
    for name, g in grads.items():
        assert relative(g, named[name].grad.numpy()) <= 1e-4, name


def test_float32_model_matches_too():
    config = CONFIGS["gqa"]
    hf = hf_model(config, seed=3).float()
    ours = load_hf_state_dict(Llama(config), hf.state_dict())
    tokens = np.random.default_rng(4).integers(0, config.vocab_size, (2, 9))
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor(tokens)).logits.numpy()
    logits = ours.logits(tokens)
    assert logits.dtype == np.float32
    assert relative(logits, theirs) <= 1e-4


def test_bfloat16_state_dict_is_widened_and_inv_freq_buffers_are_ignored():
    config = CONFIGS["mqa"]
    state = {k: v.to(torch.bfloat16) for k, v in hf_model(config, seed=5).state_dict().items()}
    state["model.rotary_emb.inv_freq"] = torch.ones(config.head_dim // 2)
    model = load_hf_state_dict(Llama(config), state)
    name = "model.layers.0.mlp.up_proj.weight"
    assert model.params[name].dtype == np.float32
    np.testing.assert_array_equal(model.params[name], state[name].float().numpy())
