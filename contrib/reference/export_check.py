#!/usr/bin/python3
"""export_check.py - checks ds-ckpt-convert's Hugging Face exports without dstk.

Reads a safetensors file with its own parser (struct + json + numpy), maps the
Hugging Face GPT-2 / GPT-NeoX tensors to the reference model of
gpt_reference.py following transformers' own semantics (GPT-2 Conv1D computes
x @ W + b with W [in, out]; GPT-NeoX's query_key_value output is viewed as
(heads, 3, head_dim)), runs it in float64 and compares the logits with the
ones dstk computed from the checkpoint before export.  It also writes the
reverse fixtures: safetensors files made by its own writer, whose import
dstk must reproduce.

Usage (/usr/bin/python3, Debian's python3-torch and python3-numpy):
  export_check.py check EXPORT_DIR DSTK_LOGITS.f32 TOKENS.i32 [RTOL]
  export_check.py hashes EXPORT_DIR          # sha256 of each tensor's bytes
  export_check.py make-ref OUTDIR TOKENS.i32 # OUTDIR/ref-gpt2, OUTDIR/ref-neox
contrib/reference/export_make.sh runs all of it for tests/data/ckpt-small.
"""
import hashlib
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference as ref  # noqa: E402

DT = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def st_read(path):
    """{name: (dtype string, shape, raw bytes)}, metadata - by the format's spec."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    hdr = json.loads(buf[8:8 + n].decode("utf-8"))
    meta = hdr.pop("__metadata__", {})
    data = buf[8 + n:]
    out = {}
    for name, e in hdr.items():
        b, end = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), data[b:end])
    return out, meta


def st_tensor(entry):
    dt, shape, raw = entry
    if dt == "BF16":
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return torch.from_numpy(u.view(np.float32).reshape(shape).astype(np.float64))
    return torch.from_numpy(np.frombuffer(raw, dtype=DT[dt]).reshape(shape).astype(np.float64))


def st_write(path, tensors, meta):
    """The reference writer: tensors sorted by name, header padded to 8."""
    hdr, blobs, off = {"__metadata__": meta}, [], 0
    for name in sorted(tensors):
        dt, arr = tensors[name]
        raw = arr.tobytes()
        hdr[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(hdr, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def config_to_ref(cj):
    """gpt_reference's config dict from a transformers config.json."""
    if cj["model_type"] == "gpt2":
        assert cj.get("activation_function", "gelu_new") in ("gelu_new", "gelu_pytorch_tanh")
        return dict(num_layers=cj["n_layer"], hidden_size=cj["n_embd"], num_attention_heads=cj["n_head"],
                    vocab_size=cj["vocab_size"], pos_emb="learned", norm="layernorm",
                    layernorm_epsilon=cj.get("layer_norm_epsilon", 1e-5), rms_norm_epsilon=1e-8,
                    activation="gelu", no_weight_tying=0 if cj.get("tie_word_embeddings", True) else 1,
                    gpt_j_residual=0, rotary_pct=1.0, rotary_emb_base=10000.0,
                    intermediate_size=cj.get("n_inner") or 4 * cj["n_embd"])
    assert cj["model_type"] == "gpt_neox" and cj.get("hidden_act") in ("gelu_new", "gelu_pytorch_tanh")
    return dict(num_layers=cj["num_hidden_layers"], hidden_size=cj["hidden_size"],
                num_attention_heads=cj["num_attention_heads"], vocab_size=cj["vocab_size"],
                pos_emb="rotary", rotary_pct=cj.get("rotary_pct", 1.0),
                rotary_emb_base=float(cj.get("rotary_emb_base", 10000)), norm="layernorm",
                layernorm_epsilon=cj.get("layer_norm_eps", 1e-5), rms_norm_epsilon=1e-8, activation="gelu",
                no_weight_tying=0 if cj.get("tie_word_embeddings", False) else 1,
                gpt_j_residual=1 if cj.get("use_parallel_residual", True) else 0,
                intermediate_size=cj["intermediate_size"])


