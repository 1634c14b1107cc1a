#!/usr/bin/python3
"""gpt-step-torch.py - PyTorch baseline for bench/gpt-step: the same GPT-2
shapes, forward+backward ms/step and model GFLOP/s next to a 1024^3 matmul
ceiling measured by torch in the same run.  Not a test.

Usage: /usr/bin/python3 bench/gpt-step-torch.py [gpt2|tiny] [steps]
Threads: torch.get_num_threads() (set OMP_NUM_THREADS to compare with
bench/gpt-step at the same count).  Needs Debian's python3-torch.
"""
import math
import sys
import time

import torch
import torch.nn.functional as Fn

SHAPES = {"gpt2": (12, 768, 12, 50304, 4, 64), "tiny": (6, 384, 6, 256, 8, 128)}


class Block(torch.nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = torch.nn.LayerNorm(C)
        self.c_attn = torch.nn.Linear(C, 3 * C)
        self.c_proj = torch.nn.Linear(C, C)
        self.ln_2 = torch.nn.LayerNorm(C)
        self.c_fc = torch.nn.Linear(C, 4 * C)
        self.mlp_proj = torch.nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, -1)
        q, k, v = [z.view(B, T, self.NH, C // self.NH).transpose(1, 2) for z in (q, k, v)]
        y = Fn.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(Fn, "scaled_dot_product_attention") \
            else self._attn(q, k, v, T)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(Fn.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    @staticmethod
    def _attn(q, k, v, T):
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(s, -1) @ v


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    L, C, NH, V, B, T = SHAPES[name]
    torch.manual_seed(0)
    wte = torch.nn.Embedding(V, C)
    wpe = torch.nn.Embedding(1024, C)
    blocks = torch.nn.ModuleList([Block(C, NH) for _ in range(L)])
    ln_f = torch.nn.LayerNorm(C)
    params = list(wte.parameters()) + list(wpe.parameters()) + list(blocks.parameters()) + list(ln_f.parameters())
    nparam = sum(p.numel() for p in params)
    tok = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))

    def step():
        x = wte(tok) + wpe(torch.arange(T))
        for blk in blocks:
            x = blk(x)
        logits = ln_f(x) @ wte.weight.T
        loss = Fn.cross_entropy(logits.view(-1, V), tgt.view(-1))
        t1 = time.perf_counter()
        loss.backward()
        return t1

    a = torch.randn(1024, 1024)
    best_mm = 1e30
    for _ in range(10):
        t0 = time.perf_counter()
        a @ a
        best_mm = min(best_mm, time.perf_counter() - t0)
    ceil = 2 * 1024 ** 3 / best_mm / 1e9
    # model flops as lib/model/count: 6 * tokens * matmul params + attention matmuls, x3 for training
    N = B * T
    fwd = 2 * N * (L * 12 * C * C + V * C) + L * 2 * 2 * B * NH * T * T * (C // NH)
    tf = tb = 0.0
    best = 1e30
    for s in range(-1, steps):
        for p in params:
            p.grad = None
        t0 = time.perf_counter()
        t1 = step()
        t2 = time.perf_counter()
        if s < 0:
            continue
        tf += t1 - t0
        tb += t2 - t1
        best = min(best, t2 - t0)
    st = (tf + tb) / steps
    print("# gpt-step-torch: %s L=%d C=%d NH=%d V=%d B=%d T=%d params=%d threads=%d torch %s" %
          (name, L, C, NH, V, B, T, nparam, torch.get_num_threads(), torch.__version__))
    print("matmul_ceiling_gflops %.1f" % ceil)
    print("forward_ms %.2f\nbackward_ms %.2f\nstep_ms %.2f\nbest_step_ms %.2f" %
          (1e3 * tf / steps, 1e3 * tb / steps, 1e3 * st, 1e3 * best))
    print("tokens_per_s %.0f\nmodel_gflops %.1f\nfraction_of_sgemm %.3f" % (N / st, 3 * fwd / st / 1e9, 3 * fwd / st / 1e9 / ceil))
    print("best_model_gflops %.1f\nbest_fraction_of_sgemm %.3f" % (3 * fwd / best / 1e9, 3 * fwd / best / 1e9 / ceil))


if __name__ == "__main__":
    main()
