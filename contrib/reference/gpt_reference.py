#!/usr/bin/python3
"""gpt_reference.py - PyTorch reference fixtures for dstk's GPT model.

Builds the GPT of lib/model/gpt.h in plain torch (float64), with weights drawn
from torch's own RNG, runs one batch and writes into tests/data/ref_<name>.h5:
the config (attributes on /), inputs, every parameter, the logits of the real
vocabulary, the mean cross-entropy loss, every gradient and the parameters
after one torch.optim.AdamW step.  tests/unit/test_model.c loads the
parameters by name and compares; it never needs torch.

It also writes ref_<name>_fp16.h5 and ref_<name>_bf16.h5: the same model and
batch run the way a GPU mixed-precision run does it (DeepSpeed's fp16 / bf16:
the model cast to the 16-bit type).  Parameters are the float32 weights
rounded to the 16-bit type; every op reads 16-bit tensors, computes in
float32 and stores its output in the 16-bit type (what a CUDA kernel with a
float accumulator does; torch 1.13 has no CPU fp16 matmul, so each op is
emulated as float32 compute + cast); statistics, softmax and the
cross-entropy are float32 inside their op.  Autograd does the backward, so
every op's input gradients and every parameter gradient are 16-bit too.
fp16 runs backward on the loss times a static loss scale (attribute
loss_scale); the stored gradients are unscaled (grad / loss_scale, in
float32).  bf16 uses no loss scale (loss_scale 1).

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
ACT = {"gelu": 0, "geglu": 1, "swiglu": 2, "gelu_exact": 3, "geglu_exact": 4}

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
    F2 = F if c["activation"] in ("gelu", "gelu_exact") else 2 * F
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


def exact(fn, *xs):
    """float64 reference: an op is just its computation."""
    return fn(*xs)


def rounding(dt):
    """16-bit run: an op reads its dt inputs as float32, computes in float32
    and stores its output as dt (autograd then rounds the gradients it hands
    back to the inputs to dt as well)."""
    def op(fn, *xs):
        return fn(*[x.float() if torch.is_tensor(x) and x.dtype == dt else x for x in xs]).to(dt)
    return op


# The forward below is written as ops k(fn, inputs...): one k per kernel a
# GPU run launches (linear = addmm with its bias, layernorm, scaled Q K^T =
# baddbmm, masked softmax, gelu and silu are single kernels; NeoX's RMSNorm,
# rotary and the residual adds are the separate elementwise ops of their
# Python code).  With k = exact it is the float64 reference.

def layernorm(eps, x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def norm(c, k, x, w, b):
    if c["norm"] == "layernorm":
        return k(lambda x, w, b: layernorm(c["layernorm_epsilon"], x, w, b), x, w, b)
    # GPT-NeoX RMSNorm: x / (||x|| / sqrt(C) + eps) * w
    C = x.shape[-1]
    nx = k(lambda x: x.norm(2, dim=-1, keepdim=True), x)
    rms = k(lambda n: n / math.sqrt(C), nx)
    d = k(lambda r: r + c["rms_norm_epsilon"], rms)
    xn = k(lambda x, d: x / d, x, d)
    return k(lambda w, xn: w * xn, w, xn)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    """dstk's gelu_exact: torch's default F.gelu (approximate='none')."""
    return torch.nn.functional.gelu(x)


# the GeLU of each activation (swiglu: SiLU)
GATE = {"gelu": gelu_tanh, "geglu": gelu_tanh, "gelu_exact": gelu_erf, "geglu_exact": gelu_erf,
        "swiglu": torch.nn.functional.silu}


def rotary(c, k, x):
    """x (B, NH, T, hs): NeoX rotate-half on the first rd dims (cos and sin
    in x's type, as the buffers of a model cast to 16 bits)."""
    hs = x.shape[-1]
    rd = int(hs * c["rotary_pct"]) // 2 * 2
    T = x.shape[2]
    inv = c["rotary_emb_base"] ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    xr, xp = x[..., :rd], x[..., rd:]
    x1, x2 = xr[..., :rd // 2], xr[..., rd // 2:]
    rot = torch.cat([-x2, x1], -1)
    mul = lambda a, b: a * b  # noqa: E731
    return torch.cat([k(lambda a, b: a + b, k(mul, xr, cos), k(mul, rot, sin)), xp], -1)


def forward(c, P, tok, tgt, k=exact):
    B, T = tok.shape
    C, NH = c["hidden_size"], c["num_attention_heads"]
    hs = C // NH
    V = c["vocab_size"]
    ln = c["norm"] == "layernorm"
    x = k(lambda w: w[tok], P["transformer.wte.weight"])
    if c["pos_emb"] == "learned":
        x = k(lambda x, w: x + w[:T], x, P["transformer.wpe.weight"])
    elif c["pos_emb"] == "sinusoidal":
        inv = 10000.0 ** (-torch.arange(0, C, 2, dtype=torch.float64) / C)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        x = k(lambda x: x + torch.cat([ang.sin(), ang.cos()], -1).to(x.dtype), x)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(c["num_layers"]):
        p = "transformer.h.%d." % i

        def nrm(n, h):
            return norm(c, k, h, P[p + n + ".weight"], P[p + n + ".bias"] if ln else None)

        def lin(n, h):
            return k(lambda h, w, b: h @ w.T + b, h, P[p + n + ".weight"], P[p + n + ".bias"])

        def attn(h):
            qkv = lin("attn.c_attn", h)
            q, kk, v = qkv.split(C, -1)
            q, kk, v = [z.view(B, T, NH, hs).transpose(1, 2) for z in (q, kk, v)]
            if c["pos_emb"] == "rotary":
                q, kk = rotary(c, k, q), rotary(c, k, kk)
            s = k(lambda q, kk: (q @ kk.transpose(-1, -2)) / math.sqrt(hs), q, kk)
            a = k(lambda s: torch.softmax(s.masked_fill(~mask, float("-inf")), -1), s)
            y = k(lambda a, v: a @ v, a, v)
            return lin("attn.c_proj", y.transpose(1, 2).reshape(B, T, C))

        def mlp(h):
            u = lin("mlp.c_fc", h)
            if c["activation"] in ("gelu", "gelu_exact"):
                a = k(GATE[c["activation"]], u)
            else:
                a1, b1 = u.chunk(2, -1)
                g = k(GATE[c["activation"]], a1)
                a = k(lambda g, b: g * b, g, b1)
            return lin("mlp.c_proj", a)

        add = lambda a, b: a + b  # noqa: E731
        if c["gpt_j_residual"]:
            x = k(add, k(add, x, attn(nrm("ln_1", x))), mlp(nrm("ln_2", x)))
        else:
            x = k(add, x, attn(nrm("ln_1", x)))
            x = k(add, x, mlp(nrm("ln_2", x)))
    x = norm(c, k, x, P["transformer.ln_f.weight"], P["transformer.ln_f.bias"] if ln else None)
    head = P["lm_head.weight"] if c["no_weight_tying"] else P["transformer.wte.weight"]
    logits = k(lambda x, w: x @ w.T, x, head)
    logits = logits[..., :V]          # padded columns take no part
    # the loss in float32 (float64 for the reference), as Megatron / NeoX
    # call the cross-entropy on logits.float()
    lf = logits if logits.dtype == torch.float64 else logits.float()
    loss = torch.nn.functional.cross_entropy(lf.reshape(-1, V), tgt.reshape(-1))
    return logits, loss


def batch(c):
    g = torch.Generator().manual_seed(c["seed"] + 1)
    tok = torch.randint(0, c["vocab_size"], (c["batch"], c["seq_length"]), generator=g)
    tgt = torch.randint(0, c["vocab_size"], (c["batch"], c["seq_length"]), generator=g)
    return tok, tgt


def write_config(f, c, Vp, tok, tgt, kind):
    for k, v in c.items():
        if k in ("pos_emb", "norm", "activation"):
            f.attrs[k] = {"pos_emb": POS, "norm": NORM, "activation": ACT}[k][v]
            f.attrs[k + "_name"] = v
        else:
            f.attrs[k] = v
    f.attrs["padded_vocab_size"] = Vp
    f.attrs["generator"] = "contrib/reference/gpt_reference.py (torch %s, %s)" % (torch.__version__, kind)
    f["inputs/tokens"] = tok.numpy().astype(np.int32)
    f["inputs/targets"] = tgt.numpy().astype(np.int32)


def write(name, c, outdir):
    reg, Vp = registry(c)
    P = make_params(c, reg)
    tok, tgt = batch(c)
    logits, loss = forward(c, P, tok, tgt)
    loss.backward()
    path = os.path.join(outdir, "ref_%s.h5" % name)
    with h5py.File(path, "w") as f:
        write_config(f, c, Vp, tok, tgt, "float64")
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
    return P, logits, loss


def relerr(a, b):
    """max|a-b| / max|b|, the tests' measure"""
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).abs().max() / b.abs().max()).item()


