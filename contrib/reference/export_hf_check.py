#!/usr/bin/python3
"""export_hf_check.py - optional: load a ds-ckpt-convert GPT-2 export with
transformers' GPT2LMHeadModel and compare its logits with dstk's.

Usage: export_hf_check.py EXPORT_DIR DSTK_LOGITS.f32 TOKENS.i32 [RTOL]
Exit 0 when max|hf - dstk| <= RTOL * max|dstk| (default 1e-4), 1 otherwise.
Needs python3-transformers (not a dependency of dstk's tests: the bats test
that runs this skips without it).
"""
import sys

import numpy as np
import torch
from transformers import GPT2LMHeadModel


def main():
    d, lg, tk = sys.argv[1:4]
    rtol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-4
    model = GPT2LMHeadModel.from_pretrained(d).eval()
    tok = torch.tensor(np.fromfile(tk, dtype="<i4").astype(np.int64))[None, :]
    with torch.no_grad():
        hf = model(tok).logits[0].double().numpy()
    want = np.fromfile(lg, dtype="<f4").reshape(hf.shape).astype(np.float64)
    md, mb = np.abs(hf - want).max(), np.abs(want).max()
    print("GPT2LMHeadModel vs dstk: max|diff| %.3e, rel %.3e (rtol %.0e)" % (md, md / mb, rtol))
    sys.exit(0 if md <= rtol * mb else 1)


if __name__ == "__main__":
    main()