def hf_to_ref(c, cj, T):
    """The reference model's parameters (names of gpt_reference, nn.Linear
    [out, in]) from Hugging Face tensors T {name: float64 tensor}."""
    P = {}
    C, NH = c["hidden_size"], c["num_attention_heads"]
    hs = C // NH
    if cj["model_type"] == "gpt2":
        def g(n):  # hub files are unprefixed, GPT2LMHeadModel's state_dict is prefixed
            return T["transformer." + n] if "transformer." + n in T else T[n]
        P["transformer.wte.weight"] = g("wte.weight")
        P["transformer.wpe.weight"] = g("wpe.weight")
        for i in range(c["num_layers"]):
            p = "h.%d." % i
            for n in ("ln_1", "ln_2"):
                P["transformer." + p + n + ".weight"] = g(p + n + ".weight")
                P["transformer." + p + n + ".bias"] = g(p + n + ".bias")
            for n in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
                P["transformer." + p + n + ".weight"] = g(p + n + ".weight").T   # Conv1D: [in, out]
                P["transformer." + p + n + ".bias"] = g(p + n + ".bias")
        P["transformer.ln_f.weight"] = g("ln_f.weight")
        P["transformer.ln_f.bias"] = g("ln_f.bias")
        if c["no_weight_tying"]:
            P["lm_head.weight"] = T["lm_head.weight"]
        return P
    P["transformer.wte.weight"] = T["gpt_neox.embed_in.weight"]
    for i in range(c["num_layers"]):
        p, q = "gpt_neox.layers.%d." % i, "transformer.h.%d." % i
        for a, b in (("input_layernorm", "ln_1"), ("post_attention_layernorm", "ln_2"),
                     ("attention.dense", "attn.c_proj"), ("mlp.dense_h_to_4h", "mlp.c_fc"),
                     ("mlp.dense_4h_to_h", "mlp.c_proj")):
            P[q + b + ".weight"] = T[p + a + ".weight"]
            P[q + b + ".bias"] = T[p + a + ".bias"]
        # transformers: qkv.view(B, T, NH, 3 * hs) -> q, k, v = [..., :hs], [hs:2hs], [2hs:]
        w = T[p + "attention.query_key_value.weight"]
        bb = T[p + "attention.query_key_value.bias"]
        P[q + "attn.c_attn.weight"] = w.view(NH, 3, hs, C).permute(1, 0, 2, 3).reshape(3 * C, C)
        P[q + "attn.c_attn.bias"] = bb.view(NH, 3, hs).permute(1, 0, 2).reshape(3 * C)
    P["transformer.ln_f.weight"] = T["gpt_neox.final_layer_norm.weight"]
    P["transformer.ln_f.bias"] = T["gpt_neox.final_layer_norm.bias"]
    if c["no_weight_tying"]:
        P["lm_head.weight"] = T["embed_out.weight"]
    return P


def ref_logits(export_dir, tokens):
    st, meta = st_read(os.path.join(export_dir, "model.safetensors"))
    with open(os.path.join(export_dir, "config.json")) as f:
        cj = json.load(f)
    assert meta.get("format") == "pt", "metadata lacks format pt"
    c = config_to_ref(cj)
    T = {n: st_tensor(e) for n, e in st.items()}
    P = hf_to_ref(c, cj, T)
    tok = torch.tensor(tokens, dtype=torch.long)[None, :]
    with torch.no_grad():
        logits, _ = ref.forward(c, P, tok, tok)
    return logits[0].numpy(), c


def check(export_dir, dstk_logits, tokens_path, rtol=1e-4):
    tokens = np.fromfile(tokens_path, dtype="<i4").tolist()
    want, c = ref_logits(export_dir, tokens)
    got = np.fromfile(dstk_logits, dtype="<f4").reshape(len(tokens), c["vocab_size"]).astype(np.float64)
    md, mb = np.abs(got - want).max(), np.abs(want).max()
    ok = md <= rtol * mb
    print("%s: %s logits %dx%d, max|dstk-ref| %.3e, max|ref| %.3e, rel %.3e (rtol %.0e): %s" % (
        export_dir.rstrip("/").split("/")[-1], "gpt2" if c["pos_emb"] == "learned" else "gpt_neox",
        len(tokens), c["vocab_size"], md, mb, md / mb, rtol, "PASS" if ok else "FAIL"))
    return ok


def hashes(export_dir):
    st, _ = st_read(os.path.join(export_dir, "model.safetensors"))
    for name in sorted(st):
        dt, shape, raw = st[name]
        print("%s  %s %s %s" % (hashlib.sha256(raw).hexdigest(), name, dt, "x".join(map(str, shape)) or "-"))


# ---- the reverse direction: files written here, imported by dstk ----------

REF = {
    "gpt2": dict(num_layers=2, hidden_size=16, num_attention_heads=2, vocab_size=50, n_positions=16,
                 intermediate_size=40, eps=1e-5, seed=777, dtype="F32"),
    "neox": dict(num_layers=2, hidden_size=16, num_attention_heads=4, vocab_size=50, n_positions=16,
                 intermediate_size=32, eps=1e-5, seed=778, dtype="BF16", rotary_pct=0.5, parallel=True),
}


