"""One training step (forward + backward + AdamW) of the tiny LLaMA: course_lib vs PyTorch.

LlamaConfig.tiny() (dim 256, 4 layers, 8 heads, 4 kv heads, ffn 688, vocab 256), batch 16,
seq 128, float32 on the CPU, both with the same thread count (``--threads`` caps PyTorch's
pool and, through threadpoolctl, NumPy's BLAS and any OpenMP pool), in alternating blocks
of steps (the first step of each block is a warm-up: BLAS and OpenMP worker threads of the
other library spin for a while after its last call), medians.
Run: ``.venv/bin/python benchmarks/llama_step.py`` (needs the ``oracle`` extra: PyTorch and
threadpoolctl). Target: ratio <= 1.5.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from threadpoolctl import threadpool_limits

from course_lib.models import Llama, LlamaConfig
from course_lib.models.optim import AdamW
from course_lib.models.train import training_step
from course_lib.perf import blocked_medians


def course_lib_step(config: LlamaConfig, tokens: np.ndarray):
    model = Llama(config, seed=0)
    optimizer = AdamW(model.params, lr=1e-4)
    run = training_step(model, optimizer, *tokens.shape)  # built once, outside the timing
    graph = model.forward_graph(*tokens.shape)

    def step():
        feed = model.feed(graph, tokens)
        feed.update(optimizer.feed())
        loss, *new_values = run.run(feed)
        optimizer.write_back(model.params, new_values)
        return loss

    return step


def torch_step(config: LlamaConfig, tokens: np.ndarray):
    """The same model in plain PyTorch (nn.Linear without biases, RMSNorm, half-split RoPE,
    causal GQA through scaled_dot_product_attention, SwiGLU) with torch.optim.AdamW."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    c, d = config, config.head_dim
    inv_freq = c.rope_theta ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = torch.outer(torch.arange(c.max_seq_len, dtype=torch.float32), inv_freq)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)

    def rope(x):  # x (B, heads, T, d)
        t = x.shape[-2]
        rotated = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
        return x * cos[:t] + rotated * sin[:t]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(c.dim, c.n_heads * d, bias=False)
            self.k = nn.Linear(c.dim, c.n_kv_heads * d, bias=False)
            self.v = nn.Linear(c.dim, c.n_kv_heads * d, bias=False)
            self.o = nn.Linear(c.n_heads * d, c.dim, bias=False)
            self.gate = nn.Linear(c.dim, c.ffn_dim, bias=False)
            self.up = nn.Linear(c.dim, c.ffn_dim, bias=False)
            self.down = nn.Linear(c.ffn_dim, c.dim, bias=False)
            self.norm1 = nn.RMSNorm(c.dim, eps=c.norm_eps)
            self.norm2 = nn.RMSNorm(c.dim, eps=c.norm_eps)

        def forward(self, h):
            b, t, _ = h.shape
            a = self.norm1(h)
            q = rope(self.q(a).view(b, t, c.n_heads, d).transpose(1, 2))
            k = rope(self.k(a).view(b, t, c.n_kv_heads, d).transpose(1, 2))
            v = self.v(a).view(b, t, c.n_kv_heads, d).transpose(1, 2)
            k = k.repeat_interleave(c.kv_groups, 1)
            v = v.repeat_interleave(c.kv_groups, 1)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = h + self.o(out.transpose(1, 2).reshape(b, t, -1))
            m = self.norm2(h)
            return h + self.down(F.silu(self.gate(m)) * self.up(m))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(c.vocab_size, c.dim)
            self.blocks = nn.ModuleList(Block() for _ in range(c.n_layers))
            self.norm = nn.RMSNorm(c.dim, eps=c.norm_eps)
            self.head = nn.Linear(c.dim, c.vocab_size, bias=False)

        def forward(self, x):
            h = self.embed(x)
            for block in self.blocks:
                h = block(h)
            return self.head(self.norm(h))

    torch.manual_seed(0)
    model = Model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95))
    x = torch.from_numpy(tokens)

    def step():
        logits = model(x)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, c.vocab_size), x[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3, help="blocks per library")
    parser.add_argument("--per-block", type=int, default=3, help="timed steps per block")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    config = LlamaConfig.tiny()
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, (args.batch, args.seq))
    fns = {"course_lib": course_lib_step(config, tokens)}
    try:
        import torch

        torch.set_num_threads(args.threads)
        fns["PyTorch"] = torch_step(config, tokens)
    except ImportError:
        print("PyTorch is not installed (pip install -e '.[oracle]'); showing course_lib only")
    with threadpool_limits(limits=args.threads):  # NumPy's OpenBLAS would use every core
        medians = blocked_medians(fns, rounds=args.rounds, per_block=args.per_block)
    steps = args.rounds * args.per_block
    print(
        f"tiny LLaMA training step (forward + backward + AdamW), batch {args.batch}, "
        f"seq {args.seq}, float32, {args.threads} thread{'s' if args.threads != 1 else ''}, "
        f"median of {steps} steps each"
    )
    for name, seconds in medians.items():
        print(f"  {name:12s} {seconds * 1e3:8.1f} ms")
    if "PyTorch" in medians:
        ratio = medians["course_lib"] / medians["PyTorch"]
        print(f"  ratio course_lib/PyTorch = {ratio:.2f}  (target <= 1.5)")


if __name__ == "__main__":
    main()
