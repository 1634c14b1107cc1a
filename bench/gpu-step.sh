#!/bin/bash
# gpu-step.sh - GPT-2 124M and 350M training steps on one GPU: ds-train
# --device cuda next to PyTorch (eager and torch.compile) training the same
# model on the same shape, with tokens/s, MFU and peak device memory (issue
# 18's bench/gpu-step).  Not a test: it asserts nothing.
#
# Usage: bench/gpu-step.sh [--precision bf16|fp32] [--models M1,M2] [--batch B]
#                          [--warmup N] [--steps N] [--budget S] [--peak-tflops X]
#        bench/gpu-step.sh --dry-run [same options]
#
#   --precision   what to train in (default bf16).  Where ds-train --device
#                 cuda refuses it (exit 3) the bench says so in one line and
#                 runs dstk in fp32, labelled fp32 (and, budget allowing, adds
#                 a torch eager fp32 row to compare it with); PyTorch keeps
#                 the asked precision.  bf16 is autocast on the PyTorch side
#                 (fp32 master weights, bf16 products: dstk's bf16)
#   --models      model JSONs, by name under share/models or by path
#                 (default gpt2-124m,gpt2-350m)
#   --batch       micro batch (default 16; T is the model's seq_length, 1024)
#   --warmup/--steps  untimed then timed training steps (default 3 and 10:
#                 a 350M bf16 step is ~0.1 s on an H100, an fp32 one ~1 s, so
#                 13 steps of each part fit; torch.compile's compile time,
#                 tens of seconds, is excluded from tokens/s and printed)
#   --budget      seconds for the whole bench (default 240); each part also
#                 has its own timeout (ds-train 120 s, eager 120 s, compile
#                 180 s), cut to what is left, and a part that would start
#                 with under 15 s left is skipped and listed as such.  Parts
#                 run in order of worth: dstk and eager 350M, dstk and eager
#                 124M, compile 350M, 124M, then eager fp32 where dstk fell
#                 back (the last model named is the target's, run first)
#   --peak-tflops MFU reference instead of the measured ceiling
#   --dry-run     check the plumbing without a GPU: dstk on --device cpu and
#                 PyTorch on the CPU (where `import torch` works) on gpt-test
#                 at T 64, micro batch 4, 2 + 2 steps; memory is peak RSS
#
# MFU = model FLOP/s / the device's bf16 matrix-product rate measured in the
# same run (bench/cuda-kernels ceiling: cuBLAS bf16 GEMM at 8192^3, best of
# 10).  Model FLOPs are lib/model/count's, the convention of ds-train's MFU,
# ds-profile and bench/gpt-step: 3 x forward, forward = 2 x tokens x in x
# out per Linear + the attention products QK^T and AV without causal
# halving + the element-wise ops; the same count (ds-profile's) for both
# sides.  Peak device memory: nvidia-smi's memory.used over the idle
# baseline, sampled every 0.2 s while the part runs (the whole process:
# CUDA context, cuBLAS workspace, allocator pools), for both sides; PyTorch
# also gives torch.cuda.max_memory_allocated.  The PyTorch model is checked
# to have dstk's parameter count (a note where not).  Raw output of every part
# follows the table.
# Binaries: $DS_BUILDDIR/{tools/ds-train,tools/ds-profile,bench/cuda-kernels}
# (DS_BUILDDIR defaults to the source tree, an in-tree build); PYTHON
# (default python3, or /usr/bin/python3 where only that one imports torch)
# runs bench/gpu-step-torch.py and reads the JSON files.  Without a GPU (no
# nvidia-smi, or it lists none) and without --dry-run: says so, exits 0.
set -u -o pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${DS_BUILDDIR:-$top}
py=${PYTHON:-python3}
# Debian's python3-torch is /usr/bin/python3's where another python3 is first
if [ -z "${PYTHON:-}" ] && ! python3 -c 'import torch' >/dev/null 2>&1 && [ -x /usr/bin/python3 ] &&
	/usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
	py=/usr/bin/python3
fi
prec=bf16 models=gpt2-124m,gpt2-350m batch=16 warmup=3 steps=10 budget=240 peak='' dry=0
batch_set=0 warmup_set=0 steps_set=0 models_set=0

die() { echo "gpu-step: $*" >&2; exit 2; }
posint() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 '$2': expected a positive integer"; }

