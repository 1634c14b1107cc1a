#!/usr/bin/env bats
# ds-train-faults.bats - issue 16: faults while checkpointing, met as a user
# meets them, at one rank (tests/mpi/ckpt-faults.bats: two).  A full disk (a
# small tmpfs where the tests run as root; the injected write errors cover
# the same path everywhere), a kill inside the first and a later save, a
# damaged newer tag under --load auto, a directory as --data, the default
# watchdog.  Every run ends with 0, 1, 2 or 137 (the kill), never a crash
# (>= 128 otherwise) or a hang, and `latest` always names a tag that
# verifies.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return 1
	MODEL="$SHARE/models/gpt-test.json"
	cat > cfg.json <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "csv_monitor": {"enabled": true, "output_path": "csv", "job_name": "run"}}
JSON
}

teardown() {
	if [ -n "${SMALL:-}" ]; then
		umount "$SMALL" 2>/dev/null || true
	fi
}

train() { ds-train --deepspeed_config cfg.json --model "$MODEL" --peak-gflops 1 "$@"; }

# small_disk KB: a tmpfs of KB KiB at ./small, or skip saying why
small_disk() {
	[ "$(id -u)" = 0 ] || skip "a full disk needs a small tmpfs, which needs root (the injected write errors test the same path)"
	mkdir -p small
	mount -t tmpfs -o size="$1"k tmpfs small 2>/dev/null ||
		skip "mount -t tmpfs is refused here (the injected write errors test the same path)"
	SMALL=$PWD/small
}

# the loss of step S (1-based) in the CSV monitor of DIR (full precision;
# its rows are keyed by the samples before the step, 8 per step here)
loss_at() { awk -F, -v s="$2" '$1 == (s - 1) * 8 { print $2 }' "$1/Train_Samples_train_loss.csv"; }

# DIR's latest names a tag that verifies
latest_verifies() {
	[ -f "$1/latest" ] || return 1
	ds-ckpt-convert verify "$1/$(cat "$1/latest")" >/dev/null
}

@test "disk full during the first save: exit 1, one line with the file and the reason, no .tmp left; the rerun starts from scratch" {
	small_disk 1100   # the first checkpoint (1.5 MB) does not fit
	run --separate-stderr train --train-iters 4 --save small/ck --save-interval 2
	[ "$status" -eq 1 ] || fail "exit $status: $stderr"
	[ "$(grep -c 'No space left on device' <<<"$stderr")" -eq 1 ] || fail "$stderr"
	err=$(grep 'No space left on device' <<<"$stderr")
	[[ "$err" == "ds-train: small/ck/global_step2.tmp/state.h5: cannot write /"* ]] || fail "$err"
	[[ "$err" == *"there is no earlier checkpoint in small/ck" ]] || fail "$err"
	[ ! -e small/ck/global_step2.tmp ] || fail "[ ! -e small/ck/global_step2.tmp ]"
	[ ! -e small/ck/latest ] || fail "[ ! -e small/ck/latest ]"
	# a requeue with --load auto finds nothing finished and starts over (it fails the same way here)
	run --separate-stderr train --train-iters 4 --save small/ck --save-interval 2 --load auto
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"--load auto: small/ck holds no finished checkpoint; starting from scratch"* ]] || fail "$stderr"
}

@test "disk full during a later save: exit 1, latest keeps the previous tag, which verifies and resumes" {
	small_disk 2500   # one checkpoint fits, two do not
	run --separate-stderr train --train-iters 4 --save small/ck --save-interval 2
	[ "$status" -eq 1 ] || fail "exit $status: $stderr"
	[[ "$stderr" == *"small/ck/global_step4.tmp/state.h5: cannot write /"*": No space left on device; small/ck/latest still names global_step2"* ]] ||
		fail "$stderr"
	[ ! -e small/ck/global_step4.tmp ] || fail "[ ! -e small/ck/global_step4.tmp ]"
	[ ! -e small/ck/global_step4 ] || fail "[ ! -e small/ck/global_step4 ]"
	latest_verifies small/ck
	run -0 train --train-iters 3 --load small/ck --save ck2
	assert_output --partial "step 3/3"
}

