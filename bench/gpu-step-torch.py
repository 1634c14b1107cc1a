#!/usr/bin/python3
"""gpu-step-torch.py - the PyTorch side of bench/gpu-step.sh: one GPT-2 of
dstk's architecture (learned positions, pre-LayerNorm blocks, GELU in its
tanh form, embedding tied to the head, no dropout, biases everywhere, vocab
padded as dstk pads it) trained on random tokens with AdamW and gradient
clipping 1.0, as bench/gpu-step.sh configures ds-train, eagerly or under
torch.compile.  Not a test.

Usage: python3 bench/gpu-step-torch.py --layers L --hidden C --heads NH
         --vocab V --batch B --seq T [--warmup N] [--steps N]
         [--mode eager|compile] [--precision bf16|fp32] [--device cuda|cpu]

bf16 is autocast: fp32 master weights and optimizer states, matrix products
and attention in bf16 (dstk's bf16: fp32 master, a bf16 copy, bf16
activations).  fp32 runs with TF32 off, as dstk's cuda backend by default.
On cuda AdamW is fused=True (one kernel per step, as dstk's device step).
Timed steps run back to back with one synchronisation at each end; warm-up
steps (the first of which compiles under --mode compile) are not timed, and
the compile time (the first step's wall time less a timed step's) is
printed.  Prints one "key value" line per figure:
  torch_version, device_name, params, tokens_per_step, warmup, steps,
  first_step_s, compile_s (compile mode), step_ms, tokens_per_s, loss,
  peak_alloc_bytes (torch.cuda.max_memory_allocated over the timed steps)
  and peak_reserved_bytes (torch.cuda.max_memory_reserved) on cuda,
  peak_rss_bytes (the process's) on cpu, and
  "unavailable REASON" (exit 3) where the mode cannot run here.
"""
import argparse
import math
import resource
import sys
import time

import torch
import torch.nn.functional as Fn


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
        if hasattr(Fn, "scaled_dot_product_attention"):
            y = Fn.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:   # torch < 2.0: the unfused product, as lib/model/gpt.c's cpu path
            s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = torch.softmax(s, -1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(Fn.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, L, C, NH, V, T):
        super().__init__()
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = torch.nn.Embedding(T, C)
        self.h = torch.nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = torch.nn.LayerNorm(C)
        for p in self.parameters():   # GPT-2's init (init_method_std 0.02), biases 0
            if p.dim() > 1:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, tok, tgt):
        T = tok.shape[1]
        x = self.wte(tok) + self.wpe(torch.arange(T, device=tok.device))
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.T   # tied head
        return Fn.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.view(-1))


def main():
    ap = argparse.ArgumentParser(description="PyTorch side of bench/gpu-step.sh")
    for k in ("layers", "hidden", "heads", "vocab", "batch", "seq"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--mode", choices=("eager", "compile"), default="eager")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    a = ap.parse_args()
    if a.warmup < 1 or a.steps < 1:
        ap.error("--warmup and --steps must be >= 1")
    print("torch_version %s" % torch.__version__)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("unavailable no CUDA device answers torch")
        return 3
    if a.mode == "compile" and not hasattr(torch, "compile"):
        print("unavailable torch.compile needs torch >= 2.0 (this is %s)" % torch.__version__)
        return 3
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    print("device_name %s" % (torch.cuda.get_device_name(dev) if cuda else "cpu"))
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1234)
    model = GPT(a.layers, a.hidden, a.heads, a.vocab, a.seq).to(dev)
    print("params %d" % sum(p.numel() for p in model.parameters()))
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                fused=cuda)
    except (TypeError, RuntimeError):   # torch without fused AdamW
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    fwd = torch.compile(model) if a.mode == "compile" else model
    g = torch.Generator(device="cpu").manual_seed(1)
    tok = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(dev)
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        if a.precision == "bf16":
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                loss = fwd(tok, tgt)
        else:
            loss = fwd(tok, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    sync()
    t0 = time.perf_counter()
    loss = step()
    sync()
    first = time.perf_counter() - t0
    for _ in range(a.warmup - 1):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    dt = (time.perf_counter() - t0) / a.steps
    n = a.batch * a.seq
    print("tokens_per_step %d\nwarmup %d\nsteps %d" % (n, a.warmup, a.steps))
    print("first_step_s %.3f" % first)
    if a.mode == "compile":
        print("compile_s %.3f" % max(first - dt, 0.0))
    print("step_ms %.3f\ntokens_per_s %.1f\nloss %.6f" % (1e3 * dt, n / dt, loss.item()))
    if cuda:
        print("peak_alloc_bytes %d" % torch.cuda.max_memory_allocated(dev))
        print("peak_reserved_bytes %d" % torch.cuda.max_memory_reserved(dev))
    else:
        print("peak_rss_bytes %d" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
    return 0


if __name__ == "__main__":
    sys.exit(main())
