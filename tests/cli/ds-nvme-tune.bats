#!/usr/bin/env bats
# ds-nvme-tune: help and flags, runs on the null, posix and (when built) aio
# engines with a small --io_size, the CSV / JSON / merged-config outputs,
# every bad input (exit 2 with one line), missing features (exit 3), the
# O_DIRECT refusal path by fault injection, and no scratch file left behind,
# also after SIGINT.  JSON is checked with jq (contrib/debian-packages.txt).
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

# The scratch files a run may leave in $1 (none expected).
scratch() { find "$1" -maxdepth 1 -name '_dstk_nvme_tune_*' -o -maxdepth 1 -name '.ds_odirect_probe.*' | sort; }

setup() {
	D="$BATS_TEST_TMPDIR/nvme"
	mkdir -p "$D"
}

@test "ds-nvme-tune --help exits 0 and shows usage" {
	run -0 ds-nvme-tune --help
	assert_line --index 0 "Usage: ds-nvme-tune --nvme_dir DIR... [OPTIONS]"
	assert_output --partial "--sweep-config=FILE"
}

@test "ds-nvme-tune --version names the features" {
	run -0 ds-nvme-tune --version
	assert_line --index 0 --regexp '^ds-nvme-tune \(dstk\) '
}

@test "a bad flag exits 2 with a hint" {
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --no-such-flag
	[[ "$stderr" == *"Try 'ds-nvme-tune --help'"* ]]
	[ -z "$output" ]
	run -2 --separate-stderr ds-nvme-tune
	[[ "$stderr" == *"--nvme_dir DIR is required"* ]]
}

@test "a run on the null engine prints the best GB/s and a paste-ready aio section" {
	run -0 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine null --io_size 1M
	assert_line --index 0 --regexp '^# ds-nvme-tune: 1 directory, engine null, O_DIRECT, io_size 1\.0 MiB x 1 loop, [0-9]+ trials of 672'
	assert_line --index 1 --regexp '^Best performance \(GB/sec\): read = +[0-9.]+, write = +[0-9.]+$'
	# the JSON after the two lines: DeepSpeed's current names, real booleans
	json=$(printf '%s\n' "$output" | sed -n '/^{/,$p')
	run -0 jq -r '.aio | [(keys_unsorted | join(",")), (.single_submit | type), (.overlap_events | type), (.use_gds | tostring), (.intra_op_parallelism | type)] | join(" ")' <<<"$json"
	assert_output "block_size,queue_depth,intra_op_parallelism,single_submit,overlap_events,use_gds boolean boolean false number"
	[ -z "$(scratch "$D")" ]
}

@test "--nvme_dir takes several directories, measured as one set" {
	mkdir -p "$D/a" "$D/b"
	run -0 ds-nvme-tune --nvme_dir "$D/a" "$D/b" --engine null --io_size 1M --json
	[ "$(jq .directories <<<"$output")" = 2 ]
	# pinned memory counts every directory's handle
	[ "$(jq '[.trials[] | .pinned_bytes == .queue_depth * .block_size_bytes * .intra_op_parallelism * 2] | all' <<<"$output")" = true ]
	run -0 ds-nvme-tune --nvme_dir "$D/a" --nvme_dir "$D/b" --engine null --io_size 1M --json
	[ "$(jq .directories <<<"$output")" = 2 ]
}

@test "--csv writes a header and one row per trial" {
	run -0 ds-nvme-tune --nvme_dir "$D" --engine null --io_size 1M --csv "$D/t.csv" --json
	n=$(jq .trials_run <<<"$output")
	run -0 head -1 "$D/t.csv"
	assert_output "trial,phase,block_size_bytes,queue_depth,intra_op_parallelism,single_submit,overlap_events,read_gbps,write_gbps,read_p50_us,read_p99_us,write_p50_us,write_p99_us,pinned_bytes"
	[ "$(($(wc -l <"$D/t.csv") - 1))" -eq "$n" ]
	# the search's phases, in order: start, coarse sweep, refinement, confirmation
	run -0 bash -c "cut -d, -f2 '$D/t.csv' | uniq | tr -d '\"' | tr '\n' ' '"
	assert_output "phase start coarse refine confirm "
	run -0 sed -n 2p "$D/t.csv"
	assert_output --regexp '^1,"start",1048576,32,1,false,true,[0-9.e+]+,[0-9.e+]+,'
	# --csv - goes to stdout after the result
	run -0 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine null --io_size 1M --csv -
	assert_line --partial "trial,phase,block_size_bytes,"
	assert_line --index 1 --partial "Best performance"
}

