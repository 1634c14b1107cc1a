#!/bin/bash
# crash-trials.sh - issue 16's bar for checkpoints: N trials of a ds-train
# run (the small test model, a save every 3 steps) killed with SIGKILL and
# requeued with --load auto.  Nine in ten are killed by this script at a
# random moment of the run; every tenth kills itself inside a save, at a
# random point of a random save (DS_TEST_FAULT_CKPT_KILL: entering the
# save, at a random tensor write, entering commit, with state.h5 closed,
# with the manifest written, with the tag renamed but `latest` not yet).
# A trial passes when the requeue exits 0, resumes from the newest finished
# tag (nothing lost: the one the killed run last renamed, or from scratch
# when there was none), and its first step's loss is the uninterrupted
# run's loss of that step, bit for bit (CSV monitor, full precision).
#
#   bench/crash-trials.sh [N]   (default 200)
#
# Prints a line per trial, then "M of N resumed with the uninterrupted run's
# next loss" -- the ceiling is N.  DS_TOOLS: the build's tools/ (default
# ../tools from here, i.e. run it from the build tree's bench/ or set it).
# A benchmark, not a test: it reports, it never fails on the figure.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
tools=${DS_TOOLS:-$here/tools}
src=${DS_SRCDIR:-$here}
[ -x "$tools/ds-train" ] || tools=$here/build/tools
[ -x "$tools/ds-train" ] || { echo "$0: no ds-train in $tools (set DS_TOOLS)" >&2; exit 2; }
model=$src/share/models/gpt-test.json
[ -f "$model" ] || model=$(cd "$tools/.." && pwd)/../share/models/gpt-test.json
[ -f "$model" ] || { echo "$0: share/models/gpt-test.json not found (set DS_SRCDIR)" >&2; exit 2; }
n=${1:-200}
RANDOM=${CRASH_SEED:-$$}   # CRASH_SEED=S repeats a series of trials
iters=18
every=3
work=$(mktemp -d "${TMPDIR:-/tmp}/crash-trials.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
cat >ds.json <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "steps_per_print": 1000,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "csv_monitor": {"enabled": true, "output_path": "csv", "job_name": "run"}}
JSON
# ds-train itself (exec: in the background, $! is its pid, not a subshell's)
train() { OMP_NUM_THREADS=1 exec "$tools/ds-train" --deepspeed_config ds.json --model "$model" --peak-gflops 1 \
	--train-iters $iters --save ck --save-interval $every "$@"; }
# the loss of step S (1-based): CSV rows are keyed by the samples before it (8 per step)
loss_at() { awk -F, -v s="$2" '$1 == (s - 1) * 8 { print $2 }' "$1"; }

# the uninterrupted run, and how long it takes (the shortest of three: the
# first pays for cold caches)
span=
for _ in 1 2 3; do
	rm -rf ck csv
	t0=$(date +%s.%N)
	(train) >/dev/null 2>ref.err || { cat ref.err >&2; exit 1; }
	t1=$(date +%s.%N)
	ms=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%d", (b - a) * 1000 }')
	if [ -z "$span" ] || [ "$ms" -lt "$span" ]; then span=$ms; fi
done
cp csv/run/Train_Samples_train_loss.csv ref.csv
echo "# uninterrupted: $iters steps, a save every $every, $span ms; trials kill within that span"

points=(create write commit close rename latest)
pass=0 in_save=0
for ((i = 1; i <= n; i++)); do
	rm -rf ck csv
	if ((i % 10 == 0)); then
		p=${points[RANDOM % ${#points[@]}]}
		nth=$((RANDOM % (iters / every) + 1))
		[ "$p" = write ] && nth=$((RANDOM % (84 * (iters / every)) + 1))   # 84 tensor writes per save
		how="inside a save ($p:$nth)"
		in_save=$((in_save + 1))
		{ (DS_TEST_FAULT_CKPT_KILL=0:$p:$nth train) >/dev/null 2>run.err; } 2>/dev/null || true
	else
		ms=$((RANDOM * 32768 + RANDOM))
		ms=$((ms % (span * 80 / 100)))   # the runs vary: few should end before the kill
		how="at $ms ms"
		train >/dev/null 2>run.err &
		pid=$!
		sleep "$(awk -v m="$ms" 'BEGIN { printf "%.3f", m / 1000 }')"
		kill -9 $pid 2>/dev/null || true
		wait $pid 2>/dev/null || true
	fi
	# the newest finished tag the killed run left
	want=0
	for t in ck/global_step*; do
		case $t in *.tmp | "ck/global_step*") continue ;; esac
		s=${t#ck/global_step}
		((s > want)) && want=$s
	done
	rm -rf csv
	if ! (train --load auto --exit-interval 1) >/dev/null 2>requeue.err; then
		echo "trial $i: killed $how -> the requeue failed: $(grep 'ds-train: ' requeue.err | tail -1)"
		continue
	fi
	got=$(sed -n 's/^loaded ck\/global_step\([0-9]*\): .*/\1/p' requeue.err)
	got=${got:-0}
	if [ "$got" -ne "$want" ]; then
		echo "trial $i: killed $how -> resumed from step $got, but global_step$want was finished: $(grep skipped requeue.err | head -1)"
		continue
	fi
	if [ "$got" -ge $iters ]; then  # killed after the last save: nothing left to run
		pass=$((pass + 1))
		echo "trial $i: killed $how -> global_step$got was the end of the run: ok"
		continue
	fi
	s=$((got + 1))
	a=$(loss_at csv/run/Train_Samples_train_loss.csv $s) b=$(loss_at ref.csv $s)
	if [ -n "$a" ] && [ "$a" = "$b" ]; then
		pass=$((pass + 1))
		echo "trial $i: killed $how -> resumed from step $got, step $s loss $a = uninterrupted: ok"
	else
		echo "trial $i: killed $how -> resumed from step $got, step $s loss '$a', uninterrupted '$b': DIFFERS"
	fi
done
echo "crash-trials: $pass of $n resumed with the uninterrupted run's next loss ($in_save killed inside a save, $((n - in_save)) at random moments)"
