#!/usr/bin/python3
"""gpt_reference.py - PyTorch reference fixtures for dstk's GPT model.

Builds the GPT of lib/model/gpt.h in plain torch (float64), with weights drawn
from torch's own RNG, runs one batch and writes into tests/data/ref_<name>.h5:
the config (attributes on /), inputs, every parameter, the logits of the real
vocabulary, the mean cross-entropy loss, every gradient and the parameters
after one torch.optim.AdamW step.  tests/unit/test_model.c loads the
parameters by name and compares; it never needs torch.

Usage: /usr/bin/python3 contrib/reference/gpt_reference.py [OUTDIR]
(default OUTDIR: tests/data next to this repository's contrib/).
Needs Debian's python3-torch and python3-h5py.
"""
import math
import os
import sys

import h5py
import numpy as np
import torch

# enums of lib/config/model.h
POS = {"learned": 0, "rotary": 1, "sinusoidal": 2}
NORM = {"layernorm": 0, "rmsnorm": 1}
ACT = {"gelu": 0, "geglu": 1, "swiglu": 2}

CONFIGS = {
    "gpt2": dict(num_layers=2, hidden_size=32, num_attention_heads=4, seq_length=16,
                 max_position_embeddings=32, vocab_size=100, make_vocab_size_divisible_by=128,
                 intermediate_size=128, pos_emb="learned", rotary_pct=1.0, rotary_emb_base=10000.0,
                 norm="layernorm", layernorm_epsilon=1e-5, rms_norm_epsilon=1e-8,
                 activation="gelu", no_weight_tying=0, gpt_j_residual=0, batch=2, seed=1234),
    "neox": dict(num_layers=2, hidden_size=32, num_attention_heads=4, seq_length=16,
                 max_position_embeddings=32, vocab_size=100, make_vocab_size_divisible_by=128,
                 intermediate_size=64, pos_emb="rotary", rotary_pct=0.5, rotary_emb_base=10000.0,
                 norm="rmsnorm", layernorm_epsilon=1e-5, rms_norm_epsilon=1e-8,
                 activation="swiglu", no_weight_tying=1, gpt_j_residual=1, batch=2, seed=4321),
}

ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)