def make_ref(outdir, tokens):
    for name, r in REF.items():
        g = torch.Generator().manual_seed(r["seed"])
        C, L, V, F = r["hidden_size"], r["num_layers"], r["vocab_size"], r["intermediate_size"]

        def rnd(*shape, scale=1.0, base=0.0):
            return base + scale * torch.randn(shape, generator=g, dtype=torch.float64)
        t = {}
        if name == "gpt2":
            cj = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
                  "n_positions": r["n_positions"], "n_embd": C, "n_layer": L, "n_head": r["num_attention_heads"],
                  "n_inner": F, "activation_function": "gelu_new", "layer_norm_epsilon": r["eps"],
                  "tie_word_embeddings": True}
            # hub-style unprefixed names, plus the old causal-mask buffers
            t["wte.weight"] = rnd(V, C, scale=0.5)
            t["wpe.weight"] = rnd(r["n_positions"], C, scale=0.5)
            for i in range(L):
                p = "h.%d." % i
                t[p + "ln_1.weight"], t[p + "ln_1.bias"] = rnd(C, scale=0.1, base=1.0), rnd(C, scale=0.05)
                t[p + "ln_2.weight"], t[p + "ln_2.bias"] = rnd(C, scale=0.1, base=1.0), rnd(C, scale=0.05)
                for n, i_, o in (("attn.c_attn", C, 3 * C), ("attn.c_proj", C, C), ("mlp.c_fc", C, F),
                                 ("mlp.c_proj", F, C)):
                    t[p + n + ".weight"] = rnd(i_, o, scale=1.5 / math.sqrt(i_))   # Conv1D [in, out]
                    t[p + n + ".bias"] = rnd(o, scale=0.05)
            t["ln_f.weight"], t["ln_f.bias"] = rnd(C, scale=0.1, base=1.0), rnd(C, scale=0.05)
        else:
            cj = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": V,
                  "hidden_size": C, "num_hidden_layers": L, "num_attention_heads": r["num_attention_heads"],
                  "intermediate_size": F, "hidden_act": "gelu_new", "rotary_pct": r["rotary_pct"],
                  "rotary_emb_base": 10000, "max_position_embeddings": r["n_positions"],
                  "layer_norm_eps": r["eps"], "use_parallel_residual": r["parallel"],
                  "tie_word_embeddings": False}
            t["gpt_neox.embed_in.weight"] = rnd(V, C, scale=0.5)
            for i in range(L):
                p = "gpt_neox.layers.%d." % i
                for n in ("input_layernorm", "post_attention_layernorm"):
                    t[p + n + ".weight"], t[p + n + ".bias"] = rnd(C, scale=0.1, base=1.0), rnd(C, scale=0.05)
                for n, i_, o in (("attention.query_key_value", C, 3 * C), ("attention.dense", C, C),
                                 ("mlp.dense_h_to_4h", C, F), ("mlp.dense_4h_to_h", F, C)):
                    t[p + n + ".weight"] = rnd(o, i_, scale=1.5 / math.sqrt(i_))   # nn.Linear [out, in]
                    t[p + n + ".bias"] = rnd(o, scale=0.05)
            t["gpt_neox.final_layer_norm.weight"] = rnd(C, scale=0.1, base=1.0)
            t["gpt_neox.final_layer_norm.bias"] = rnd(C, scale=0.05)
            t["embed_out.weight"] = rnd(V, C, scale=0.5)
        d = os.path.join(outdir, "ref-" + name)
        os.makedirs(d, exist_ok=True)
        out = {}
        for n, v in t.items():
            if r["dtype"] == "BF16":
                b = v.float().to(torch.bfloat16)
                out[n] = ("BF16", b.view(torch.int16).numpy())
            else:
                out[n] = ("F32", v.float().numpy())
        if name == "gpt2":
            for i in range(L):
                out["h.%d.attn.bias" % i] = ("F32", np.tril(np.ones((1, 1, 16, 16), dtype=np.float32)))
        st_write(os.path.join(d, "model.safetensors"), out, {"format": "pt"})
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cj, f, indent=2)
            f.write("\n")
        logits, _ = ref_logits(d, tokens)
        logits.astype("<f4").tofile(os.path.join(d, "logits.f32"))
        print("%s: %d tensors (%s), logits %s" % (d, len(out), r["dtype"], logits.shape))


def main():
    torch.set_num_threads(1)
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "check" and len(sys.argv) in (5, 6):
        sys.exit(0 if check(sys.argv[2], sys.argv[3], sys.argv[4],
                            float(sys.argv[5]) if len(sys.argv) == 6 else 1e-4) else 1)
    if cmd == "hashes" and len(sys.argv) == 3:
        hashes(sys.argv[2])
        return
    if cmd == "make-ref" and len(sys.argv) == 4:
        make_ref(sys.argv[2], np.fromfile(sys.argv[3], dtype="<i4").tolist())
        return
    print(__doc__, file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