@test "a full disk at any point of a save (tmpfs of 20 sizes): exit 0 or 1, never a crash, latest always verifies" {
	small_disk 1024
	umount small
	for kb in 1100 1500 1900 2300 2700 2800 2850 2870 2880 2890 2900 2905 2910 2912 2914 2916 2918 2920 2950 3100; do
		mount -t tmpfs -o size=${kb}k tmpfs small
		run --separate-stderr train --train-iters 4 --save small/ck --save-interval 2
		[ "$status" -eq 0 ] || [ "$status" -eq 1 ] || fail "${kb}k: exit $status: $stderr"
		if [ "$status" -eq 1 ]; then
			[ "$(grep -c '^ds-train: ' <<<"$stderr")" -ge 1 ]
			grep '^ds-train: small/ck' <<<"$stderr" | grep -q 'No space left on device' || fail "${kb}k: $stderr"
		fi
		if compgen -G 'small/ck/*.tmp' >/dev/null; then fail "${kb}k: a .tmp is left: $(ls small/ck)"; fi
		[ ! -e small/ck/latest ] || latest_verifies small/ck || fail "${kb}k: latest does not verify"
		echo "# ${kb}k: exit $status, latest $(cat small/ck/latest 2>/dev/null || echo none)$(grep '^ds-train: small' <<<"$stderr" | sed 's/^ds-train: [^ ]*: / | /; s/(.*)//; s/; .*//')" >&3
		umount small
	done
}

@test "injected write errors (no root needed): tensor bytes or HDF5 metadata, exit 1 with the system's reason; latest kept" {
	run -0 train --train-iters 2 --save ck
	for f in "DS_TEST_FAULT_CKPT_WRITE=0:ENOSPC No space left on device" "DS_TEST_FAULT_CKPT_WRITE=0:EIO Input/output error" \
		"DS_TEST_FAULT_CKPT_WRITE=0:EDQUOT Disk quota exceeded" "DS_TEST_FAULT_CKPT_META=ENOSPC No space left on device"; do
		run --separate-stderr env "${f%% *}" ds-train --deepspeed_config cfg.json --model "$MODEL" \
			--train-iters 4 --load ck --save ck
		[ "$status" -eq 1 ] || fail "$f: exit $status: $stderr"
		[ "$(grep -c "^ds-train: ck/global_step4.tmp/state.h5: .*${f#* }; ck/latest still names global_step2$" <<<"$stderr")" -eq 1 ] ||
			fail "$f: $stderr"
		[ "$(cat ck/latest)" = global_step2 ] || fail "[ \"\$(cat ck/latest)\" = global_step2 ]"
		[ ! -e ck/global_step4.tmp ] || fail "[ ! -e ck/global_step4.tmp ]"
		[ ! -e ck/global_step4 ] || fail "[ ! -e ck/global_step4 ]"
	done
	latest_verifies ck
}

@test "a kill inside the first save, at every point: --load auto starts from scratch (saying so) or takes the finished tag" {
	for p in create write commit close rename latest; do
		rm -rf ck csv
		run env DS_TEST_FAULT_CKPT_KILL=0:$p ds-train --deepspeed_config cfg.json --model "$MODEL" \
			--train-iters 4 --save ck --save-interval 2
		[ "$status" -eq 137 ] || fail "$p: exit $status"
		run --separate-stderr train --train-iters 4 --save ck --save-interval 2 --load auto
		[ "$status" -eq 0 ] || fail "$p: requeue exit $status: $stderr"
		if [ $p = latest ]; then   # the tag was complete, only latest was missing
			[[ "$stderr" == *"loaded ck/global_step2: step 2"* ]] || fail "$p: $stderr"
		else
			[[ "$stderr" == *"--load auto: skipped ck/global_step2.tmp: an unfinished save"* ]] || fail "$p: $stderr"
			[[ "$stderr" == *"--load auto: ck holds no finished checkpoint; starting from scratch"* ]] || fail "$p: $stderr"
			assert_output --partial "step 1/4"
		fi
		[ "$(cat ck/latest)" = global_step4 ] || fail "[ \"\$(cat ck/latest)\" = global_step4 ]"
		[ ! -e ck/global_step2.tmp ] || fail "[ ! -e ck/global_step2.tmp ]"
	done
}

@test "a kill inside a later save, at every point: --load auto resumes from the tag before with the uninterrupted losses" {
	run -0 train --train-iters 6 --save ref --save-interval 2
	mv csv/run ref.csv
	# a save of gpt-test at one rank is 84 tensor writes: the 100th is inside step 4's save
	for p in write:100 commit:2 close:2 rename:2; do
		rm -rf ck csv
		run env DS_TEST_FAULT_CKPT_KILL=0:$p ds-train --deepspeed_config cfg.json --model "$MODEL" \
			--peak-gflops 1 --train-iters 6 --save ck --save-interval 2
		[ "$status" -eq 137 ] || fail "$p: exit $status"
		[ "$(cat ck/latest)" = global_step2 ] || fail "$p: latest $(cat ck/latest)"
		[ -d ck/global_step4.tmp ] || fail "$p: $(ls ck)"
		rm -rf csv
		run --separate-stderr train --train-iters 6 --save ck --save-interval 2 --load auto
		[ "$status" -eq 0 ] || fail "$p: $stderr"
		[[ "$stderr" == *"loaded ck/global_step2: step 2"* ]] || fail "$p: $stderr"
		for s in 3 4 5 6; do
			[ "$(loss_at csv/run $s)" = "$(loss_at ref.csv $s)" ] ||
				fail "$p: step $s: loss $(loss_at csv/run $s), uninterrupted $(loss_at ref.csv $s)"
		done
		[ "$(cat ck/latest)" = global_step6 ] || fail "$p: latest $(cat ck/latest)"
		[ ! -e ck/global_step4.tmp ] || fail "$p: the .tmp is left"
	done
}

@test "--load auto skips a newer tag with a damaged HDF5 header, naming it and why; an explicit --load of it is one line, exit 2" {
	run -0 train --train-iters 4 --save ck --save-interval 2
	f=ck/global_step4/state.h5
	# a byte of the first metadata extent (the superblock and root group)
	printf '\x55' | dd of=$f bs=1 seek=100 conv=notrunc status=none
	run --separate-stderr train --train-iters 5 --load ck
	[ "$status" -eq 2 ] || fail "exit $status: $stderr"
	[ "$(grep -c '^ds-train: ' <<<"$stderr")" -eq 1 ]
	[[ "$stderr" == *"ds-train: ck/global_step4/state.h5: bytes 0.."*" (HDF5 metadata) fail their CRC-32C"* ]] || fail "$stderr"
	run --separate-stderr train --train-iters 5 --save ck --load auto
	[ "$status" -eq 0 ] || fail "$stderr"
	[[ "$stderr" == *"warning: --load auto: skipped ck/global_step4: ck/global_step4/state.h5: bytes 0.."*"fail their CRC-32C"* ]] ||
		fail "$stderr"
	[[ "$stderr" == *"loaded ck/global_step2: step 2"* ]] || fail "$stderr"
	# verify reports the damage: exit 1, one line
	run -1 --separate-stderr ds-ckpt-convert verify ck/global_step4
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ "$stderr" == *"HDF5 metadata"* ]]
}

