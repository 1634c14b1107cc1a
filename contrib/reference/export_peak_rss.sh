#!/bin/sh
# export_peak_rss.sh - peak resident memory of every ds-ckpt-convert conversion
# on a GPT-2 124M-shaped checkpoint (498 MB of fp32 weights), next to the
# largest tensor (wte, 154.5 MB): streaming keeps the peak near one tensor,
# not the model (issue 8; DeepSpeed's zero_to_fp32 holds the whole model).
# Usage: contrib/reference/export_peak_rss.sh BUILDDIR [MODEL.json] [WORKDIR]
# (BUILDDIR has tools/ds-ckpt-convert and tests/data/ckpt-small/ckpt-small;
# WORKDIR, default a fresh mktemp -d, needs ~4 GB and is removed afterwards.)
set -eu
B=$(cd "${1:?usage: export_peak_rss.sh BUILDDIR [MODEL.json] [WORKDIR]}" && pwd)
S=$(cd "$(dirname "$0")/../.." && pwd)
M=${2:-$S/share/models/gpt2-124m.json}
W=${3:-$(mktemp -d)}
trap 'rm -rf "$W"' EXIT
P="$B/tools/ds-ckpt-convert"
"$B/tests/data/ckpt-small/ckpt-small" make-model "$W/ckpt" "$M"
printf '%-34s %14s %14s %14s %6s\n' "# conversion" "bytes_out" "largest_bytes" "peak_rss_bytes" "ratio"
run() {
	name=$1
	shift
	/usr/bin/time -f %M -o "$W/rss" "$P" -q --json "$@" > "$W/out.json"
	rss=$(( $(cat "$W/rss") * 1024 ))
	bytes=$(sed -n 's/.*"bytes": \([0-9]*\).*/\1/p' "$W/out.json")
	big=$(sed -n 's/.*"largest_tensor_bytes": \([0-9]*\).*/\1/p' "$W/out.json")
	printf '%-34s %14s %14s %14s %6.2f\n' "$name" "$bytes" "$big" "$rss" "$(echo "$rss / $big" | bc -l)"
}
run "hdf5 -> fp32 weights" "$W/ckpt" --to fp32 -o "$W/w32"
run "hdf5 -> fp16 weights" "$W/ckpt" --to fp16 -o "$W/w16"
run "hdf5 -> bf16 weights" "$W/ckpt" --to bf16 -o "$W/wbf"
run "hdf5 -> safetensors" "$W/ckpt" --to safetensors -o "$W/st"
run "hdf5 -> llm.c (fp32)" "$W/ckpt" --to llmc -o "$W/m.bin"
run "hdf5 -> llm.c (bf16)" "$W/ckpt" --to llmc --dtype bf16 -o "$W/m16.bin"
run "safetensors -> hdf5" "$W/st" --to hdf5 -o "$W/imp"
run "llm.c -> hdf5" "$W/m.bin" --to hdf5 -o "$W/impl"
run "fp16 weights -> safetensors" "$W/w16" --to safetensors -o "$W/st16"
echo "# model: $(basename "$M"), checkpoint $(stat -c %s "$W/ckpt"/global_step*/state.h5) bytes"
