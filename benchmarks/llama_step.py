"""One training step (forward + backward + AdamW) of a LLaMA: course_lib vs PyTorch.

``--model tiny``: LlamaConfig.tiny() (dim 256, 4 layers, 8 heads, 4 kv heads, ffn 688, vocab
256), batch 16, seq 128; ``--model gpu``: dim 1024, 8 layers, 16/8 heads, ffn 2816, vocab
8192, batch 8, seq 512. Float32; on the CPU both with the same thread count (``--threads``
caps PyTorch's pool and, through threadpoolctl, NumPy's BLAS and any OpenMP pool); with
``--device gpu`` both on the same GPU (CuPy and CUDA PyTorch, TF32 off). PyTorch starts
from course_lib's weights and steps with its AdamW hyper-parameters (PyTorch's fused AdamW,
and on the CPU its GQA attention without copied kv heads: its fastest eager forms), so both
take the same steps: after the timing one more step of each must give the same loss
(:func:`same_losses`), or the run stops. Alternating blocks of steps (the first step of each
block is a warm-up: worker threads of the other library spin for a while after its last
call), medians; each step ends by reading the loss, so GPU work is finished when the clock
stops. Beside the ratio of the medians, the median of each round's ratio of block medians
(``perf.ratio_by_rounds``: a drift of the machine's speed between rounds moves it less).
``--cpu-time`` (one thread, CPU) times by the process's CPU time instead of the wall clock:
on a shared machine another process's time on the core is then not counted.
Run: ``.venv/bin/python benchmarks/llama_step.py [--device gpu] [--model gpu]`` (needs the
``oracle`` extra: PyTorch and threadpoolctl). Targets (:func:`target`): CPU ratio <= 1.0 on
1 thread, <= 1.2 on 2, <= 1.5 on more; GPU <= 3 for tiny (launch-bound), <= 1.5 for the gpu
model. ``--device strict`` runs course_lib on the strict
stand-in device (a check that the step runs there, not a speed). ``--profile`` (CPU) then
prints where a step's time goes by op family at 1 and ``--threads`` threads, course_lib's ops
timed inside real runs of the step (``Executor.seconds_by_node``) beside PyTorch's profiler
(``step_profile.py``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
from step_profile import course_lib_seconds, profile_table, torch_seconds
from threadpoolctl import threadpool_limits

import course_lib as cl
from course_lib.backend import to_numpy
from course_lib.models import Llama, LlamaConfig
from course_lib.models.optim import AdamW
from course_lib.models.train import training_step
from course_lib.perf import blocked_medians, blocked_times, pooled_medians, ratio_by_rounds

MODELS = {
    "tiny": (LlamaConfig.tiny(), 16, 128),
    "gpu": (LlamaConfig(dim=1024, n_layers=8, n_heads=16, n_kv_heads=8, ffn_dim=2816,
                        vocab_size=8192, max_seq_len=512), 8, 512),
}  # fmt: skip
LOSS_RTOL = 1e-4  # both sides' losses after the timed steps: measured within 2e-7 on the CPU


def course_lib_step(config: LlamaConfig, tokens: np.ndarray):
    model = Llama(config, seed=0)  # on the current device (cl.set_device before)
    optimizer = AdamW(model.params, lr=1e-4)
    run = training_step(model, optimizer, *tokens.shape)  # built once, outside the timing
    graph = model.forward_graph(*tokens.shape)

    def feed():
        values = model.feed(graph, tokens)
        values.update(optimizer.feed())
        return values

    def step():
        loss, *new_values = run.run(feed())
        optimizer.write_back(model.params, new_values)
        return float(loss)  # waits for the device

    step.run, step.feed = run, feed  # what --profile times, op by op inside its runs
    step.model, step.optimizer = model, optimizer  # where PyTorch's copy starts
    return step


def torch_step(config: LlamaConfig, tokens: np.ndarray, like, device: str = "cpu"):
    """The same model in plain PyTorch (nn.Linear without biases, RMSNorm, half-split RoPE,
    causal GQA through scaled_dot_product_attention, SwiGLU), its parameters under Hugging
    Face's names and loaded from ``like.model`` (course_lib's step, before its first run: the
    same weights, untied, strictly the same names and shapes), trained by torch.optim.AdamW
    with ``like.optimizer``'s hyper-parameters, fused (PyTorch's fastest on either device)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    c, d = config, config.head_dim
    where = "cuda" if device == "gpu" else "cpu"
    # the CPU's flash kernel reads each kv head for its group; CUDA's runs float16/bfloat16
    # only, so float32 on a GPU copies the kv heads for the memory-efficient kernel
    gqa = where == "cpu"
    inv_freq = c.rope_theta ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = torch.outer(torch.arange(c.max_seq_len, dtype=torch.float32), inv_freq)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)

    def rope(x):  # x (B, heads, T, d)
        t = x.shape[-2]
        rotated = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
        return x * cos[:t] + rotated * sin[:t]

    def linears(**shapes):
        return nn.ModuleDict({n: nn.Linear(i, o, bias=False) for n, (o, i) in shapes.items()})

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            q, kv = c.n_heads * d, c.n_kv_heads * d
            self.self_attn = linears(q_proj=(q, c.dim), k_proj=(kv, c.dim), v_proj=(kv, c.dim),
                                     o_proj=(c.dim, q))  # fmt: skip
            self.mlp = linears(gate_proj=(c.ffn_dim, c.dim), up_proj=(c.ffn_dim, c.dim),
                               down_proj=(c.dim, c.ffn_dim))  # fmt: skip
            self.input_layernorm = nn.RMSNorm(c.dim, eps=c.norm_eps)
            self.post_attention_layernorm = nn.RMSNorm(c.dim, eps=c.norm_eps)

        def forward(self, h):
            (b, t, _), attn, mlp = h.shape, self.self_attn, self.mlp
            a = self.input_layernorm(h)
            q = rope(attn.q_proj(a).view(b, t, c.n_heads, d).transpose(1, 2))
            k = rope(attn.k_proj(a).view(b, t, c.n_kv_heads, d).transpose(1, 2))
            v = attn.v_proj(a).view(b, t, c.n_kv_heads, d).transpose(1, 2)
            if not gqa:
                k, v = k.repeat_interleave(c.kv_groups, 1), v.repeat_interleave(c.kv_groups, 1)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
            h = h + attn.o_proj(out.transpose(1, 2).reshape(b, t, -1))
            m = self.post_attention_layernorm(h)
            return h + mlp.down_proj(F.silu(mlp.gate_proj(m)) * mlp.up_proj(m))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = nn.ModuleDict({
                "embed_tokens": nn.Embedding(c.vocab_size, c.dim),
                "layers": nn.ModuleList(Block() for _ in range(c.n_layers)),
                "norm": nn.RMSNorm(c.dim, eps=c.norm_eps),
            })  # fmt: skip
            self.lm_head = nn.Linear(c.dim, c.vocab_size, bias=False)

        def forward(self, x):
            h = self.model.embed_tokens(x)
            for block in self.model.layers:
                h = block(h)
            return self.lm_head(self.model.norm(h))

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # FP32
    cos, sin = cos.to(where), sin.to(where)
    model = Model()
    model.load_state_dict({n: torch.tensor(to_numpy(a)) for n, a in like.model.params.items()})
    model.to(where)
    o = like.optimizer
    optimizer = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=o.betas, eps=o.eps,
                                  weight_decay=o.weight_decay, fused=True)  # fmt: skip
    x = torch.from_numpy(tokens).to(where)

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
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny")
    parser.add_argument("--device", choices=["cpu", "gpu", "strict"], default="cpu")
    parser.add_argument("--batch", type=int, help="default: the model's (16 tiny, 8 gpu)")
    parser.add_argument("--seq", type=int, help="default: the model's (128 tiny, 512 gpu)")
    parser.add_argument("--rounds", type=int, default=3, help="blocks per library")
    parser.add_argument("--per-block", type=int, default=3, help="timed steps per block")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--cpu-time", action="store_true",
                        help="time each step by this process's CPU time, not the wall clock "
                             "(one thread only: time another process takes is not counted)")
    parser.add_argument("--profile", action="store_true",
                        help="also print each op family's time at 1 and --threads threads")
    args = parser.parse_args()
    if args.cpu_time and (args.threads != 1 or args.device != "cpu"):
        parser.error("--cpu-time needs --threads 1 on the CPU (it sums every thread's time)")
    config, batch, seq = MODELS[args.model]
    batch, seq = args.batch or batch, args.seq or seq
    cl.set_device(args.device)  # a DeviceError says why when there is no GPU
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, (batch, seq))
    fns = {"course_lib": course_lib_step(config, tokens)}
    try:
        import torch

        torch.set_num_threads(args.threads)
        if args.device == "gpu" and not torch.cuda.is_available():
            print("this PyTorch build has no CUDA: showing course_lib only")
        elif args.device != "strict":
            fns["PyTorch"] = torch_step(config, tokens, fns["course_lib"], args.device)
    except ImportError:
        print("PyTorch is not installed (pip install -e '.[oracle]'); showing course_lib only")
    with threadpool_limits(limits=args.threads):  # NumPy's OpenBLAS would use every core
        clock = time.process_time if args.cpu_time else time.perf_counter
        blocks = blocked_times(fns, rounds=args.rounds, per_block=args.per_block, clock=clock)
        losses = same_losses(fns)
    medians = pooled_medians(blocks)
    steps = args.rounds * args.per_block
    where = cl.describe_device() if args.device != "cpu" else (
        f"CPU, {args.threads} thread{'s' if args.threads != 1 else ''}")
    print(
        f"{args.model} LLaMA training step (forward + backward + AdamW), batch {batch}, "
        f"seq {seq}, float32, {where}, median of {steps} steps each"
        + (" (CPU time)" if args.cpu_time else "")
    )
    for name, seconds in medians.items():
        print(f"  {name:12s} {seconds * 1e3:8.1f} ms")
    if "PyTorch" in medians:
        ratio = medians["course_lib"] / medians["PyTorch"]
        by_rounds = ratio_by_rounds(blocks["course_lib"], blocks["PyTorch"])
        print(f"  ratio course_lib/PyTorch = {ratio:.2f}  (target <= {target(args)}); "
              f"round by round {by_rounds:.2f} (the median of the {args.rounds} rounds' ratios)")
    print(losses)
    if args.profile and args.device == "cpu":
        for threads in sorted({1, args.threads}):
            print(profile_at(threads, fns, args.per_block))