@test "--load auto over an existing directory without a finished checkpoint starts from scratch (it exited 2)" {
	mkdir -p ck/global_step2.tmp
	run --separate-stderr train --train-iters 2 --save ck --load auto
	[ "$status" -eq 0 ] || fail "$stderr"
	[[ "$stderr" == *"--load auto: ck holds no finished checkpoint; starting from scratch"* ]]
	[ "$(cat ck/latest)" = global_step2 ]
	# but finished tags that all fail to verify are an error, not a fresh start
	printf '\x55' | dd of=ck/global_step2/state.h5 bs=1 seek=100 conv=notrunc status=none
	run -2 --separate-stderr train --train-iters 3 --save ck --load auto
	[[ "$stderr" == *"ck: none of the 1 checkpoints verifies"* ]] || fail "$stderr"
}

@test "--data naming a directory or a device says what it is, exit 2" {
	mkdir d
	run -2 --separate-stderr train --data d
	[[ "$stderr" == "ds-train: d: a directory, not a data file; give a text file"* ]] || fail "$stderr"
	run -2 --separate-stderr train --data /dev/null
	[[ "$stderr" == "ds-train: /dev/null: a character device, not a data file"* ]] || fail "$stderr"
}

@test "the watchdog is on by default (1800 s, 0 turns it off) and removes the heartbeats that killed runs left" {
	mkdir t
	host=$(hostname)
	# a dead run's directory (a pid that is not running) and a live one's (ours)
	dead=999999
	while kill -0 $dead 2>/dev/null; do dead=$((dead - 1)); done
	mkdir "t/ds-watchdog-$host-$dead" "t/ds-watchdog-$host-$$"
	echo x > "t/ds-watchdog-$host-$dead/rank0.hb"
	TMPDIR=$PWD/t run -0 --separate-stderr train --train-iters 1
	# the default says nothing; the dead run's heartbeats are gone
	[[ "$stderr" != *"watchdog:"* ]] || fail "$stderr"
	[ ! -e "t/ds-watchdog-$host-$dead" ] || fail "[ ! -e \"t/ds-watchdog-\$host-\$dead\" ]"
	[ -d "t/ds-watchdog-$host-$$" ] || fail "[ -d \"t/ds-watchdog-\$host-\$\$\" ]"
	[ "$(ls t)" = "ds-watchdog-$host-$$" ]
	run -0 ds-train --list-keys
	assert_line --regexp '^dstk\.watchdog_timeout_s	.*	1800\.0	'
	# a chosen timeout is shown; 0 starts no watchdog (no directory)
	echo '{"train_micro_batch_size_per_gpu": 4, "dstk": {"watchdog_timeout_s": 1800}}' > set.json
	TMPDIR=$PWD/t run -0 --separate-stderr ds-train --deepspeed_config set.json --model "$MODEL" --train-iters 1
	[[ "$stderr" == *"watchdog: timeout 1800 s, heartbeats in $PWD/t/ds-watchdog-$host-"* ]] || fail "$stderr"
	echo '{"train_micro_batch_size_per_gpu": 4, "dstk": {"watchdog_timeout_s": 0}}' > off.json
	mkdir "t/ds-watchdog-$host-$dead"
	TMPDIR=$PWD/t run -0 --separate-stderr ds-train --deepspeed_config off.json --model "$MODEL" --train-iters 1
	[[ "$stderr" != *"watchdog:"* ]] || fail "$stderr"
	[ -d "t/ds-watchdog-$host-$dead" ] || fail "with the watchdog off nothing looks at the heartbeats"
}