while [ $# -gt 0 ]; do
	case $1 in
	--dry-run) dry=1; shift; continue ;;
	-h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	--precision | --models | --batch | --warmup | --steps | --budget | --peak-tflops)
		[ $# -ge 2 ] || die "$1 needs a value" ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	case $1 in
	--precision) [[ $2 =~ ^(bf16|fp32)$ ]] || die "--precision '$2': give bf16 or fp32"; prec=$2 ;;
	--models) models=$2; models_set=1 ;;
	--batch) posint "$1" "$2"; batch=$2; batch_set=1 ;;
	--warmup) posint "$1" "$2"; warmup=$2; warmup_set=1 ;;
	--steps) posint "$1" "$2"; steps=$2; steps_set=1 ;;
	--budget) posint "$1" "$2"; budget=$2 ;;
	--peak-tflops) [[ $2 =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--peak-tflops '$2': expected a number"; peak=$2 ;;
	esac
	shift 2
done

dstrain=$build/tools/ds-train dsprofile=$build/tools/ds-profile kernels=$build/bench/cuda-kernels
for b in "$dstrain" "$dsprofile"; do
	[ -x "$b" ] || die "no $b: build dstk (make tools/ds-train tools/ds-profile) or set DS_BUILDDIR"
done
tmp=$(mktemp -d /tmp/gpu-step.XXXXXX) || exit 1
sampler=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	[ -n "$sampler" ] && kill "$sampler" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

if [ $dry = 1 ]; then
	device=cpu
	[ $models_set = 1 ] || models=gpt-test
	[ $batch_set = 1 ] || batch=4
	[ $warmup_set = 1 ] || warmup=2
	[ $steps_set = 1 ] || steps=2
	seq_override=64
else
	if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
		echo "gpu-step: no CUDA device here (nvidia-smi lists none); nothing measured (--dry-run checks the plumbing on the CPU)"
		exit 0
	fi
	device=cuda
	seq_override=
fi

# value of KEY in a "key value" file, or "-"
kv() { awk -v k="$2" '$1 == k { v = $2 } END { print (v == "" ? "-" : v) }' "$1" 2>/dev/null || echo -; }

# the model JSON of name-or-path $1, with seq_length/max_positions set to
# $seq_override where given, written to $tmp; prints its path
model_json() {
	local src=$1 out
	[ -f "$src" ] || src=$top/share/models/$1.json
	[ -f "$src" ] || die "model '$1': no such file nor share/models/$1.json"
	out=$tmp/model-$(basename "$src")
	"$py" - "$src" "$out" "$seq_override" <<'EOF' || die "model '$1': not a model JSON"
import json, sys
m = json.load(open(sys.argv[1]))
if sys.argv[3]:
    m["seq_length"] = m["max_position_embeddings"] = int(sys.argv[3])
json.dump(m, open(sys.argv[2], "w"), indent=1)
EOF
	echo "$out"
}

# L C NH padded-V T of a model JSON, as dstk pads the vocabulary
model_shape() {
	"$py" - "$1" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
d = m.get("make_vocab_size_divisible_by", 128)
v = -(-m["vocab_size"] // d) * d
print(m["num_layers"], m["hidden_size"], m["num_attention_heads"], v, m["seq_length"])
EOF
}

# the DeepSpeed config of a dstk part: AdamW, clipping 1.0, the metrics
# window over the timed steps
ds_config() { # precision file
	local half=
	[ "$1" = bf16 ] && half='"bf16": {"enabled": true},'
	cat >"$2" <<EOF
{
  "train_micro_batch_size_per_gpu": $batch,
  "gradient_accumulation_steps": 1,
  "steps_per_print": $((warmup + steps)),
  "optimizer": {"type": "AdamW", "params": {"lr": 6e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
  "gradient_clipping": 1.0,
  $half
  "autotuning": {"enabled": false, "start_profile_step": $((warmup + 1)), "end_profile_step": $((warmup + steps))}
}
EOF
}

mem_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1 | tr -d ' '; }

# sample memory.used into file $1 (its maximum, MiB) until killed
sample_mem() {
	local max=0 v
	echo 0 >"$1"
	while :; do
		v=$(mem_used)
		if [[ $v =~ ^[0-9]+$ ]] && [ "$v" -gt "$max" ]; then
			max=$v
			echo "$max" >"$1"
		fi
		sleep 0.2
	done
}

# run a part: name timeout cmd...; its output in $tmp/name.log, exit status
# in $tmp/name.rc, peak memory over the idle baseline in $tmp/name.mem
part() {
	local name=$1 limit=$2 left rc idle=0
	shift 2
	left=$((budget - SECONDS))
	[ "$left" -lt "$limit" ] && limit=$left
	if [ "$limit" -lt 15 ]; then
		echo "skipped: $((left > 0 ? left : 0))s of the ${budget}s budget left" >"$tmp/$name.log"
		echo skip >"$tmp/$name.rc"
		return 1
	fi
	if [ "$device" = cuda ]; then
		idle=$(mem_used)
		[[ $idle =~ ^[0-9]+$ ]] || idle=0
		sample_mem "$tmp/$name.max" &
		sampler=$!
	fi
	local t0=$SECONDS
	timeout -k 5 "$limit" "$@" >"$tmp/$name.log" 2>&1
	rc=$?
	echo "gpu-step: [${t0}s] $name: exit $rc after $((SECONDS - t0))s (timeout ${limit}s)"
	echo "$rc" >"$tmp/$name.rc"
	[ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "gpu-step: killed after its ${limit}s timeout" >>"$tmp/$name.log"
	if [ -n "$sampler" ]; then
		kill "$sampler" 2>/dev/null
		wait "$sampler" 2>/dev/null
		sampler=
		echo $(($(cat "$tmp/$name.max" 2>/dev/null || echo 0) - idle)) >"$tmp/$name.mem"
	fi
	return "$rc"
}

# ---- the ceiling --------------------------------------------------------------
if [ -n "$peak" ]; then
	ceil=$peak ceil_how="given (--peak-tflops)"
elif [ "$device" = cuda ] && [ -x "$kernels" ]; then
	part ceiling 60 "$kernels" ceiling
	ceil=$(awk '/^ceiling +bf16 GEMM/ { for (i = 1; i < NF; i++) if ($(i + 1) == "TFLOP/s") v = $i } END { print v }' \
		"$tmp/ceiling.log")
	ceil_how="bf16 GEMM 8192^3 through cuBLAS, best of 10 (bench/cuda-kernels ceiling)"
	[ -n "$ceil" ] || { ceil='' ceil_how="not measured: bench/cuda-kernels ceiling failed (raw output below)"; }
else
	ceil='' ceil_how="not measured (${kernels##*/} $([ "$device" = cuda ] && echo "not built" || echo "needs a GPU"); MFU needs --peak-tflops)"
fi

# ---- the parts ------------------------------------------------------------------
names=() # model names in order
declare -A shape mjson flops dprec nparams
for m in ${models//,/ }; do
	n=$(basename "$m" .json)
	names+=("$n")
	mjson[$n]=$(model_json "$m") || exit 2
	shape[$n]=$(model_shape "${mjson[$n]}") || die "model '$m': cannot read its shape"
	read -r _ _ _ _ T <<<"${shape[$n]}"
	# the FLOPs of one step: ds-profile's forward count x 3 (lib/model/count)
	"$dsprofile" --model "${mjson[$n]}" --batch-size "$batch" --seq-length "$T" --json >"$tmp/$n.profile" 2>&1 ||
		die "ds-profile on $m failed: $(head -1 "$tmp/$n.profile")"
	flops[$n]=$("$py" -c 'import json, sys; print(3 * json.load(open(sys.argv[1]))["summary"]["fwd_flops_per_gpu"])' \
		"$tmp/$n.profile") || die "ds-profile on $m: no summary.fwd_flops_per_gpu"
	nparams[$n]=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["summary"]["params_per_gpu"])' \
		"$tmp/$n.profile")
done

torch_ok=1
if ! timeout 60 "$py" -c 'import torch' >/dev/null 2>&1; then
	torch_ok=0
	echo "gpu-step: PyTorch is not importable by $py here: no PyTorch rows" | tee -a "$tmp/notes"
fi

data=$top/share/data/devils-dictionary.txt
fallback=0
dstk_part() { # model
	local n=$1
	dprec[$n]=$prec
	ds_config "$prec" "$tmp/$n.ds.json"
	part "dstk-$n" 120 "$dstrain" --device "$device" -c "$tmp/$n.ds.json" -m "${mjson[$n]}" --data "$data" \
		--train-iters $((warmup + steps)) --metrics-json "$tmp/dstk-$n.json"
	if [ "$(cat "$tmp/dstk-$n.rc")" = 3 ] && [ "$prec" != fp32 ]; then
		echo "gpu-step: $n: ds-train --device $device refused $prec (exit 3: $(grep -v '^$' "$tmp/dstk-$n.log" | tail -1)); running fp32 instead, labelled fp32" |
			tee -a "$tmp/notes"
		mv "$tmp/dstk-$n.log" "$tmp/dstk-$n.refused.log"
		echo 3 >"$tmp/dstk-$n.refused.rc"
		dprec[$n]=fp32
		fallback=1
		ds_config fp32 "$tmp/$n.ds.json"
		part "dstk-$n" 120 "$dstrain" --device "$device" -c "$tmp/$n.ds.json" -m "${mjson[$n]}" --data "$data" \
			--train-iters $((warmup + steps)) --metrics-json "$tmp/dstk-$n.json"
	fi
}
torch_part() { # name model mode precision timeout
	read -r L C NH V T <<<"${shape[$2]}"
	part "$1" "$5" env PYTHONUNBUFFERED=1 "$py" "$top/bench/gpu-step-torch.py" --layers "$L" --hidden "$C" \
		--heads "$NH" --vocab "$V" --batch "$batch" --seq "$T" --warmup "$warmup" --steps "$steps" \
		--mode "$3" --precision "$4" --device "$device"
}
# in order of worth, the target's model (the last) first: dstk and torch
# eager per model, then torch.compile (its compile takes tens of seconds),
# then the fp32 eager rows of a fallback; the table keeps the models' order
order=()
for ((i = ${#names[@]} - 1; i >= 0; i--)); do order+=("${names[i]}"); done
for n in "${order[@]}"; do
	dstk_part "$n"
	[ $torch_ok = 1 ] && torch_part "eager-$n" "$n" eager "$prec" 120
done
if [ $torch_ok = 1 ]; then
	for n in "${order[@]}"; do torch_part "compile-$n" "$n" compile "$prec" 180; done
	if [ $fallback = 1 ]; then
		for n in "${order[@]}"; do
			[ "${dprec[$n]}" = fp32 ] && torch_part "eager32-$n" "$n" eager fp32 120
		done
	fi
fi

# ---- the table --------------------------------------------------------------------
# dstk's figures from its --metrics-json file: tokens_per_sec (the mean over
# the timed steps of tokens / step wall time), loss_last, peak_rss_bytes
dstk_kv() { # json file -> key value lines
	"$py" - "$1" >"$2" 2>/dev/null <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
print("tokens_per_s", j["tokens_per_sec"])
print("loss", j["loss_last"])
print("steps", j["steps"])
print("peak_rss_bytes", max(j["memory"]["peak_rss_bytes"]))
EOF
	[ "$(kv "$2" steps)" = "$steps" ] ||
		echo "# note: ${1##*/}: ds-train timed $(kv "$2" steps) steps, not $steps"
}

fmt() { awk -v f="$1" -v x="$2" 'BEGIN { if (x == "-" || x == "") print "-"; else printf f "\n", x }'; }

tps_of() { kv "$tmp/$1.kv" tokens_per_s; }

memcol=peak_dev_MiB
[ "$device" = cpu ] && memcol=peak_rss_MiB
{
	echo "# gpu-step: $(date -u +%FT%TZ), commit $(git -C "$top" rev-parse --short HEAD 2>/dev/null || cat "$top/COMMIT" 2>/dev/null || echo '?')"
	if [ "$device" = cuda ]; then
		echo "# device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader -i 0 2>/dev/null)"
	else
		echo "# dry run: --device cpu, no GPU; $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //'), $(nproc) cpus"
	fi
	echo "# ceiling: ${ceil:+$ceil TFLOP/s, }$ceil_how"
	echo "# FLOPs: lib/model/count (ds-profile's forward x 3, as ds-train's MFU and bench/gpt-step): Linear 2*tokens*in*out,"
	echo "#   attention QK^T and AV without causal halving, element-wise ops; micro batch $batch, warm-up $warmup, timed $steps steps"
	if [ "$device" = cuda ]; then
		echo "# $memcol: nvidia-smi memory.used over the idle baseline, every 0.2 s (whole process); peak_alloc_MiB: torch.cuda.max_memory_allocated"
	else
		echo "# $memcol: the process's peak RSS (host)"
	fi
	[ -f "$tmp/notes" ] && sed 's/^/# note: /' "$tmp/notes"
	echo "# bf16 on the PyTorch side is autocast (fp32 master weights and AdamW states, bf16 products); AdamW fused on cuda; TF32 off"
	printf '%-10s %-14s %-14s %10s %9s %9s %6s %13s %14s %9s %9s\n' model side precision tokens/s step_ms TFLOP/s MFU \
		"$memcol" peak_alloc_MiB compile_s loss
	for n in "${names[@]}"; do
		read -r _ _ _ _ T <<<"${shape[$n]}"
		for p in "dstk-$n" "eager-$n" "compile-$n" "eager32-$n"; do
			[ -f "$tmp/$p.rc" ] || continue
			side=${p%%-"$n"} pr=$prec alloc=- comp=- mem=-
			case $side in
			dstk) pr=${dprec[$n]} ;;
			eager32) side=torch-eager pr=fp32; cp "$tmp/$p.log" "$tmp/$p.kv" ;;
			*) side=torch-$side; [ "$pr" = bf16 ] && pr=bf16-autocast; cp "$tmp/$p.log" "$tmp/$p.kv" ;;
			esac
			rc=$(cat "$tmp/$p.rc")
			if [ "$rc" != 0 ]; then
				why=$(grep -m1 '^unavailable' "$tmp/$p.log" | cut -d' ' -f2-)
				[ "$rc" = skip ] && why=$(cat "$tmp/$p.log")
				[ -n "$why" ] || why="exit $rc: $(grep -v '^$' "$tmp/$p.log" | tail -1)"
				printf '%-10s %-14s %-14s %s\n' "$n" "$side" "$pr" "not measured: $why"
				continue
			fi
			[ "$side" = dstk ] && dstk_kv "$tmp/$p.json" "$tmp/$p.kv"
			# the same model on both sides: PyTorch's parameter count is dstk's
			[ "$side" != dstk ] && [ "$(kv "$tmp/$p.kv" params)" != "${nparams[$n]}" ] &&
				echo "# note: $p: PyTorch's model has $(kv "$tmp/$p.kv" params) parameters, dstk's ${nparams[$n]}"
			tps=$(tps_of "$p")
			if [ "$device" = cuda ]; then
				mem=$(cat "$tmp/$p.mem" 2>/dev/null || echo -)
				a=$(kv "$tmp/$p.kv" peak_alloc_bytes)
				[ "$a" != - ] && alloc=$(fmt %.0f "$(awk -v a="$a" 'BEGIN { print a / 1048576 }')")
			else
				a=$(kv "$tmp/$p.kv" peak_rss_bytes)
				[ "$a" != - ] && mem=$(fmt %.0f "$(awk -v a="$a" 'BEGIN { print a / 1048576 }')")
			fi
			comp=$(fmt %.1f "$(kv "$tmp/$p.kv" compile_s)")
			read -r sms tf mfu < <(awk -v t="$tps" -v f="${flops[$n]}" -v n=$((batch * T)) -v c="$ceil" 'BEGIN {
				if (t == "-" || t <= 0) { print "- - -"; exit }
				tf = f * t / n / 1e12
				printf "%.2f %.4g %s\n", 1e3 * n / t, tf, (c > 0 ? sprintf("%.3f", tf / c) : "-") }')
			printf '%-10s %-14s %-14s %10s %9s %9s %6s %13s %14s %9s %9s\n' "$n" "$side" "$pr" \
				"$(fmt %.0f "$tps")" "$sms" "$tf" "$mfu" "$mem" "$alloc" "$comp" "$(fmt %.4f "$(kv "$tmp/$p.kv" loss)")"
		done
	done
	# issue 18's targets, on the largest model asked for (the last)
	n=${names[${#names[@]} - 1]}
	if [ "${dprec[$n]}" != "$prec" ]; then
		echo "# target ($n): not measured: dstk ran ${dprec[$n]}, not $prec"
	elif [ "$(cat "$tmp/dstk-$n.rc")" != 0 ]; then
		echo "# target ($n): not measured: the dstk part failed"
	else
		read -r _ _ _ _ T <<<"${shape[$n]}"
		awk -v d="$(tps_of "dstk-$n")" -v e="$( [ "$(cat "$tmp/eager-$n.rc" 2>/dev/null)" = 0 ] && tps_of "eager-$n" || echo -)" \
			-v f="${flops[$n]}" -v n=$((batch * T)) -v c="$ceil" -v m="$n" -v p="$prec" 'BEGIN {
			r = e == "-" ? "not measured (no torch eager figure)" : sprintf("%.3f (>= 1: %s)", d / e, d >= e ? "met" : "not met")
			u = c > 0 ? sprintf("%.3f (>= 0.50: %s)", f * d / n / 1e12 / c, f * d / n / 1e12 / c >= 0.5 ? "met" : "not met") : "not measured (no ceiling)"
			printf "# target (%s, %s): dstk tokens/s over torch eager\047s %s; dstk MFU %s\n", m, p, r, u }'
	fi
	echo "# bench wall time ${SECONDS}s of the ${budget}s budget"
	echo
	echo "# ---- raw output of each part ----"
	for f in "$tmp"/ceiling.log "$tmp"/*-*.log; do
		[ -f "$f" ] || continue
		echo "## ${f##*/} (exit $(cat "${f%.log}.rc" 2>/dev/null || echo '-'))"
		cat "$f"
	done
}
exit 0
