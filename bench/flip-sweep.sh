#!/bin/bash
# flip-sweep.sh - issue 16's single-byte flips through the tools: a small
# checkpoint (a one-layer GPT, AdamW, tags global_step1 and global_step2),
# and each byte of global_step2's HDF5 metadata (the manifest's "m" extents)
# and of its manifest flipped in turn, then
#   ds-ckpt-convert verify ck/global_step2   caught: exit 1 with one line;
#                                            passed: exit 0 (then an explicit
#                                            --load of the tag must train, or
#                                            it counts as passed-but-unloadable)
#   ds-train --load auto --save ck           caught: skipped global_step2 and
#                                            loaded global_step1; passed:
#                                            loaded global_step2 and trained
# and any exit >= 128 (a crash) counted apart.  tests/unit/test_ckpt
# flips every metadata byte through the library (ds_ckpt_open, the call
# both tools go through); this does it through the processes, each flip
# costing two process starts (~0.1 s).
#
#   bench/flip-sweep.sh [STRIDE]   every STRIDE-th byte (default 1: all;
#                                  the first and last byte of each extent
#                                  always)
#
# Prints the counts per tool; the bar is 0 crashed and 0 passed-but-
# unloadable (a flip of bytes HDF5 never reads may pass and load).  DS_TOOLS:
# the build's tools/ (as in crash-trials.sh).  A benchmark: it reports, it
# never fails on the figures.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
tools=${DS_TOOLS:-$here/tools}
[ -x "$tools/ds-train" ] || tools=$here/build/tools
[ -x "$tools/ds-train" ] || { echo "$0: no ds-train in $tools (set DS_TOOLS)" >&2; exit 2; }
stride=${1:-1}
work=$(mktemp -d "${TMPDIR:-/tmp}/flip-sweep.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
cat >tiny.json <<'JSON'
{"family": "gpt", "num_layers": 1, "hidden_size": 16, "num_attention_heads": 2, "seq_length": 8,
 "vocab_size": 256, "make_vocab_size_divisible_by": 128, "pos_emb": "learned", "norm": "layernorm",
 "activation": "gelu", "no_weight_tying": false}
JSON
train() { OMP_NUM_THREADS=1 "$tools/ds-train" --model tiny.json --peak-gflops 1 "$@"; }
train --train-iters 2 --save ck --save-interval 1 >/dev/null 2>setup.err || { cat setup.err >&2; exit 1; }
f=ck/global_step2/state.h5
cp -a ck ck.orig
cp "$f.manifest" manifest.orig

# flip FILE OFF: XOR the byte at OFF with 0xff (run twice: restored)
flip() {
	local b
	b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
	printf '%b' "\\0$(printf %03o $((b ^ 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

v_caught=0 v_crash=0 v_pass=0 v_unloadable=0 v_other=0
a_caught=0 a_crash=0 a_pass=0 a_unloadable=0 a_other=0 n=0
# one flipped byte through both tools
trial() { # FILE OFF WHAT
	local rc=0 err
	n=$((n + 1))
	"$tools/ds-ckpt-convert" verify ck/global_step2 >/dev/null 2>v.err || rc=$?
	if [ $rc -ge 128 ]; then
		v_crash=$((v_crash + 1)); echo "$3 byte $2: verify crashed (exit $rc)"
	elif [ $rc -eq 1 ] && [ "$(wc -l <v.err)" -eq 1 ]; then
		v_caught=$((v_caught + 1))
	elif [ $rc -eq 0 ]; then
		if train --train-iters 3 --load ck/global_step2 >/dev/null 2>l.err; then
			v_pass=$((v_pass + 1))
		else
			v_unloadable=$((v_unloadable + 1)); echo "$3 byte $2: verify passed, --load failed: $(tail -1 l.err)"
		fi
	else
		v_other=$((v_other + 1)); echo "$3 byte $2: verify exit $rc: $(head -2 v.err | tr '\n' ' ')"
	fi
	rc=0
	train --train-iters 2 --load auto --save ck >/dev/null 2>a.err || rc=$?
	err=$(cat a.err)
	if [ $rc -ge 128 ]; then
		a_crash=$((a_crash + 1)); echo "$3 byte $2: --load auto crashed (exit $rc)"
	elif [ $rc -eq 0 ] && [[ "$err" == *"skipped ck/global_step2: "* ]] && [[ "$err" == *"loaded ck/global_step1: step 1"* ]]; then
		a_caught=$((a_caught + 1))
	elif [ $rc -eq 0 ] && [[ "$err" == *"loaded ck/global_step2: step 2"* ]]; then
		a_pass=$((a_pass + 1))
	elif [[ "$err" == *"loaded ck/global_step2: step 2"* ]]; then
		a_unloadable=$((a_unloadable + 1)); echo "$3 byte $2: --load auto took the tag and failed (exit $rc): $(tail -1 a.err)"
	else
		a_other=$((a_other + 1)); echo "$3 byte $2: --load auto exit $rc: $(grep 'ds-train: ' a.err | tail -1)"
	fi
	# the runs that trained saved tags: the next flip starts from the originals
	rm -rf ck
	cp -a ck.orig ck
}

meta=0
while read -r kind off len _; do
	[ "$kind" = m ] || continue
	meta=$((meta + len))
	for ((b = off; b < off + len; b++)); do
		if (((b - off) % stride == 0)) || ((b == off + len - 1)); then
			flip "$f" "$b"
			trial "$f" "$b" state.h5
		fi
	done
done <manifest.orig
msize=$(wc -c <manifest.orig)
for ((b = 0; b < msize; b++)); do
	if ((b % stride == 0)) || ((b == msize - 1)); then
		flip "$f.manifest" "$b"
		trial "$f.manifest" "$b" manifest
	fi
done
which="every byte"
[ "$stride" -gt 1 ] && which="every ${stride}th byte and each extent's last"
echo "flip-sweep: $n single-byte flips ($which of $meta HDF5 metadata bytes and $msize manifest bytes)"
echo "verify:      $v_caught caught, $v_crash crashed, $v_pass passed and loadable, $v_unloadable passed but unloadable, $v_other other"
echo "--load auto: $a_caught fell back to the tag before, $a_crash crashed, $a_pass took the flipped tag and trained, $a_unloadable took it and failed, $a_other other"
