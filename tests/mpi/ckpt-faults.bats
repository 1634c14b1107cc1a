#!/usr/bin/env bats
# ckpt-faults.bats - issue 16 at two ranks: a full disk (a small tmpfs where
# the tests run as root) or an injected write error on one rank ends the job
# with exit 1 and the same one line on every rank, within the test's time
# limit (the ranks agree; none waits in a collective another left), latest
# intact and no .tmp; a rank killed inside a save ends the job and the
# requeue resumes with the uninterrupted run's losses; --load auto agrees
# on the tag to skip.
load train_helper

teardown() {
	if [ -n "${SMALL:-}" ]; then
		umount "$SMALL" 2>/dev/null || true
	fi
}

small_disk() { # DIR KB
	[ "$(id -u)" = 0 ] || skip "a full disk needs a small tmpfs, which needs root (the injected write errors test the same path)"
	mkdir -p "$1"
	mount -t tmpfs -o size="$2"k tmpfs "$1" 2>/dev/null ||
		skip "mount -t tmpfs is refused here (the injected write errors test the same path)"
	SMALL=$1
}

# timed_train DIR N [ENV=VALUE...] -- [ds-train flags]: train_run's job at
# N ranks (ZeRO 1) through mpirun_n, which is bounded (exit 124: it hung)
timed_train() {
	local dir=$1 n=$2
	shift 2
	local envs=()
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
	[ "${1:-}" = "--" ] && shift
	mkdir -p "$dir"
	write_cfg "$dir/ds.json" 1 $((8 / n)) 1 "$dir/csv"
	mpirun_n "$n" env "${envs[@]}" "$DS_BUILDDIR/tools/ds-train" --deepspeed_config "$dir/ds.json" \
		--model "$MODEL_DROPOUT" --train-iters "$ITERS" --peak-gflops 1 "$@" >"$dir/out" 2>"$dir/err"
}

# the ranks' last stderr lines: from 1 to N of them (mpirun kills the ranks
# still printing once one has exited 1), each matching RE, all the same,
# and no other error line
agreed() { # ERRFILE N RE
	local n
	n=$(grep -c "^ds-train: .*$3" "$1")
	if [ "$n" -lt 1 ] || [ "$n" -gt "$2" ]; then
		cat "$1" >&2
		return 1
	fi
	[ "$(grep '^ds-train: ' "$1" | grep -v 'ds-train: adamw' | sort -u | wc -l)" -eq 1 ] || { cat "$1" >&2; return 1; }
	! grep -q "error:" "$1" || { cat "$1" >&2; return 1; }
}

