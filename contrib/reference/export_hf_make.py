#!/usr/bin/python3
"""export_hf_make.py - safetensors written by transformers itself
(save_pretrained), with the logits transformers computes, for dstk's import
tests: tests/data/ckpt-small/hf-gpt2-untied (GPT2LMHeadModel, separate
lm_head, n_inner default; also as shards with model.safetensors.index.json
in hf-gpt2-untied-sharded) and hf-neox-seq (GPTNeoXForCausalLM, sequential
residual, tied embeddings, rotary over the whole head).  The cases the
reference script's own files (ref-gpt2, ref-neox) do not cover.

Usage: PYTHON export_hf_make.py OUTDIR TOKENS.i32
with a python that has transformers (e.g. a venv made with
--system-site-packages on /usr/bin/python3 and `pip install transformers`).
"""
import os
import sys

import numpy as np
import torch
import transformers as T


def main():
    out, tokens = sys.argv[1], sys.argv[2]
    tok = torch.tensor(np.fromfile(tokens, dtype="<i4").astype(np.int64))[None]
    torch.manual_seed(20240326)
    cases = [
        ("hf-gpt2-untied", T.GPT2LMHeadModel,
         T.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                      activation_function="gelu_new", tie_word_embeddings=False,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
        ("hf-neox-seq", T.GPTNeoXForCausalLM,
         T.GPTNeoXConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, hidden_act="gelu_new", rotary_pct=1.0,
                         max_position_embeddings=16, use_parallel_residual=False,
                         tie_word_embeddings=True)),
    ]
    for name, cls, cfg in cases:
        m = cls(cfg).eval()
        with torch.no_grad():
            for p in m.parameters():   # far from the tiny init, so every tensor matters
                p.add_(0.3 * torch.randn_like(p))
            m.tie_weights()
            d = os.path.join(out, name)
            m.save_pretrained(d, safe_serialization=True)
            logits = m(tok).logits[0].numpy().astype("<f4")
            logits.tofile(os.path.join(d, "logits.f32"))
            if name == "hf-gpt2-untied":   # the same model in transformers' shards + index
                m.save_pretrained(d + "-sharded", safe_serialization=True, max_shard_size="16KB")
                logits.tofile(os.path.join(d + "-sharded", "logits.f32"))
            for e in (d, d + "-sharded"):
                gc = os.path.join(e, "generation_config.json")
                if os.path.exists(gc):
                    os.remove(gc)
        print("%s: transformers %s, %s" % (d, T.__version__, cls.__name__))


if __name__ == "__main__":
    main()
