#!/usr/bin/python3
"""text2tokens.py - turn a text file into the token formats ds-train reads.

Byte-level tokens (vocabulary 256, the same stream ds-train's text reader
sees), written as
  --megatron PREFIX   PREFIX.bin + PREFIX.idx, Megatron/GPT-NeoX MMIDIDX v1,
                      dtype code 8 (uint16); one document per paragraph
                      (blank-line separated), no EOD token, so the
                      concatenated documents equal the original bytes
  --llmc PATTERN      llm.c shards (header 20240520, version 1, uint16),
                      PATTERN containing {i} for the shard number,
                      --shard-tokens per shard
Byte layouts follow the spec in ../../../shared/spec/formats.md; nothing here
imports Megatron or llm.c.  Example, from the bundled corpus:

  contrib/data/text2tokens.py share/data/devils-dictionary.txt \\
      --megatron /tmp/devil --llmc '/tmp/devil_{i:03d}.bin'
  ds-train --data /tmp/devil ...            # or --data '/tmp/devil_*.bin'
"""
import argparse
import re
import struct
import sys

import numpy as np


def documents(data):
    """Split bytes after each run of blank lines; pieces concatenate back to data."""
    cuts = [m.end() for m in re.finditer(rb"\n\n+", data)]
    starts = [0] + cuts
    ends = cuts + [len(data)]
    return [data[a:b] for a, b in zip(starts, ends) if b > a]


def write_megatron(prefix, docs):
    sizes = np.array([len(d) for d in docs], dtype=np.int32)
    pointers = np.zeros(len(docs), dtype=np.int64)
    pointers[1:] = np.cumsum(sizes[:-1].astype(np.int64) * 2)
    doc_idx = np.arange(len(docs) + 1, dtype=np.int64)  # one sequence per document
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(np.frombuffer(d, dtype=np.uint8).astype("<u2").tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))            # version
        f.write(struct.pack("<B", 8))            # dtype code 8: uint16
        f.write(struct.pack("<Q", len(sizes)))   # sequences
        f.write(struct.pack("<Q", len(doc_idx))) # doc_idx entries
        f.write(sizes.astype("<i4").tobytes())
        f.write(pointers.astype("<i8").tobytes())
        f.write(doc_idx.astype("<i8").tobytes())


def write_llmc(pattern, tokens, per_shard):
    names = []
    for i, start in enumerate(range(0, len(tokens), per_shard)):
        chunk = tokens[start:start + per_shard]
        header = np.zeros(256, dtype="<i4")
        header[0], header[1], header[2] = 20240520, 1, len(chunk)
        name = pattern.format(i=i)
        with open(name, "wb") as f:
            f.write(header.tobytes())
            f.write(chunk.astype("<u2").tobytes())
        names.append(name)
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("text")
    ap.add_argument("--megatron", metavar="PREFIX")
    ap.add_argument("--llmc", metavar="PATTERN")
    ap.add_argument("--shard-tokens", type=int, default=1 << 20)
    a = ap.parse_args()
    if not a.megatron and not a.llmc:
        ap.error("give --megatron PREFIX and/or --llmc PATTERN")
    data = open(a.text, "rb").read()
    if a.megatron:
        docs = documents(data)
        assert b"".join(docs) == data
        write_megatron(a.megatron, docs)
        print(f"{a.megatron}.bin/.idx: {len(docs)} documents, {len(data)} tokens", file=sys.stderr)
    if a.llmc:
        if "{i" not in a.llmc:
            ap.error("--llmc PATTERN needs {i} (e.g. 'out_{i:03d}.bin')")
        names = write_llmc(a.llmc, np.frombuffer(data, dtype=np.uint8), a.shard_tokens)
        print(f"{len(names)} llm.c shards, {len(data)} tokens", file=sys.stderr)


if __name__ == "__main__":
    main()