def registry(c):
    """(name, shape, kind) in dstk's registry order; kind picks the test init."""
    C, L = c["hidden_size"], c["num_layers"]
    Vp = -(-c["vocab_size"] // c["make_vocab_size_divisible_by"]) * c["make_vocab_size_divisible_by"]
    F = c["intermediate_size"]
    F2 = F if c["activation"] == "gelu" else 2 * F
    ln = c["norm"] == "layernorm"
    t = [("transformer.wte.weight", (Vp, C), "emb")]
    if c["pos_emb"] == "learned":
        t.append(("transformer.wpe.weight", (c["max_position_embeddings"], C), "emb"))
    for i in range(L):
        p = "transformer.h.%d." % i

        def norm(n):
            t.append((p + n + ".weight", (C,), "normw"))
            if ln:
                t.append((p + n + ".bias", (C,), "bias"))

        def lin(n, o, k):
            t.append((p + n + ".weight", (o, k), "w"))
            t.append((p + n + ".bias", (o,), "bias"))
        norm("ln_1")
        lin("attn.c_attn", 3 * C, C)
        lin("attn.c_proj", C, C)
        norm("ln_2")
        lin("mlp.c_fc", F2, C)
        lin("mlp.c_proj", C, F)
    t.append(("transformer.ln_f.weight", (C,), "normw"))
    if ln:
        t.append(("transformer.ln_f.bias", (C,), "bias"))
    if c["no_weight_tying"]:
        t.append(("lm_head.weight", (Vp, C), "w"))
    return t, Vp


def make_params(c, reg):
    """Weights with visible structure (not the training init): larger than
    0.02 so attention is far from uniform and every branch matters."""
    g = torch.Generator().manual_seed(c["seed"])
    P = {}
    for name, shape, kind in reg:
        z = torch.randn(shape, generator=g, dtype=torch.float64)
        if kind == "emb":
            v = 0.5 * z
        elif kind == "w":
            v = z / math.sqrt(shape[1]) * 1.5
        elif kind == "bias":
            v = 0.05 * z
        else:
            v = 1.0 + 0.1 * z
        # round to float32 so C and torch start from identical values
        P[name] = v.float().double().requires_grad_(True)
    return P


def norm(c, x, w, b):
    if c["norm"] == "layernorm":
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + c["layernorm_epsilon"]) * w + b
    # GPT-NeoX RMSNorm: x / (||x|| / sqrt(C) + eps) * w
    rms = x.norm(2, dim=-1, keepdim=True) / math.sqrt(x.shape[-1])
    return w * (x / (rms + c["rms_norm_epsilon"]))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rotary(c, x):
    """x (B, NH, T, hs): NeoX rotate-half on the first rd dims."""
    hs = x.shape[-1]
    rd = int(hs * c["rotary_pct"]) // 2 * 2
    T = x.shape[2]
    inv = c["rotary_emb_base"] ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos(), emb.sin()
    xr, xp = x[..., :rd], x[..., rd:]
    x1, x2 = xr[..., :rd // 2], xr[..., rd // 2:]
    rot = torch.cat([-x2, x1], -1)
    return torch.cat([xr * cos + rot * sin, xp], -1)


def forward(c, P, tok, tgt):
    B, T = tok.shape
    C, NH = c["hidden_size"], c["num_attention_heads"]
    hs = C // NH
    V = c["vocab_size"]
    ln = c["norm"] == "layernorm"
    x = P["transformer.wte.weight"][tok]
    if c["pos_emb"] == "learned":
        x = x + P["transformer.wpe.weight"][:T]
    elif c["pos_emb"] == "sinusoidal":
        inv = 10000.0 ** (-torch.arange(0, C, 2, dtype=torch.float64) / C)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        x = x + torch.cat([ang.sin(), ang.cos()], -1)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(c["num_layers"]):
        p = "transformer.h.%d." % i

        def nrm(n, h):
            return norm(c, h, P[p + n + ".weight"], P[p + n + ".bias"] if ln else None)

        def lin(n, h):
            return h @ P[p + n + ".weight"].T + P[p + n + ".bias"]

        def attn(h):
            qkv = lin("attn.c_attn", h)
            q, k, v = qkv.split(C, -1)
            q, k, v = [z.view(B, T, NH, hs).transpose(1, 2) for z in (q, k, v)]
            if c["pos_emb"] == "rotary":
                q, k = rotary(c, q), rotary(c, k)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
            s = s.masked_fill(~mask, float("-inf"))
            y = torch.softmax(s, -1) @ v
            return lin("attn.c_proj", y.transpose(1, 2).reshape(B, T, C))

        def mlp(h):
            u = lin("mlp.c_fc", h)
            if c["activation"] == "gelu":
                a = gelu_tanh(u)
            else:
                a1, b1 = u.chunk(2, -1)
                a = (gelu_tanh(a1) if c["activation"] == "geglu" else torch.nn.functional.silu(a1)) * b1
            return lin("mlp.c_proj", a)

        if c["gpt_j_residual"]:
            x = x + attn(nrm("ln_1", x)) + mlp(nrm("ln_2", x))
        else:
            x = x + attn(nrm("ln_1", x))
            x = x + mlp(nrm("ln_2", x))
    x = norm(c, x, P["transformer.ln_f.weight"], P["transformer.ln_f.bias"] if ln else None)
    head = P["lm_head.weight"] if c["no_weight_tying"] else P["transformer.wte.weight"]
    logits = x @ head.T
    logits = logits[..., :V]          # padded columns take no part
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    return logits, loss


def write(name, c, outdir):
    reg, Vp = registry(c)
    P = make_params(c, reg)
    B, T, V = c["batch"], c["seq_length"], c["vocab_size"]
    g = torch.Generator().manual_seed(c["seed"] + 1)
    tok = torch.randint(0, V, (B, T), generator=g)
    tgt = torch.randint(0, V, (B, T), generator=g)
    logits, loss = forward(c, P, tok, tgt)
    loss.backward()
    path = os.path.join(outdir, "ref_%s.h5" % name)
    with h5py.File(path, "w") as f:
        for k, v in c.items():
            if k in ("pos_emb", "norm", "activation"):
                f.attrs[k] = {"pos_emb": POS, "norm": NORM, "activation": ACT}[k][v]
                f.attrs[k + "_name"] = v
            else:
                f.attrs[k] = v
        f.attrs["padded_vocab_size"] = Vp
        f.attrs["generator"] = "contrib/reference/gpt_reference.py (torch %s, float64)" % torch.__version__
        f["inputs/tokens"] = tok.numpy().astype(np.int32)
        f["inputs/targets"] = tgt.numpy().astype(np.int32)
        f["logits"] = logits.detach().numpy().astype(np.float32)
        f["loss"] = np.array([loss.item()], dtype=np.float32)
        for n, _, _ in reg:
            f["params/" + n] = P[n].detach().numpy().astype(np.float32)
            f["grads/" + n] = P[n].grad.numpy().astype(np.float32)
        opt = torch.optim.AdamW([P[n] for n, _, _ in reg], **ADAMW)
        opt.step()
        grp = f.create_group("adamw")
        grp.attrs["lr"] = ADAMW["lr"]
        grp.attrs["beta1"], grp.attrs["beta2"] = ADAMW["betas"]
        grp.attrs["eps"] = ADAMW["eps"]
        grp.attrs["weight_decay"] = ADAMW["weight_decay"]
        grp.attrs["step"] = 1
        grp.attrs["note"] = "torch.optim.AdamW, one step, bias correction, decay on every tensor"
        for n, _, _ in reg:
            grp[n] = P[n].detach().numpy().astype(np.float32)
    print("%s: loss %.6f, %d tensors" % (path, loss.item(), len(reg)))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "tests", "data")
    torch.set_num_threads(1)
    for name, c in CONFIGS.items():
        write(name, c, outdir)


if __name__ == "__main__":
    main()
