#!/usr/bin/python3
"""export_hf_check.py - optional: load a ds-ckpt-convert export with
transformers' own classes (GPT2LMHeadModel, GPTNeoXForCausalLM, by the
config.json's model_type) and compare its logits with dstk's.

Usage: export_hf_check.py EXPORT_DIR DSTK_LOGITS.f32 TOKENS.i32 [RTOL]
Exit 0 when max|hf - dstk| <= RTOL * max|dstk| (default 1e-4), 1 otherwise.
Needs python3 transformers (not a dependency of dstk's tests: the bats test
that runs this skips without it).
"""
import json
import os
import sys

import numpy as np
import torch
import transformers


def main():
    d, lg, tk = sys.argv[1:4]
    rtol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-4
    with open(os.path.join(d, "config.json")) as f:
        kind = json.load(f)["model_type"]
    cls = {"gpt2": transformers.GPT2LMHeadModel, "gpt_neox": transformers.GPTNeoXForCausalLM}[kind]
    model, info = cls.from_pretrained(d, output_loading_info=True)
    model.eval()
    missing = [k for k in info["missing_keys"] if not k.endswith((".attn.bias", ".attn.masked_bias",
                                                                   ".attention.bias", ".attention.masked_bias",
                                                                   "rotary_emb.inv_freq"))]
    if missing or info["unexpected_keys"]:
        print("missing %s, unexpected %s" % (missing, info["unexpected_keys"]))
        sys.exit(1)
    tok = torch.tensor(np.fromfile(tk, dtype="<i4").astype(np.int64))[None, :]
    with torch.no_grad():
        hf = model(tok).logits[0].double().numpy()
    want = np.fromfile(lg, dtype="<f4").reshape(hf.shape).astype(np.float64)
    md, mb = np.abs(hf - want).max(), np.abs(want).max()
    print("%s (transformers %s) vs dstk: logits %s, max|diff| %.3e, rel %.3e (rtol %.0e)" % (
        cls.__name__, transformers.__version__, hf.shape, md, md / mb, rtol))
    sys.exit(0 if md <= rtol * mb else 1)


if __name__ == "__main__":
    main()
