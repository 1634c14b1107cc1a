#!/usr/bin/env bats
# bench/gpu-step.sh's plumbing without a GPU (issue 18): the dry run's
# table (dstk on --device cpu, gpt-test at T 64, micro batch 4), its FLOP
# count against lib/model/count's for that shape, the bf16 refusal's fp32
# fallback (never a bf16 label on an fp32 figure), a hung part killed at
# its timeout, and no device without --dry-run.  The PyTorch rows are
# measured where `import torch` works and say why not elsewhere; the figures
# themselves come from a GPU (bench/gpu-run.sh).
# shellcheck disable=SC2154  # output: set by bats' run
load helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return
	command -v python3 >/dev/null || skip "python3 not installed (the bench reads JSON with it)"
	GS="$DS_SRCDIR/bench/gpu-step.sh"
	# the PyTorch parts cost seconds each: a python without torch skips them
	export PYTHON=${GPU_STEP_PYTHON:-python3}
}

# a build dir whose ds-train is the script $1 and ds-profile the real one
fake_build() {
	mkdir -p fake/tools
	ln -s "$DS_BUILDDIR/tools/ds-profile" fake/tools/ds-profile
	printf '#!/bin/bash\n%s\n' "$1" >fake/tools/ds-train
	chmod +x fake/tools/ds-train
}

# the table row of side $1 (dstk, torch-eager, ...)
row() { printf '%s\n' "$output" | awk -v s="$1" '$1 == "gpt-test" && $2 == s'; }

@test "without a GPU and without --dry-run: one line, exit 0, nothing run" {
	mkdir bin
	printf '#!/bin/bash\necho "No devices were found"; exit 6\n' >bin/nvidia-smi
	chmod +x bin/nvidia-smi
	PATH="$PWD/bin:$PATH" run -0 bash "$GS"
	assert_output "gpu-step: no CUDA device here (nvidia-smi lists none); nothing measured (--dry-run checks the plumbing on the CPU)"
}

@test "bad arguments: one line naming the argument, exit 2" {
	run -2 --separate-stderr bash "$GS" --precision fp16
	[ "$stderr" = "gpu-step: --precision 'fp16': give bf16 or fp32" ]
	run -2 --separate-stderr bash "$GS" --steps 0
	[ "$stderr" = "gpu-step: --steps '0': expected a positive integer" ]
	run -2 --separate-stderr bash "$GS" --dry-run --models no-such-model
	[ "$stderr" = "gpu-step: model 'no-such-model': no such file nor share/models/no-such-model.json" ]
}

@test "--dry-run: a bf16 dstk row whose FLOPs are lib/model/count's, MFU against --peak-tflops" {
	run -0 bash "$GS" --dry-run --peak-tflops 0.01
	assert_output --partial "# ceiling: 0.01 TFLOP/s, given (--peak-tflops)"
	r=$(row dstk)
	[ -n "$r" ] || fail "no dstk row in: $output"
	read -r _ _ prec tps sms tf mfu rss _ <<<"$r"
	[ "$prec" = bf16 ]
	# gpt-test at B 4, T 64: 3 x forward = 203,587,584 FLOPs per step of
	# 256 tokens (ds-train's own --metrics-json count for this shape)
	awk -v t="$tps" -v s="$sms" -v f="$tf" -v m="$mfu" 'BEGIN {
		want = t * 203587584 / 256 / 1e12
		if (t <= 0 || (f - want) / want > 1e-3 || (want - f) / want > 1e-3) { print "TFLOP/s", f, "want", want; exit 1 }
		if ((s - 256e3 / t) ^ 2 > 0.01 ^ 2 * s * s) { print "step_ms", s, "want", 256e3 / t; exit 1 }
		if ((m - want / 0.01) ^ 2 > (0.0015 + 1e-3 * m) ^ 2) { print "MFU", m, "want", want / 0.01; exit 1 }
	}' || fail "row: $r"
	[ "$rss" -gt 1 ] || fail "peak RSS column: $r"
	# each PyTorch row measured or saying why not
	for s in torch-eager torch-compile; do
		r=$(row "$s")
		[[ $r =~ bf16-autocast\ +([0-9]+\ |not\ measured:\ .) ]] ||
			[[ $output == *"PyTorch is not importable"* ]] || fail "$s: $r"
	done
	assert_output --partial "# target (gpt-test, bf16): dstk tokens/s over torch eager's"
	assert_output --regexp "## dstk-gpt-test.log \(exit 0\)"$'\n'"ds-train: adamw, "
}

@test "ds-train refusing bf16 (exit 3): said in one line, dstk runs and is labelled fp32, no bf16 target" {
	# shellcheck disable=SC2016 # $a and $@ are the fake's own
	fake_build 'for a; do case $a in *.ds.json) grep -q bf16 "$a" && { echo "ds-train: 16-bit refused" >&2; exit 3; } ;; esac; done
exec "'"$DS_BUILDDIR"'/tools/ds-train" "$@"'
	DS_BUILDDIR=$PWD/fake run -0 bash "$GS" --dry-run
	assert_line "gpu-step: gpt-test: ds-train --device cpu refused bf16 (exit 3: ds-train: 16-bit refused); running fp32 instead, labelled fp32"
	r=$(row dstk)
	[[ $r =~ ^gpt-test\ +dstk\ +fp32\ +[0-9]+\  ]] || fail "dstk row: $r"
	assert_line "# target (gpt-test): not measured: dstk ran fp32, not bf16"
	refute_output --regexp "dstk +bf16"
	# --precision fp32 asks for no fallback
	DS_BUILDDIR=$PWD/fake run -0 bash "$GS" --dry-run --precision fp32
	refute_output --partial "refused"
	r=$(row dstk)
	[[ $r =~ ^gpt-test\ +dstk\ +fp32\ +[0-9]+\  ]] || fail "dstk row: $r"
}

@test "a hung part is killed at its timeout, the rest skipped past the budget, exit 0" {
	fake_build 'echo hanging; exec sleep 300'
	SECONDS=0
	DS_BUILDDIR=$PWD/fake run -0 bash "$GS" --dry-run --budget 22
	[ "$SECONDS" -lt 40 ] || fail "took ${SECONDS}s"
	r=$(row dstk)
	[[ $r == *"not measured: exit 124: gpu-step: killed after its "*"s timeout" ]] || fail "dstk row: $r"
	assert_line "# target (gpt-test): not measured: the dstk part failed"
}