# the 16-bit runs: (file suffix, torch dtype, static loss scale)
HALF = [("fp16", torch.float16, 1024.0), ("bf16", torch.bfloat16, 1.0)]


def write16(name, c, outdir, tag, dt, scale, ref):
    """ref_<name>_<tag>.h5: the run of the model cast to dt (see the top)."""
    reg, Vp = registry(c)
    P = {n: v.detach().to(dt).requires_grad_(True) for n, v in make_params(c, reg).items()}
    tok, tgt = batch(c)
    logits, loss = forward(c, P, tok, tgt, rounding(dt))
    (loss * scale).backward()
    grads = {}
    for n, _, _ in reg:
        g = P[n].grad
        if not torch.isfinite(g).all():
            sys.exit("gpt_reference.py: %s %s: gradient of %s overflowed at loss scale %g" % (name, tag, n, scale))
        grads[n] = g.float() / scale   # unscaled; exact: the scale is a power of two
    path = os.path.join(outdir, "ref_%s_%s.h5" % (name, tag))
    with h5py.File(path, "w") as f:
        write_config(f, c, Vp, tok, tgt, "%s mixed precision, float32 ops" % tag)
        f.attrs["dtype"] = tag
        f.attrs["loss_scale"] = scale
        f.attrs["grads_note"] = "d loss / d param, unscaled: the backward ran on loss * loss_scale"
        f["logits"] = logits.detach().float().numpy()
        f["loss"] = np.array([loss.item()], dtype=np.float32)
        for n, _, _ in reg:
            f["params/" + n] = P[n].detach().float().numpy()
            f["grads/" + n] = grads[n].numpy()
    # how far the 16-bit run is from the float64 one (README's table)
    P64, lg64, l64 = ref
    worst = max((relerr(grads[n], P64[n].grad), n) for n, _, _ in reg)
    print("%s: loss %.6f (float64 %.6f), vs float64: logits %.2g, loss %.2g, worst gradient %.2g (%s)"
          % (path, loss.item(), l64.item(), relerr(logits, lg64), abs(loss.item() - l64.item()) / abs(l64.item()),
             worst[0], worst[1]))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "tests", "data")
    torch.set_num_threads(1)
    for name, c in CONFIGS.items():
        ref = write(name, c, outdir)
        for tag, dt, scale in HALF:
            write16(name, c, outdir, tag, dt, scale, ref)


if __name__ == "__main__":
    main()
