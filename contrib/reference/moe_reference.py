#!/usr/bin/python3
"""moe_reference.py - PyTorch reference fixture for dstk's MoE layer (issue 23).

Computes one Mixture-of-Experts MLP the way DeepSpeed's MoE layer does
(deepspeed/moe/sharded_moe.py: TopKGate, top1gating, top2gating, MOELayer's
dense dispatch/combine; deepspeed/moe/layer.py: use_residual), written out
here in plain torch (float64) with DeepSpeed's einsum formulation: the
one-hot masks, cumsum locations, capacity, the dense combine_weights
tensor [tokens, experts, capacity] and the dispatch through it.  Randomness
(Jitter multipliers, RSample / second-expert Gumbel noise, RTS uniforms) is
drawn here with torch's RNG and stored in the fixture, so the C test feeds
the same draws (struct ds_moe_rand's override) and compares the math.

Each case is one group of tests/data/ref_moe.h5 (tests/unit/test_moe.c):
    attributes   N C F E k act train capacity_factor eval_capacity_factor
                 min_capacity drop_tokens use_rts noisy (0 None 1 Jitter 2 RSample)
                 top2_2nd_expert_sampling use_residual daux use_bias_in_mlp
    x (N,C), dout (N,C), jitter (N,C), gumbel (N,E), rts (N,E)
    params/<name>  gate (E,C), expert<e>_fcw (F2,C), expert<e>_fcb (F2; not with use_bias_in_mlp 0),
                   expert<e>_pw (C,F), fcw, fcb, pw, coefw (2,C), coefb (2)
    out (N,C), aux [1], capacity [1] (int), route (k,N) int (expert, -1 dropped)
    grads/<name>, dx (N,C): of L = sum(out * dout) + daux * aux

Usage: /usr/bin/python3 contrib/reference/moe_reference.py [OUTDIR]
Needs Debian's python3-torch and python3-h5py.
"""
import math
import os
import sys

import h5py
import numpy as np
import torch

ACT = {"gelu": 0, "geglu": 1, "swiglu": 2}
NOISE = {"None": 0, "Jitter": 1, "RSample": 2}

CASES = {
    # top-1, tokens dropped by capacity among random token selection, RSample noise
    "top1_rts_rsample": dict(N=48, C=16, F=24, E=4, k=1, act="gelu", train=1, cf=1.0, ecf=1.0, min_cap=4,
                             drop=1, rts=1, noisy="RSample", sampling=1, residual=0, daux=0.37, seed=11),
    # top-1 without RTS: the first tokens keep their slots; Jitter on the gate's input; swiglu experts
    "top1_norts_jitter": dict(N=40, C=16, F=12, E=4, k=1, act="swiglu", train=1, cf=0.75, ecf=1.0, min_cap=2,
                              drop=1, rts=0, noisy="Jitter", sampling=1, residual=0, daux=0.5, seed=12),
    # top-2 with second-expert sampling and dropping, geglu experts
    "top2_drop": dict(N=40, C=16, F=12, E=4, k=2, act="geglu", train=1, cf=0.75, ecf=1.0, min_cap=2,
                      drop=1, rts=1, noisy="None", sampling=1, residual=0, daux=0.21, seed=13),
    # PR-MoE: top-1, no dropping (capacity = the largest load), residual MLP and coefficient
    "prmoe_nodrop": dict(N=32, C=16, F=24, E=4, k=1, act="gelu", train=1, cf=1.0, ecf=1.0, min_cap=4,
                         drop=0, rts=1, noisy="None", sampling=1, residual=1, daux=0.1, seed=14),
    # top-2 at evaluation: eval capacity factor, no Jitter, argmax second choice, residual
    # top-2 with bias-free experts (use_bias_in_mlp false, Mixtral's), swiglu, dropping
    "top2_nobias": dict(N=36, C=16, F=12, E=4, k=2, act="swiglu", train=1, cf=1.0, ecf=1.0, min_cap=2,
                        drop=1, rts=1, noisy="None", sampling=1, residual=0, daux=0.25, seed=16, bias=0),
    "top2_eval_residual": dict(N=32, C=16, F=12, E=4, k=2, act="swiglu", train=0, cf=1.0, ecf=0.5, min_cap=1,
                               drop=1, rts=1, noisy="Jitter", sampling=0, residual=1, daux=0.3, seed=15),
}

DT = torch.float64


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def mlp(x, fcw, fcb, pw, act, F):
    """The model's MLP without its output bias (DeepSpeed drops it)."""
    h = x @ fcw.t() + (fcb if fcb is not None else 0)
    if act == "gelu":
        a = gelu_tanh(h)
    else:
        a1, b1 = h[:, :F], h[:, F:]
        a = (gelu_tanh(a1) if act == "geglu" else torch.nn.functional.silu(a1)) * b1
    return a @ pw.t()