@test "--json parses and says what ran" {
	run -0 ds-nvme-tune --nvme_dir "$D" --engine null --io_size 1M --json --no_read
	[ "$(jq -r '.engine + " " + .io_mode' <<<"$output")" = "null direct" ]
	[ "$(jq '.best.read_gbps' <<<"$output")" = null ]
	[ "$(jq '.trials | length' <<<"$output")" = "$(jq .trials_run <<<"$output")" ]
	[ "$(jq '.aio.queue_depth | type' <<<"$output")" = '"number"' ]
}

@test "a posix run on a real directory removes its files, and --sweep_config drives it" {
	printf '{"block_size": ["64K", "128K"], "io_parallel": [1, 2]}' >"$D/sweep.json"
	run -0 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine posix --io_size 256K \
		--sweep_config "$D/sweep.json" --exhaustive --csv "$D/t.csv" --log_dir "$D/logs"
	assert_line --index 0 --regexp 'engine posix, O_DIRECT, io_size 256\.0 KiB x 1 loop, 7 trials of 4,'
	[ "$(wc -l <"$D/t.csv")" -eq 8 ] # 4 + 3 confirming
	# DeepSpeed's log layout
	run -0 grep -h '^E2E Read Speed = .* GB/sec$' "$D/logs/_aio_bench_read_logs/read_block_overlap_ftd1_d32_bs64K_p2.txt"
	[ -z "$(scratch "$D")" ]
}

@test "an aio run with small sizes (libaio builds)" {
	require_feature libaio
	printf '{"block_size": [65536], "queue_depth": [2, 8], "single_submit": [false, true], "overlap_events": [true, false], "intra_op_parallelism": [2]}' >"$D/sweep.json"
	run -0 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine aio --io_size 512K --loops 2 \
		--sweep_config "$D/sweep.json" --json
	[ "$(jq -r '.engine + " " + .io_mode' <<<"$output")" = "aio direct" ]
	[ "$(jq '[.trials[] | .read_gbps > 0 and .write_gbps > 0 and .read_p99_us >= .read_p50_us] | all' <<<"$output")" = true ]
	[ -z "$(scratch "$D")" ]
	# more contexts than the kernel grants: refused before the sweep
	max=$(cat /proc/sys/fs/aio-max-nr)
	if [ "$max" -lt $((4096 * 256)) ]; then
		printf '{"queue_depth": [4096], "intra_op_parallelism": [256]}' >"$D/big.json"
		run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine aio --io_size 1G --sweep_config "$D/big.json"
		[[ "$stderr" == *"queue_depth 4096 x intra_op_parallelism 256 x 1 directory = 1048576 requests exceed /proc/sys/fs/aio-max-nr $max"* ]]
	fi
}

@test "--deepspeed_config merges the aio section, in place or to --output" {
	printf '{"train_batch_size": 8, "aio": {"thread_count": 4, "block_size": 4096}}\n' >"$D/ds.json"
	cp "$D/ds.json" "$D/orig.json"
	run -0 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine null --io_size 1M \
		--deepspeed_config "$D/ds.json" -o "$D/tuned.json"
	cmp "$D/ds.json" "$D/orig.json"
	[ "$(jq -c '[.train_batch_size, .aio.thread_count, (.aio.single_submit | type), (.aio.block_size >= 131072)]' "$D/tuned.json")" = '[8,null,"boolean",true]' ]
	run -0 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine null --io_size 1M --deepspeed_config "$D/ds.json"
	[ "$(jq '.aio.intra_op_parallelism | type' "$D/ds.json")" = '"number"' ]
	# a broken config is refused before the run and left as it was
	printf '{"aio": [1]}' >"$D/bad.json"
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine null --io_size 1M --deepspeed_config "$D/bad.json"
	[[ "$stderr" == *"bad.json: key 'aio': expected an object"* ]]
	[ "$(cat "$D/bad.json")" = '{"aio": [1]}' ]
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine null -o "$D/x.json"
}

