#!/bin/bash
# comm-busbw.sh - ds-train throughput and communication on 1, 2 and 4 ranks
# (benchmark, not a test; it never fails on a figure).
#
#   bench/comm-busbw.sh [STEPS] [MODEL] [REPEAT]
#                       (defaults: 30, share/models/gpt-test.json, 3)
#
# Every figure is the best of REPEAT runs (the ds-train run and the raw run
# alternate), since other work on the machine only ever slows a run down;
# the load average at the start is printed with the results.
#
# Part 1, per world size N and ZeRO stage 0-3 (overlap_comm false, so every
# reduction is timed blocking): tokens/s over the last 10 steps, and the
# busbw that comms_logger reports for the gradient all_reduce buckets at
# stages 0-1 (reduce_bucket_size 10000 elements = 40000 bytes; column
# logger_train), next to a raw MPI_Allreduce of the same size and number of
# calls measured right after in the same run by bench/comm-raw over the
# buckets of a model-sized buffer, as the engine walks its gradients
# (column raw: the machine's ceiling for that message).  All are
# 10%-trimmed means of per-call busbw, DeepSpeed's S/t x 2(n-1)/n.
# comm-raw also runs the same calls in a tight loop through libds's
# communicator and the logger's recording (column logger_loop):
# loop/raw is what the logger and the comm layer cost; train/raw adds what
# a training step does to the calls (ranks reaching the first bucket apart
# after backward, preemption on a shared machine).  Stages 2-3 reduce with
# reduce_scatter, so they have no bucket all_reduce to compare.
#
# Part 2, overlap_comm false vs true at stages 0 and 2 on 2 and 4 ranks:
# tokens/s and, from the wall_clock_breakdown line, the time gradient
# reductions were in flight, the time the engine waited on them, and the
# difference hidden behind backward (sums over the run).
#
# Part 3, the compressed allreduce of the 1-bit optimizers (issue 22) on 2
# and 4 ranks, by bench/comm-compressed: its effective busbw (DeepSpeed's
# all_reduce formula on the fp32 bytes it stands in for) next to a raw
# MPI_Allreduce of the same fp32 buffer measured in the same run, for the
# model's gradients and for 4 and 32 MiB, and the bytes each rank hands
# its collectives against the fp32 size.  Within one node MPI moves bytes
# through shared memory faster than the packing costs, so the ratio says
# where compression pays: where the network, not the copy, is the ceiling.
#
# Micro batch 4 per rank, GA 1 (global batch 4N: each rank's work is the
# same whatever N).  Ranks share this machine's cores (mpirun
# --oversubscribe, one OpenMP thread each), so N > cores measures
# oversubscription too.  DS_TOOLS: the build's tools/ (default ./tools),
# DS_BENCH: its bench/ (default ./bench).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
tools=${DS_TOOLS:-$here/tools}
bench=${DS_BENCH:-$here/bench}
steps=${1:-30}
model=${2:-$here/share/models/gpt-test.json}
repeat=${3:-3}
bucket=10000
for t in jq "$tools/ds-train" "$bench/comm-raw" "$bench/comm-compressed" mpirun; do
	command -v "$t" >/dev/null || { echo "$0: $t not found (set DS_TOOLS / DS_BENCH; the helpers need an MPI build: make bench/comm-raw bench/comm-compressed)" >&2; exit 2; }
done
mpirun=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# DeepSpeed's convert_size, to find the bucket's row in the summary
size() {
	awk -v b="$1" 'BEGIN { split("B KB MB GB", u, " "); i = int(log(b) / log(1024))
		v = sprintf("%.2f", b / 1024 ^ i); sub(/0$/, "", v); print v " " u[i + 1] }'
}

# run N STAGE OVERLAP: ds-train with comms_logger and wall_clock_breakdown;
# stdout in $work/out, stderr in $work/err
run() {
	local n=$1 st=$2 ov=$3 s3=""
	[ "$st" -eq 3 ] && s3=', "stage3_param_persistence_threshold": 0'
	cat >"$work/ds.json" <<EOF
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "steps_per_print": 10,
 "wall_clock_breakdown": true, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
 "zero_optimization": {"stage": $st, "reduce_bucket_size": $bucket, "overlap_comm": $ov$s3},
 "comms_logger": {"enabled": true}}
EOF
	local cmd=("$tools/ds-train" --deepspeed_config "$work/ds.json" --model "$model" --train-iters "$steps" --peak-gflops 1)
	if [ "$n" -eq 1 ]; then
		OMP_NUM_THREADS=1 "${cmd[@]}" >"$work/out" 2>"$work/err"
	else
		"${mpirun[@]}" -np "$n" "${cmd[@]}" >"$work/out" 2>"$work/err"
	fi || { echo "$0: ds-train failed at $n ranks, stage $st:" >&2; tail -3 "$work/err" >&2; exit 1; }
}

