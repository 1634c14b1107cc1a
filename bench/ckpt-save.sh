#!/bin/bash
# ckpt-save.sh - seconds and GB/s of a ds-train checkpoint save of GPT-2 124M
# (weights + AdamW's exp_avg and exp_avg_sq, fp32: ~1.5 GB in one state.h5)
# at 1, 2 and 4 ranks and the given ZeRO stages, next to this machine's
# ceiling measured in the same run: dd writing the same number of bytes to
# the same directory and fsyncing them (conv=fsync).
#
#   bench/ckpt-save.sh [STAGES] [REPS]   (defaults: "0 2", 2)
#
# The save time is what ds-train logs ("saved DIR/global_step1 in S s":
# create, every rank's writes, checksums, flush, vote, rename, `latest`).
# The model runs one step at sequence 32 (its parameters do not depend on
# it).  DS_TOOLS: the build's tools/; DS_OLD_TOOLS (optional): another
# build's tools/, timed alternately with it (e.g. before parallel saves).
# DS_BENCH_DIR: where to write (default: a fresh directory under /tmp).
# A benchmark, not a test: it never fails on a figure.  Needs jq, and
# mpirun for N > 1 (OpenMPI, --oversubscribe).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
tools=${DS_TOOLS:-$here/tools}
stages=${1:-0 2}
reps=${2:-2}
for t in jq "$tools/ds-train"; do
	command -v "$t" >/dev/null || { echo "$0: $t not found (set DS_TOOLS)" >&2; exit 2; }
done
mpirun=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
work=$(mktemp -d "${DS_BENCH_DIR:-/tmp}/ckpt-save.XXXXXX")
trap 'rm -rf "$work"' EXIT
jq '.seq_length = 32' "$here/share/models/gpt2-124m.json" >"$work/model.json"

# save_s TOOLS N STAGE: seconds of the save at step 1, and the file's bytes
save_s() {
	local tools=$1 n=$2 stage=$3 d="$work/run"
	rm -rf "$d" && mkdir -p "$d"
	cat >"$d/ds.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": $((4 / n)), "steps_per_print": 1000,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "zero_optimization": {"stage": $stage}}
JSON
	local cmd=("$tools/ds-train" --deepspeed_config "$d/ds.json" --model "$work/model.json" --train-iters 1
		   --save "$d/ckpt")
	if [ "$n" -eq 1 ]; then
		"${cmd[@]}" >/dev/null 2>"$d/err" || { tail -3 "$d/err" >&2; return 1; }
	else
		"${mpirun[@]}" -np "$n" -x OMP_NUM_THREADS=1 "${cmd[@]}" >/dev/null 2>"$d/err" ||
			{ tail -3 "$d/err" >&2; return 1; }
	fi
	local s
	s=$(sed -n 's/.*saved .*global_step1 in \([0-9.]*\) s.*/\1/p' "$d/err" | tail -1)
	echo "$s $(stat -c %s "$d/ckpt/global_step1/state.h5")"
}

# the ceiling: dd of the same bytes with fsync, in the same directory
probe=$(save_s "$tools" 1 0)
bytes=${probe#* }
dd_s() {
	local t0 t1
	t0=$(date +%s.%N)
	dd if=/dev/zero of="$work/dd.bin" bs=4M count=$(((bytes + 4194303) / 4194304)) conv=fsync status=none
	t1=$(date +%s.%N)
	rm -f "$work/dd.bin"
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
}
gbs() { awk -v b="$bytes" -v s="$1" 'BEGIN { printf "%.2f", (s > 0 ? b / s / 1e9 : 0) }'; }
med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { printf "%s", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# checkpoint save of GPT-2 124M (AdamW fp32, $(awk -v b="$bytes" 'BEGIN { printf "%.2f", b / 1e9 }') GB state.h5), median of $reps, on $(nproc) cores"
ds=()
for _ in $(seq "$reps"); do ds+=("$(dd_s)"); done
dm=$(echo "${ds[*]}" | med)
echo "# ceiling: dd bs=4M conv=fsync of the same bytes: $dm s = $(gbs "$dm") GB/s"
printf "# %-6s %5s %5s %9s %7s %9s\n" build ranks stage save_s GB/s of_dd
builds=(new)
[ -n "${DS_OLD_TOOLS:-}" ] && builds+=(old)
for stage in $stages; do
	for n in 1 2 4; do
		declare -A t=()
		for _ in $(seq "$reps"); do
			for b in "${builds[@]}"; do
				bt=$tools
				[ "$b" = old ] && bt=$DS_OLD_TOOLS
				x=$(save_s "$bt" "$n" "$stage") || x="nan 0"
				t[$b]="${t[$b]:-} ${x%% *}"
			done
		done
		for b in "${builds[@]}"; do
			m=$(echo "${t[$b]}" | med)
			printf "  %-6s %5d %5d %9s %7s %9s\n" "$b" "$n" "$stage" "$m" "$(gbs "$m")" \
				"$(awk -v m="$m" -v d="$dm" 'BEGIN { printf "%.2f", (m > 0 ? d / m : 0) }')"
		done
		unset t
	done
done
