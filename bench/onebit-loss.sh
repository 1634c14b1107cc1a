#!/bin/bash
# onebit-loss.sh - the 1-bit optimizers against their uncompressed
# counterparts on the test model (benchmark, not a test; it prints figures
# and fails only when a run fails).
#
#   bench/onebit-loss.sh [STEPS] [MODEL] [RANKS...]
#                        (defaults: 300, share/models/gpt-test.json, 2 4)
#
# Per world size: Adam, OneBitAdam and ZeroOneAdam at lr 1e-3, Lamb and
# OneBitLamb at lr 3e-2 (Lamb's trust ratio wants a larger lr), all with 16
# samples per step, a linear lr warm-up over 50 steps, clipping at 1 and
# weight decay 0.01; freeze_step and var_freeze_step at half the run (as
# tests/mpi/onebit.bats: 100 of 200 steps), var_update_scaler 64 (DeepSpeed's 16 suits runs of 10^5 steps; at a few
# hundred it would leave the variance nearly unset).  Printed per run: the
# final loss (the mean of the last 20 steps' losses) and its difference to
# the counterpart's (the issue's bound is 3%), the bytes per step each rank
# hands its collectives after the freeze against the fp32 gradient
# all_reduce's (from comms_logger's summary), and the wall time.  The load
# average at the start is printed with the results: ranks share this
# machine's cores (one OpenMP thread each).  DS_TOOLS: the build's tools/
# (default ./tools).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
tools=${DS_TOOLS:-$here/tools}
steps=${1:-300}
model=${2:-$here/share/models/gpt-test.json}
shift $(($# > 2 ? 2 : $#))
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(2 4)
freeze=$((steps / 2))
for t in "$tools/ds-train" mpirun; do
	command -v "$t" >/dev/null || { echo "$0: $t not found (set DS_TOOLS)" >&2; exit 2; }
done
mpirun=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run N TYPE LR PARAMS: DIR of the run's outputs on stdout
run() {
	local n=$1 t=$2 lr=$3 p=$4 d="$work/$1-$2"
	mkdir -p "$d"
	cat >"$d/ds.json" <<EOF
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": $((16 / n)), "steps_per_print": 1000, "gradient_clipping": 1.0,
 "optimizer": {"type": "$t", "params": {"lr": $lr, "weight_decay": 0.01$p}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": $lr, "warmup_num_steps": 50, "warmup_type": "linear"}},
 "csv_monitor": {"enabled": true, "output_path": "$d/csv", "job_name": "run"}, "comms_logger": {"enabled": true}}
EOF
	local t0 t1
	t0=$(date +%s.%N)
	"${mpirun[@]}" -np "$n" "$tools/ds-train" --deepspeed_config "$d/ds.json" --model "$model" --train-iters "$steps" \
		--peak-gflops 1 >"$d/out" 2>"$d/err" || { echo "$0: $t at $n ranks failed:" >&2; tail -3 "$d/err" >&2; exit 1; }
	t1=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", b - a }' >"$d/secs"
	echo "$d"
}

mean20() { tail -n 20 "$1/csv/run/Train_Samples_train_loss.csv" | awk -F, '{ s += $2 } END { printf "%.4f", s / NR }'; }

# the summary's rows of op OP as "bytes count"
rows() {
	awk -v op="$1" '
		function val(s,  v, u) { v = s + 0; u = s; sub(/^[0-9.]+ */, "", u)
			return v * (u == "KB" ? 1024 : u == "MB" ? 1048576 : u == "GB" ? 1073741824 : 1) }
		/^Comm\. Op/ { t = 1; next }
		!t { next }
		/^[^ ]/ { cur = $0; sub(/ +$/, "", cur); next }
		cur == op { s = substr($0, 21, 20); sub(/ +$/, "", s); printf "%.0f %d\n", val(s), substr($0, 41, 20) + 0 }' "$2/out"
}

# "fp32_bytes compressed_bytes_per_step" of a run: the gradient all_reduce
# (the largest), and the all_to_all and all_gather bytes over the steps
# that did not allreduce
traffic() {
	local grad n
	read -r grad n < <(rows all_reduce "$1" | sort -n | tail -n 1)
	{ rows all_to_all_single "$1"; rows all_gather "$1"; } |
		awk -v g="$grad" -v s=$((steps - n)) '{ b += $1 * $2 } END { printf "%d %.0f\n", g, (s > 0 ? b / s : 0) }'
}

echo "# onebit-loss: $(basename "$model"), $steps steps, 16 samples per step, freeze at step $freeze; final loss = mean of the last 20 losses"
echo "# machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
printf '%-6s %-12s %-9s %-10s %-9s %-12s %-14s %-9s %-8s\n' ranks optimizer lr final_loss vs_base fp32_B/step compressed_B/step ratio secs
for n in "${ranks[@]}"; do
	for pair in "Adam 0.001" "OneBitAdam 0.001" "ZeroOneAdam 0.001" "Lamb 0.03" "OneBitLamb 0.03"; do
		read -r t lr <<<"$pair"
		case $t in
		OneBitAdam | OneBitLamb) p=", \"freeze_step\": $freeze" ;;
		ZeroOneAdam) p=", \"var_freeze_step\": $freeze, \"var_update_scaler\": 64" ;;
		*) p="" ;;
		esac
		d=$(run "$n" "$t" "$lr" "$p")
		case $t in
		Adam | Lamb) base=$d vs=- fp="" cb="" ratio=- ;;
		*)
			vs=$(awk -v a="$(mean20 "$d")" -v b="$(mean20 "$base")" 'BEGIN { printf "%+.2f%%", 100 * (a - b) / b }')
			read -r fp cb < <(traffic "$d")
			ratio=$(awk -v a="$cb" -v b="$fp" 'BEGIN { printf "1/%.1f", b / a }')
			;;
		esac
		printf '%-6s %-12s %-9s %-10s %-9s %-12s %-14s %-9s %-8s\n' "$n" "$t" "$lr" "$(mean20 "$d")" "$vs" \
			"${fp:--}" "${cb:--}" "$ratio" "$(cat "$d/secs")"
	done
done