tokens() { grep '^step ' "$work/out" | tail -1 | sed 's/.*| tokens\/s \([0-9.]*\) |.*/\1/'; }

# the summary row of op OP with message size SIZE: "count busbw"
row() {
	awk -v op="$1" -v sz="$2" '
		/^Comm\. Op/ { t = 1; next }
		t && /^[^ ]/ { cur = $0; sub(/ +$/, "", cur); next }
		t && cur == op { s = substr($0, 21, 20); sub(/ +$/, "", s)
			if (s == sz) print substr($0, 41, 20) + 0, substr($0, 121, 20) + 0 }' "$work/out"
}

best() { awk -v a="$1" -v b="$2" 'BEGIN { print (b == "" || a + 0 > b + 0) ? a : b }'; }

params=$("$tools/ds-train" --check --json --model "$model" | jq '.memory.num_params' 2>/dev/null || echo 0)
echo "# comm-busbw: ds-train on $(basename "$model") ($params parameters), micro batch 4 per rank, $steps steps, AdamW fp32; best of $repeat runs"
echo "# machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "# all_reduce buckets of $bucket elements ($((bucket * 4)) bytes = $(size $((bucket * 4)))); raw = MPI_Allreduce of the same size and count in this run"
table_row() { printf '%-6s %-6s %-10s %-6s %-13s %-13s %-10s %-10s %-10s\n' "$@"; }
table_row ranks stage tokens/s calls logger_train logger_loop raw train/raw loop/raw
for n in 1 2 4; do
	for st in 0 1 2 3; do
		tok="" bus="" raw="" loop="" calls=""
		for ((k = 0; k < repeat; k++)); do
			run "$n" "$st" false
			tok=$(best "$(tokens)" "$tok")
			read -r c b < <(row all_reduce "$(size $((bucket * 4)))") || true
			[ -n "${c:-}" ] || continue
			calls=$c bus=$(best "$b" "$bus")
			c=""
			[ "$n" -gt 1 ] || continue
			out=$("${mpirun[@]}" -np "$n" "$bench/comm-raw" $((bucket * 4)) "$calls" 20 $((params * 4)))
			raw=$(best "$(grep '^raw' <<<"$out" | sed 's/.*busbw (Gbps) //')" "$raw")
			loop=$(best "$(grep '^ds_comm' <<<"$out" | sed 's/.*busbw (Gbps) //')" "$loop")
		done
		if [ -n "$raw" ]; then
			table_row "$n" "$st" "$tok" "$calls" "$bus" "$loop" "$raw" \
				"$(awk -v a="$bus" -v b="$raw" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')" \
				"$(awk -v a="$loop" -v b="$raw" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
		else
			table_row "$n" "$st" "$tok" - - - - - -
		fi
	done
done

echo
echo "# overlap_comm: gradient reductions in flight, waited on and hidden (ms, sums over $steps steps) of the fastest of $repeat runs"
printf '%-6s %-6s %-8s %-12s %-12s %-12s %-12s\n' ranks stage overlap tokens/s in_flight waited hidden
for n in 2 4; do
	for st in 0 2; do
		for ov in false true; do
			tok="" line=""
			for ((k = 0; k < repeat; k++)); do
				run "$n" "$st" "$ov"
				t=$(tokens)
				[ "$(best "$t" "$tok")" = "$tok" ] && continue
				tok=$t
				line=$(grep '^grad reduction' "$work/err" | awk -F' [|] ' '
					{ for (i = 2; i <= 4; i++) { split($i, kv, ": "); s[i] += kv[2] } }
					END { printf "%.2f %.2f %.2f\n", s[2], s[3], s[4] }')
			done
			read -r fl wt hd <<<"$line"
			printf '%-6s %-6s %-8s %-12s %-12s %-12s %-12s\n' "$n" "$st" "$ov" "$tok" "$fl" "$wt" "$hd"
		done
	done
done

echo
echo "# compressed allreduce (1-bit optimizers) against raw MPI_Allreduce of the same fp32 bytes, best of $repeat rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-10s %-12s %-14s %-10s %-12s\n' ranks bytes raw_busbw compressed_eff compr/raw sent_1/x
for n in 2 4; do
	for b in $((params * 4)) $((4 << 20)) $((32 << 20)); do
		out=$("${mpirun[@]}" -np "$n" "$bench/comm-compressed" "$b" 20 3 "$repeat")
		raw=$(grep '^raw' <<<"$out" | sed 's/.*busbw (Gbps) //')
		cmp=$(grep '^compressed' <<<"$out" | sed 's/.*effective busbw (Gbps) \([0-9.]*\).*/\1/')
		sent=$(grep '^compressed' <<<"$out" | sed 's/.*(1\/\([0-9.]*\))$/\1/')
		printf '%-6s %-10s %-12s %-14s %-10s %-12s\n' "$n" "$b" "$raw" "$cmp" \
			"$(awk -v a="$cmp" -v b="$raw" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')" "$sent"
	done
done