@test "missing features exit 3 and name the configure flag" {
	run -3 --separate-stderr ds-nvme-tune --nvme_dir "$D" --gds
	[[ "$stderr" == *"--with-cuda"* ]]
	run -3 --separate-stderr ds-nvme-tune --nvme_dir "$D" --gpu
	printf '{"use_gds": [false, true]}' >"$D/gds.json"
	run -3 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine null --io_size 1M --sweep_config "$D/gds.json"
	[[ "$stderr" == *"gds.json: key 'use_gds': built without GPUDirect Storage"*"--with-cuda"* ]]
	if ! ds_has cuda; then [[ "$stderr" == *"--with-cuda"* ]]; fi
	if ! ds_has libaio; then
		run -3 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine aio --io_size 1M
		[[ "$stderr" == *"--with-libaio"* ]]
		# without --engine, posix runs and says why
		printf '{"io_parallel": [1]}' >"$D/s.json"
		run -0 --separate-stderr ds-nvme-tune --nvme_dir "$D" --io_size 256K --no_read --sweep_config "$D/s.json"
		[[ "$stderr" == *"the aio engine is not built (reconfigure --with-libaio)"* ]]
		assert_line --index 0 --partial "engine posix"
	fi
}

@test "bad directories exit 2 with one line" {
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D/none" --engine null
	[ "$stderr" = "ds-nvme-tune: --nvme_dir $D/none: No such file or directory; give an existing writable directory" ]
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" "$D/." --engine null
	[[ "$stderr" == *"--nvme_dir $D/.: the same directory as $D" ]]
	touch "$D/file"
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D/file" --engine null
	[[ "$stderr" == *"$D/file: not a directory" ]]
	# read-only: a chmod-555 directory, or /sys where even root cannot create files
	ro="$D/ro"
	mkdir "$ro"
	chmod 555 "$ro"
	[ "$(id -u)" -ne 0 ] || ro=/sys
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$ro" --engine posix --io_size 1M
	[[ "$stderr" == *"--nvme_dir $ro: not writable ("* ]]
	[ "${#lines[@]}" -eq 0 ]
	chmod 755 "$D/ro"
	# free space for the test files
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine posix --io_size 64T
	[[ "$stderr" == *"--nvme_dir $D: needs 128.0 TiB free for the test files (2 file(s) of --io_size 64.0 TiB), has "*"; use a smaller --io_size" ]]
	[ -z "$(scratch "$D")" ]
}

@test "bad values and sweep files exit 2 with one line" {
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --loops 0
	[[ "$stderr" == *"--loops '0': expected an integer in [1, 1000]"* ]]
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --io_size lots
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine spdk
	[[ "$stderr" == *"unknown engine 'spdk'"* ]]
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine null --io_size 5000
	[[ "$stderr" == *"--io_size 5000: does not split into intra_op_parallelism 1 chunks of a multiple of 4096 bytes (O_DIRECT); use a multiple of 4096"* ]]
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine null --no_read --no_write
	printf '{"queue_depth": [8,' >"$D/s.json"
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine null --io_size 1M --sweep_config "$D/s.json"
	[[ "$stderr" == *"s.json: line 1 column"* ]]
	printf '{"queue_depth": [8, 100000]}' >"$D/s.json"
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine null --io_size 1M --sweep_config "$D/s.json"
	[[ "$stderr" == *"s.json: key 'queue_depth': 100000 is out of range [1, 4096]" ]]
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine null --sweep_config "$D/none.json"
	[ -z "$output" ]
}

@test "a file system refusing O_DIRECT (injected): refused, or run buffered with --buffered" {
	export DS_TEST_FAULT_NO_ODIRECT=1
	run -2 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine posix --io_size 256K
	[ "$stderr" = "ds-nvme-tune: --nvme_dir $D: the file system refuses O_DIRECT (probe write failed); rerun with --buffered to measure through the page cache" ]
	run -0 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine posix --io_size 256K --buffered --flush_page_cache
	assert_line --index 0 --partial "engine posix, buffered (page cache, --buffered)"
	run -0 --separate-stderr ds-nvme-tune --nvme_dir "$D" --engine posix --io_size 256K --buffered --json
	[ "$(jq -r .io_mode <<<"$output")" = buffered ]
	[ -z "$(scratch "$D")" ]
}

@test "SIGINT stops the run and removes the scratch files" {
	ds-nvme-tune --nvme_dir "$D" --engine posix --io_size 4M --loops 1000 --exhaustive -q 2>"$D/err" &
	pid=$!
	# wait for the read file to exist, then interrupt
	for _ in $(seq 100); do [ -n "$(scratch "$D")" ] && break; sleep 0.1; done
	kill -INT $pid
	status=0
	wait_pid 60 $pid "ds-nvme-tune to stop after SIGINT" || status=$?
	[ "$status" -eq 130 ]
	grep -q "stopped by a signal; scratch files removed" "$D/err"
	[ -z "$(scratch "$D")" ]
}