def capacity(N, E, factor, min_cap):
    # _capacity: ceil((tokens / experts) * factor) with factor a float32 tensor
    cap = math.ceil(float(np.float32(N / E) * np.float32(factor)))
    return max(cap, min_cap)


def gate(c, x, P, noise):
    """DeepSpeed's TopKGate + top1gating/top2gating: (l_aux, combine_weights [N,E,cap], cap, route)."""
    N, E, k = c["N"], c["E"], c["k"]
    xg = x * noise["jitter"] if (c["noisy"] == "Jitter" and c["train"]) else x
    logits = xg @ P["gate"].t()
    gates = torch.softmax(logits, dim=1)
    cf = c["cf"] if c["train"] else c["ecf"]
    if k == 1:
        rsample = c["noisy"] == "RSample" and c["train"]
        idx1 = torch.argmax(logits + noise["gumbel"] if rsample else gates, dim=1)
        mask1 = torch.nn.functional.one_hot(idx1, E).to(DT)
        counts = mask1.sum(0)
        if c["drop"]:
            cap = capacity(N, E, cf, c["min_cap"])
        else:
            cap = min(int(counts.max()), N)
        me, ce = gates.mean(0), mask1.mean(0)
        l_aux = (me * ce).sum() * E
        mask_rand = mask1 * noise["rts"] if c["rts"] else mask1
        top = torch.topk(mask_rand, k=min(cap, N), dim=0)[1]
        keep = torch.zeros_like(mask1).scatter_(0, top, 1)
        if not c["rts"]:
            # Without RTS DeepSpeed runs torch.topk over the 0/1 mask, whose
            # choice among equal values is unspecified (torch 1.13 on CPU
            # keeps a scattered set; CUDA another): dstk keeps each expert's
            # first tokens (GShard's order, DeepSpeed's topkgating
            # drop_policy "position"), and so does this reference
            keep = torch.zeros_like(mask1)
            for e in range(E):
                rows = [i for i in range(N) if idx1[i] == e][:cap]
                keep[rows, e] = 1
        mask1 = mask1 * keep
        loc1 = torch.cumsum(mask1, 0) - 1
        loc1_s = (loc1 * mask1).sum(1).long()
        g = gates * mask1
        comb = torch.einsum("se,sc->sec", g, torch.nn.functional.one_hot(loc1_s, cap).to(DT))
        route = torch.where(mask1.sum(1) > 0, idx1, torch.full_like(idx1, -1)).unsqueeze(0)
        return l_aux, comb, cap, route
    idx1 = torch.argmax(gates, dim=1)
    mask1 = torch.nn.functional.one_hot(idx1, E).to(DT)
    lg = logits + noise["gumbel"] if c["sampling"] else logits
    idx2 = torch.argmax(lg.masked_fill(mask1.bool(), float("-inf")), dim=1)
    mask2 = torch.nn.functional.one_hot(idx2, E).to(DT)
    loc1 = torch.cumsum(mask1, 0) - 1
    loc2 = torch.cumsum(mask2, 0) - 1 + mask1.sum(0, keepdim=True)
    me, ce = gates.mean(0), mask1.mean(0)
    l_aux = (me * ce).mean() * E * E
    if c["drop"]:
        cap = capacity(N, E, cf * 2, c["min_cap"])
        mask1 = mask1 * (loc1 < cap)
        mask2 = mask2 * (loc2 < cap)
    else:
        cap = int((mask1 + mask2).sum(0).max())
    loc1_s = (loc1 * mask1).sum(1).long()
    loc2_s = (loc2 * mask2).sum(1).long()
    g1 = (gates * mask1).sum(1)
    g2 = (gates * mask2).sum(1)
    den = torch.clamp(g1 + g2, min=np.finfo(np.float32).eps)
    g1, g2 = g1 / den, g2 / den
    oh = lambda l: torch.nn.functional.one_hot(l, cap).to(DT)
    comb = (torch.einsum("se,sc->sec", g1.unsqueeze(1) * mask1, oh(loc1_s)) +
            torch.einsum("se,sc->sec", g2.unsqueeze(1) * mask2, oh(loc2_s)))
    r1 = torch.where(mask1.sum(1) > 0, idx1, torch.full_like(idx1, -1))
    r2 = torch.where(mask2.sum(1) > 0, idx2, torch.full_like(idx2, -1))
    return l_aux, comb, cap, torch.stack([r1, r2])