@test "2 ranks, disk full during a save: both exit with the same line (file, rank, reason, latest), no hang, no .tmp" {
	d=$BATS_TEST_TMPDIR
	small_disk "$d/small" 2500   # step 5's checkpoint fits, step 10's does not
	ITERS=10 run timed_train "$d/a" 2 -- --save "$d/small/ck" --save-interval 5
	[ "$status" -eq 1 ] || { cat "$d/a/err"; fail "exit $status (124: a hang)"; }
	agreed "$d/a/err" 2 "small/ck/global_step10.tmp/state.h5: rank [01] cannot write /.*: No space left on device; .*small/ck/latest still names global_step5$"
	run ! grep -q "MPI_ABORT\|Segmentation\|signal 11" "$d/a/err"
	[ "$(cat "$d/small/ck/latest")" = global_step5 ]
	[ "$(ls "$d/small/ck")" = "global_step5
latest" ]
	run -0 ds-ckpt-convert verify "$d/small/ck"
}

@test "2 ranks, an injected write error on rank 1 or in rank 0's HDF5 metadata: the same line from both, exit 1, latest kept" {
	d=$BATS_TEST_TMPDIR
	ITERS=5 timed_train "$d/a" 2 -- --save "$d/ck" --save-interval 5 || { tail -5 "$d/a/err"; false; }
	ITERS=20 run timed_train "$d/b" 2 DS_TEST_FAULT_CKPT_WRITE=1:ENOSPC -- --load "$d/ck" --save "$d/ck" --save-interval 10
	[ "$status" -eq 1 ] || fail "exit $status"
	agreed "$d/b/err" 2 "ck/global_step10.tmp/state.h5: rank 1 cannot write /.*: No space left on device; .*ck/latest still names global_step5$"
	ITERS=20 run timed_train "$d/c" 2 DS_TEST_FAULT_CKPT_META=EIO -- --load "$d/ck" --save "$d/ck" --save-interval 10
	[ "$status" -eq 1 ] || fail "exit $status"
	agreed "$d/c/err" 2 "ck/global_step10.tmp/state.h5: cannot write the HDF5 metadata: Input/output error; .*latest still names global_step5$"
	run ! grep -q "MPI_ABORT" "$d/b/err" "$d/c/err"
	[ "$(cat "$d/ck/latest")" = global_step5 ] || fail "[ \"\$(cat \"\$d/ck/latest\")\" = global_step5 ]"
	[ ! -e "$d/ck/global_step10.tmp" ] || fail "[ ! -e \"\$d/ck/global_step10.tmp\" ]"
	[ ! -e "$d/ck/global_step10" ] || fail "[ ! -e \"\$d/ck/global_step10\" ]"
	run -0 ds-ckpt-convert verify "$d/ck"
}

@test "2 ranks, a rank killed inside a save (rank 1 entering commit, rank 0 after closing state.h5): the job ends; --load auto resumes with the uninterrupted losses" {
	d=$BATS_TEST_TMPDIR
	ITERS=15 timed_train "$d/ref" 2 -- --save "$d/ref/ck" --save-interval 5 || { tail -5 "$d/ref/err"; false; }
	for k in 1:commit:2 0:close:2; do
		rm -rf "$d/ck" "$d/a" "$d/b"
		ITERS=15 run timed_train "$d/a" 2 DS_TEST_FAULT_CKPT_KILL=$k -- --save "$d/ck" --save-interval 5
		case $status in 0 | 124) fail "$k: exit $status (124: a hang)" ;; esac
		[ "$(cat "$d/ck/latest")" = global_step5 ] || fail "$k: latest $(cat "$d/ck/latest")"
		[ -d "$d/ck/global_step10.tmp" ] || fail "$k: $(ls "$d/ck")"
		ITERS=15 timed_train "$d/b" 2 -- --save "$d/ck" --save-interval 5 --load auto || { tail -5 "$d/b/err"; false; }
		grep -q "skipped .*global_step10.tmp: an unfinished save" "$d/b/err" || fail "$k: $(cat "$d/b/err")"
		grep -q "loaded .*ck/global_step5: step 5" "$d/b/err" || fail "$k: $(cat "$d/b/err")"
		# the resumed run's losses are the uninterrupted run's from step 6 on
		sed -n '1p;7,$p' "$(losses "$d/ref")" > "$d/ref-tail.csv"
		run same_losses "$(losses "$d/b")" "$d/ref-tail.csv"
		assert_success
		[ "$(cat "$d/ck/latest")" = global_step15 ] || fail "$k: latest $(cat "$d/ck/latest")"
		[ ! -e "$d/ck/global_step10.tmp" ] || fail "$k: the .tmp is left"
	done
}

@test "2 ranks, --load auto with a damaged newer tag: it is skipped, named with the reason, and the one before is loaded" {
	d=$BATS_TEST_TMPDIR
	ITERS=10 timed_train "$d/a" 2 -- --save "$d/ck" --save-interval 5 || { tail -5 "$d/a/err"; false; }
	# a byte of HDF5's metadata in the newest tag
	printf '\x55' | dd of="$d/ck/global_step10/state.h5" bs=1 seek=200 conv=notrunc status=none
	ITERS=12 timed_train "$d/b" 2 -- --save "$d/ck" --load auto || { tail -5 "$d/b/err"; false; }
	grep -q "warning: --load auto: skipped .*ck/global_step10: .*(HDF5 metadata) fail their CRC-32C" "$d/b/err" ||
		{ cat "$d/b/err"; false; }
	grep -q "loaded .*ck/global_step5: step 5" "$d/b/err"
	[ "$(cat "$d/ck/latest")" = global_step12 ]
}