@test "ds-ckpt-convert verify on single-byte flips across the metadata (every 41st byte; test_ckpt flips each): exit 1, one line, never a crash" {
	run -0 train --train-iters 2 --save ck
	f=ck/global_step2/state.h5
	cp $f orig.h5
	n=0
	while read -r kind off len _; do
		[ "$kind" = m ] || continue
		for ((b = off; b < off + len; b += 41)); do
			# flip bits of the byte (XOR 0x5a): writing a fixed value would
			# leave a byte that already holds it unchanged
			v=$(od -An -tu1 -j $b -N1 $f | tr -d ' ')
			# shellcheck disable=SC2059  # the format is the byte's octal escape
			printf "$(printf '\\%03o' $((v ^ 0x5a)))" | dd of=$f bs=1 seek=$b conv=notrunc status=none
			! cmp -s $f orig.h5 || fail "byte $b: the flip changed nothing"
			run --separate-stderr ds-ckpt-convert verify ck
			[ "$status" -eq 1 ] || fail "byte $b: exit $status: $stderr"
			[ "${#stderr_lines[@]}" -eq 1 ] || fail "byte $b: $stderr"
			[[ "$stderr" == *"(HDF5 metadata) fail their CRC-32C"* ]] || fail "byte $b: $stderr"
			cp orig.h5 $f
			n=$((n + 1))
		done
	done < $f.manifest
	[ $n -gt 100 ] || fail "only $n flips"
	run -0 ds-ckpt-convert verify ck
}

@test "a flip in the config_json attribute's text is caught (it changed the config silently): verify exit 1, --load exit 2" {
	run -0 train --train-iters 2 --save ck
	f=ck/global_step2/state.h5
	# the saved config's text, where HDF5 keeps it: "gradient_accumulation_steps": 2 -> 7
	off=$(grep -abo '"gradient_accumulation_steps": 2' $f | head -1 | cut -d: -f1)
	[ -n "$off" ] || fail "config_json's text not found in $f"
	printf 7 | dd of=$f bs=1 seek=$((off + 31)) conv=notrunc status=none
	grep -aq '"gradient_accumulation_steps": 7' $f || fail "the flip did not land in the config's text"
	run -1 --separate-stderr ds-ckpt-convert verify ck
	[ "${#stderr_lines[@]}" -eq 1 ] || fail "$stderr"
	[[ "$stderr" == *"ck/global_step2/state.h5: bytes "*" (HDF5 metadata) fail their CRC-32C"* ]] || fail "$stderr"
	run -2 --separate-stderr train --train-iters 3 --load ck
	[[ "$stderr" == *"(HDF5 metadata) fail their CRC-32C"* ]] || fail "$stderr"
}

@test "a safetensors header length that runs into the tensor bytes is named as such, exit 2" {
	st="$DS_SRCDIR/tests/data/ckpt-small/ref-gpt2/model.safetensors"
	n=$(od -An -t u8 -N 8 "$st" | tr -d ' ')
	mkdir long
	cp "$DS_SRCDIR/tests/data/ckpt-small/ref-gpt2/config.json" long/
	# the same file with its 8-byte header length 100 too large
	perl -e 'print pack("Q<", $ARGV[0] + 100)' "$n" > long/model.safetensors
	tail -c +9 "$st" >> long/model.safetensors
	run -2 --separate-stderr ds-ckpt-convert long --to hdf5 -o out
	[[ "$stderr" == *"long/model.safetensors: header length $((n + 100)) runs past the header's JSON"* ]] || fail "$stderr"
	[ ! -e out ]
}