def layer(c, x, P, noise):
    l_aux, comb, cap, route = gate(c, x, P, noise)
    dispatch = comb.bool().to(DT)
    disp_in = torch.einsum("sec,sm->ecm", dispatch, x)
    outs = [mlp(disp_in[e], P["expert%d_fcw" % e], P.get("expert%d_fcb" % e), P["expert%d_pw" % e], c["act"], c["F"])
            for e in range(c["E"])]
    out = torch.einsum("sec,ecm->sm", comb, torch.stack(outs))
    if c["residual"]:
        r = mlp(x, P["fcw"], P["fcb"], P["pw"], c["act"], c["F"])
        coef = torch.softmax(x @ P["coefw"].t() + P["coefb"], dim=-1)
        out = out * coef[:, 0:1] + r * coef[:, 1:]
    return out, l_aux, cap, route


def make(name, c, f):
    torch.manual_seed(c["seed"])
    N, C, F, E = c["N"], c["C"], c["F"], c["E"]
    F2 = F if c["act"] == "gelu" else 2 * F
    r32 = lambda *s, std=1.0: (torch.randn(*s) * std).to(torch.float32).to(DT)
    P = {"gate": r32(E, C, std=0.6)}
    for e in range(E):
        P["expert%d_fcw" % e] = r32(F2, C, std=1 / math.sqrt(C))
        if c.get("bias", 1):
            P["expert%d_fcb" % e] = r32(F2, std=0.1)
        P["expert%d_pw" % e] = r32(C, F, std=1 / math.sqrt(F))
    if c["residual"]:
        P["fcw"] = r32(F2, C, std=1 / math.sqrt(C))
        P["fcb"] = r32(F2, std=0.1)
        P["pw"] = r32(C, F, std=1 / math.sqrt(F))
        P["coefw"] = r32(2, C, std=0.3)
        P["coefb"] = r32(2, std=0.1)
    x = r32(N, C)
    dout = r32(N, C)
    noise = {"jitter": (0.99 + 0.02 * torch.rand(N, C)).to(torch.float32).to(DT),
             "gumbel": (-torch.log(-torch.log(torch.rand(N, E).clamp(1e-7, 1 - 1e-7)))).to(torch.float32).to(DT),
             "rts": torch.rand(N, E).to(torch.float32).to(DT)}
    for v in P.values():
        v.requires_grad_(True)
    x.requires_grad_(True)
    out, l_aux, cap, route = layer(c, x, P, noise)
    loss = (out * dout).sum() + c["daux"] * l_aux
    loss.backward()
    # the routing must not sit on a float32 knife edge
    with torch.no_grad():
        xg = x * noise["jitter"] if (c["noisy"] == "Jitter" and c["train"]) else x
        lg = torch.sort(xg @ P["gate"].t(), dim=1)[0]
        assert float((lg[:, -1] - lg[:, -2]).min()) > 1e-4, "%s: near-tied gate logits; change the seed" % name
    g = f.create_group(name)
    for key, v in dict(N=N, C=C, F=F, E=E, k=c["k"], act=ACT[c["act"]], train=c["train"],
                       capacity_factor=c["cf"], eval_capacity_factor=c["ecf"], min_capacity=c["min_cap"],
                       drop_tokens=c["drop"], use_rts=c["rts"], noisy=NOISE[c["noisy"]],
                       top2_2nd_expert_sampling=c["sampling"], use_residual=c["residual"], daux=c["daux"],
                       use_bias_in_mlp=c.get("bias", 1)).items():
        g.attrs[key] = v
    f32 = lambda t: t.detach().to(torch.float32).numpy()
    g["x"], g["dout"] = f32(x), f32(dout)
    for k2, v in noise.items():
        g[k2] = f32(v)
    for k2, v in P.items():
        g["params/" + k2] = f32(v)
        g["grads/" + k2] = f32(v.grad)
    g["out"] = f32(out)
    g["aux"] = np.array([float(l_aux)], dtype=np.float32)
    g["capacity"] = np.array([cap], dtype=np.int32)
    g["route"] = route.to(torch.int32).numpy()
    g["dx"] = f32(x.grad)
    dropped = int((route < 0).sum())
    print("%s: capacity %d, %d of %d choices dropped, aux %.6f" % (name, cap, dropped, route.numel(), float(l_aux)))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data")
    path = os.path.join(out, "ref_moe.h5")
    with h5py.File(path, "w") as f:
        f.attrs["generator"] = "contrib/reference/moe_reference.py (torch %s)" % torch.__version__
        for name, c in CASES.items():
            make(name, c, f)
    print("wrote", path)


if __name__ == "__main__":
    main()
