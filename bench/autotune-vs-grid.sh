#!/bin/bash
# autotune-vs-grid.sh - ds-autotune's model_based tuner against the exhaustive
# grid over the same space (ZeRO stages 0-3 x micro batches), on this machine.
#
#   bench/autotune-vs-grid.sh [MODEL] [MAX_MBS] [NP]   (defaults: share/models/gpt-tiny.json, 32, 1)
#
# 1. gridsearch with early stopping off: every point runs (the grid's best);
# 2. model_based with DeepSpeed's default early stopping (5);
# 3. both chosen configs re-measured REPEAT times (default 3) by plain
#    ds-train runs of 12 steps (metrics over steps 3..12), alternating, so one
#    lucky trial does not decide; the medians are compared.
# Prints trials used by each and the chosen config's throughput as a fraction
# of the grid's best.  A benchmark, not a test: it never fails on a ratio.
# Needs jq.  Set DS_TOOLS to the build's tools/ directory; KEEP=1 keeps the
# work directory (both results dirs, summary.csv of each) and names it.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
tools=${DS_TOOLS:-$here/tools}
model=${1:-$here/share/models/gpt-tiny.json}
maxmbs=${2:-32}
np=${3:-1}
repeat=${REPEAT:-3}
for t in jq "$tools/ds-autotune" "$tools/ds-train"; do
	command -v "$t" >/dev/null || { echo "$0: $t not found (set DS_TOOLS)" >&2; exit 2; }
done
work=$(mktemp -d)
if [ -n "${KEEP:-}" ]; then echo "# work directory kept: $work" >&2; else trap 'rm -rf "$work"' EXIT; fi

cfg() { # tuner early_stop
	cat <<-EOF
	{
	  "train_micro_batch_size_per_gpu": "auto",
	  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
	  "zero_optimization": {"stage": "auto"},
	  "autotuning": {
	    "enabled": true, "overwrite": true, "metric": "throughput",
	    "start_profile_step": 2, "end_profile_step": 4,
	    "max_train_micro_batch_size_per_gpu": $maxmbs,
	    "tuner_type": "$1", "tuner_early_stopping": $2, "tuner_num_trials": 200
	  }
	}
	EOF
}

run_tuner() { # name tuner early_stop
	cfg "$2" "$3" > "$work/$1.json"
	local t0=$SECONDS
	"$tools/ds-autotune" -q -c "$work/$1.json" -m "$model" --np "$np" --results-dir "$work/$1" > "$work/$1.txt"
	echo "$((SECONDS - t0))"
}

tg=$(run_tuner grid gridsearch 1000)
tm=$(run_tuner model model_based 5)
trials() { awk -F, 'NR > 1 && $9 > 0' "$work/$1/summary.csv" | wc -l; }
points() { awk -F, 'NR > 1 && $8 != "pruned"' "$work/$1/summary.csv" | wc -l; }
best() { awk -F, '$11 == 1 { print $1 }' "$work/$1/summary.csv"; }
ng=$(trials grid) nm=$(trials model) np_=$(points grid)
bg=$(best grid) bm=$(best model)

launch=()
if [ "$np" -gt 1 ]; then
	launch=(mpirun -np "$np" --oversubscribe --bind-to none)
	[ "$(id -u)" = 0 ] && launch+=(--allow-run-as-root)
fi
measure() { # optimal config -> samples/s over steps 3..12
	jq '. + {autotuning: {start_profile_step: 3, end_profile_step: 12}}' "$1" > "$work/m.json"
	"${launch[@]}" "$tools/ds-train" --deepspeed_config "$work/m.json" --model "$model" --train-iters 12 \
		--metrics-json "$work/m.out" > /dev/null 2>&1
	jq .throughput "$work/m.out"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
: > "$work/g" ; : > "$work/m"
for _ in $(seq "$repeat"); do
	measure "$work/grid/ds_config_optimal.json" >> "$work/g"
	measure "$work/model/ds_config_optimal.json" >> "$work/m"
done
mg=$(median < "$work/g") mm=$(median < "$work/m")

echo "# model $(basename "$model"), $np rank(s), micro batch <= $maxmbs, $np_ points after pruning"
printf "%-12s %7s %9s %-22s %14s\n" tuner trials wall_s best re-measured_sps
printf "%-12s %7d %9d %-22s %14.2f\n" gridsearch "$ng" "$tg" "$bg" "$mg"
printf "%-12s %7d %9d %-22s %14.2f\n" model_based "$nm" "$tm" "$bm" "$mm"
awk -v a="$mm" -v b="$mg" -v x="$nm" -v y="$ng" 'BEGIN {
	printf "# model_based reaches %.1f%% of the grid best'"'"'s throughput with %.0f%% of its trials (target: >= 95%%, <= 40%%)\n",
		100 * a / b, 100 * x / y }'
