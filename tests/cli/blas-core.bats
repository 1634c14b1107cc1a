#!/usr/bin/env bats
# blas-core.bats - OpenBLAS's Prescott fallback (a CPU the library does not
# know) replaced by the kernel set this CPU has: the tools run themselves
# again with OPENBLAS_CORETYPE, keep a user's choice, and say what they did.
# DS_TEST_BLAS_LOADED=Prescott stands in for the fallback on CPUs OpenBLAS
# knows; the core expected is derived here from /proc/cpuinfo's flags, and
# OpenBLAS itself reports the core it then loaded.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

require_jq() { command -v jq >/dev/null || skip "jq not installed (apt-get install jq)"; }

# The OPENBLAS_CORETYPE name for this CPU from /proc/cpuinfo, as OpenBLAS
# names its x86-64 kernel sets ("" when only SSE is there).
cpu_core() {
	local f
	f=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
	has() { [[ "$f" == *" $1 "* ]]; }
	if has avx512f && has avx512bw && has avx512dq && has avx512vl && has avx2 && has fma; then
		if has avx512_bf16; then echo Cooperlake; else echo SkylakeX; fi
	elif has avx2 && has fma; then
		if grep -q -m1 '^vendor_id.*AuthenticAMD' /proc/cpuinfo; then echo Zen; else echo Haswell; fi
	elif has avx; then
		echo Sandybridge
	fi
}

setup() {
	cd "$BATS_TEST_TMPDIR" || return
	[ "$(uname -m)" = x86_64 ] || skip "OpenBLAS's x86-64 kernel sets only"
	ds-report --color=never | grep -q '^blas .*DYNAMIC_ARCH' || skip "OpenBLAS is not a DYNAMIC_ARCH build"
	CORE=$(cpu_core)
	[ -n "$CORE" ] || skip "this CPU has no AVX: Prescott is OpenBLAS's right choice"
	unset OPENBLAS_CORETYPE DS_BLAS_CORE_FROM
}

@test "on the Prescott fallback ds-report runs again with this CPU's kernel set, and says why" {
	require_jq
	DS_TEST_BLAS_LOADED=Prescott run -0 --separate-stderr ds-report --json
	echo "$output" | jq -e --arg c "$CORE" '.features.blas.detail | ascii_downcase | contains($c | ascii_downcase)' \
		>/dev/null || fail "blas row is not on $CORE: $(echo "$output" | jq -c .features.blas)"
	echo "$output" | jq -e '.features.blas.reason | contains("chose its Prescott kernels")' >/dev/null ||
		fail "no reason on the blas row: $(echo "$output" | jq -c .features.blas)"
	echo "$output" | jq -e --arg c "$CORE" '.features.blas.fix | contains("OPENBLAS_CORETYPE=" + $c)' >/dev/null ||
		fail "no fix on the blas row: $(echo "$output" | jq -c .features.blas)"
	assert_equal "$stderr" ""
}

@test "a core OpenBLAS chose itself is left alone, and so is a user's OPENBLAS_CORETYPE" {
	require_jq
	# OpenBLAS's own choice: kept unless it is the fallback (as on a CPU newer
	# than the library, where the row then says what was done)
	run -0 ds-report --json
	reason=$(echo "$output" | jq -r '.features.blas.reason // ""')
	if [ -n "$reason" ]; then
		[[ "$reason" == *"chose its Prescott kernels"* ]] || fail "a reason on a core OpenBLAS chose: $reason"
		echo "$output" | jq -e --arg c "$CORE" '.features.blas.detail | contains($c)' >/dev/null ||
			fail "the fallback replaced by another core than $CORE: $(echo "$output" | jq -c .features.blas)"
	fi
	# the user's choice wins over the fallback, and the slow one is named
	OPENBLAS_CORETYPE=Prescott DS_TEST_BLAS_LOADED=Prescott run -0 ds-report --json
	echo "$output" | jq -e '.features.blas.detail | contains("Prescott")' >/dev/null ||
		fail "the user's Prescott was replaced: $(echo "$output" | jq -c .features.blas)"
	echo "$output" | jq -e --arg c "$CORE" \
		'[.warnings[] | select(.name=="blas" and (.message | contains("OPENBLAS_CORETYPE=Prescott")) and (.message | contains($c)))] | length == 1' \
		>/dev/null || fail "no warning about the user's Prescott: $(echo "$output" | jq -c .warnings)"
}

@test "the run again keeps the arguments and the exit status, and prints once" {
	DS_TEST_BLAS_LOADED=Prescott run -2 --separate-stderr ds-train --no-such-flag
	assert_equal "$output" ""
	assert_equal "$(printf '%s\n' "$stderr" | grep -c -- '--no-such-flag')" 1
	DS_TEST_BLAS_LOADED=Prescott run -0 --separate-stderr ds-report --version
	assert_equal "${#lines[@]}" 2
	assert_line --index 0 --regexp '^ds-report \(dstk\) '
	# standard input is still open after the exec
	echo '{"no_such_key_xyz": 1}' > stdin.json
	DS_TEST_BLAS_LOADED=Prescott run -2 --separate-stderr ds-train --deepspeed_config /dev/stdin --check < stdin.json
	[[ "$stderr" == *"no_such_key_xyz"* ]] || fail "the config from stdin was not read after the exec: $stderr"
}

@test "ds-train on the replaced core logs it once and trains as with OPENBLAS_CORETYPE set by hand" {
	cat > cfg.json <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
JSON
	DS_TEST_BLAS_LOADED=Prescott run -0 --separate-stderr ds-train --deepspeed_config cfg.json \
		--model "$SHARE/models/gpt-test.json" --train-iters 3
	assert_equal "$(printf '%s\n' "$stderr" | grep -c '^blas: OpenBLAS chose its Prescott kernels')" 1
	[[ "$stderr" == *"OPENBLAS_CORETYPE=$CORE"* ]] || fail "the log does not name $CORE: $stderr"
	auto=$(printf '%s\n' "$output" | grep '^step ')
	OPENBLAS_CORETYPE=$CORE run -0 --separate-stderr ds-train --deepspeed_config cfg.json \
		--model "$SHARE/models/gpt-test.json" --train-iters 3
	[[ "$stderr" != *"blas:"* ]] || fail "a blas line for the user's own OPENBLAS_CORETYPE: $stderr"
	hand=$(printf '%s\n' "$output" | grep '^step ')
	# the same kernels, so the same losses and norms (the rates may differ)
	assert_equal "$(printf '%s\n' "$auto" | cut -d'|' -f1-5)" "$(printf '%s\n' "$hand" | cut -d'|' -f1-5)"
}