def same_losses(fns: dict) -> str:
    """One more step of each library, which have all run the same steps on the same tokens
    from the same weights: a line with their losses, or SystemExit when they differ by more
    than :data:`LOSS_RTOL` (then the two do not compute the same step; one step of AdamW
    changes the loss by about 1 %)."""
    losses = {name: fn() for name, fn in fns.items()}
    line = "  loss at the next step: " + ", ".join(f"{n} {v:.6f}" for n, v in losses.items())
    if len(losses) == 2 and not math.isclose(*losses.values(), rel_tol=LOSS_RTOL):
        raise SystemExit(f"{line}: they differ by more than {LOSS_RTOL:g} (relative), so the "
                         "two libraries do not compute the same training step")  # fmt: skip
    return line


def target(args) -> float:
    """The ratio course_lib/PyTorch to reach: on the CPU 1.0 on one thread, 1.2 on two, 1.5 on
    more (issue 25); on a GPU 3 for the launch-bound tiny model, 1.5 for the gpu model."""
    if args.device == "cpu":
        return {1: 1.0, 2: 1.2}.get(args.threads, 1.5)
    return 3.0 if args.model == "tiny" else 1.5


def profile_at(threads: int, fns: dict, per_block: int) -> str:
    """The family table (``step_profile``) at ``threads`` threads, with the step medians."""
    torch = sys.modules.get("torch")  # imported by main when PyTorch is installed
    previous = torch.get_num_threads() if torch else None
    if torch:
        torch.set_num_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            medians = blocked_medians(fns, rounds=1, per_block=per_block)
            step = fns["course_lib"]
            by_family = {"course_lib": course_lib_seconds(step.run, step.feed())}
            if "PyTorch" in fns:
                by_family["PyTorch"] = torch_seconds(fns["PyTorch"])
    finally:
        if torch:
            torch.set_num_threads(previous)
    return profile_table(threads, medians, by_family)


if __name__ == "__main__":
    main()
