#!/usr/bin/env bats
# ds-report.bats - the feature table, --json, /dev/shm warning and the CLI
# conventions of ds-report, checked against /proc, df and DS_FEATURES.
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

FEATURES="openmp blas blas_threads mpi hdf5_parallel async_io gds cuda nccl avx2 fma f16c avx512f avx512_bf16 bf16_matmul"

require_jq() { command -v jq >/dev/null || skip "jq not installed (apt-get install jq)"; }

@test "ds-report --help goes to stdout and exits 0" {
	run --separate-stderr ds-report --help
	assert_success
	assert_line --index 0 "Usage: ds-report [OPTIONS]"
	assert_equal "$stderr" ""
}

@test "ds-report: a bad flag exits 2 with one line and Try on stderr" {
	run --separate-stderr -2 ds-report --no-such-flag
	assert_equal "$output" ""
	[[ "$stderr" == *"--no-such-flag"* ]]
	[[ "$stderr" == *"Try 'ds-report --help' for more information."* ]]
	run --separate-stderr -2 ds-report extra
	[[ "$stderr" == *"unexpected argument 'extra'"* ]]
	run --separate-stderr -2 ds-report --color=sometimes
	[[ "$stderr" == *"--color"* ]]
}

@test "ds-report --version prints the version and the compiled features" {
	run --separate-stderr ds-report --version
	assert_success
	assert_line --index 0 --regexp '^ds-report \(dstk\) [0-9]+\.[0-9]+\.[0-9]+$'
	assert_line --index 1 --regexp '^features: .*openmp'
}

@test "ds-report: the table has a row for every feature, with [YES]/[NO] and [OKAY]/[NO]" {
	run --separate-stderr ds-report --color=never
	assert_success
	assert_line --regexp '^# feature \.+ installed \.\. compatible \.\. detail$'
	for f in $FEATURES; do
		assert_line --regexp "^$f \\.+ \\[(YES|NO)\\] \\.+ \\[(OKAY|NO)\\] \\.+ "
	done
	for s in build machine versions; do
		assert_line "# $s"
	done
	assert_line --regexp '^jansson \.+ [0-9]+\.[0-9]+'
	assert_line --regexp '^hdf5 \.+ [0-9]+\.[0-9]+\.[0-9]+$'
}

@test "ds-report: installed matches --version's features, and a missing one names its configure flag" {
	feats=$(ds-report --version | sed -n 's/^features: //p')
	run -0 --separate-stderr ds-report --color=never
	for pair in mpi:mpi async_io:libaio cuda:cuda nccl:nccl hdf5_parallel:hdf5-parallel; do
		row=${pair%%:*} word=${pair#*:}
		if [[ " $feats " == *" $word "* ]]; then
			assert_line --regexp "^$row \\.+ \\[YES\\]"
		else
			assert_line --regexp "^$row \\.+ \\[NO\\]"
		fi
	done
	# gds is never built in; its reason and fix follow the row.
	assert_line --regexp '^gds \.+ \[NO\]'
	assert_line --partial "    fix:    use async_io"
	if [[ " $feats " != *" libaio "* ]]; then
		assert_line "    fix:    reconfigure --with-libaio after apt-get install libaio-dev"
	fi
}

@test "ds-report: the cuda and nccl rows give versions, devices and whether each part is usable" {
	require_feature cuda
	run -0 --separate-stderr ds-report --color=never
	cuda=$(grep '^cuda ' <<<"$output") || fail "no cuda row: $output"
	nccl=$(grep '^nccl \.* \[' <<<"$output") || fail "no nccl row: $output"
	re='^cuda \.+ \[YES\] \.+ \[(OKAY|NO)\] \.+ runtime ([0-9]+\.[0-9]+|none), driver ([0-9]+\.[0-9]+|none), '
	re+='cuBLAS [0-9]+\.[0-9]+\.[0-9]+; ([0-9]+) devices?; CUDA (usable|not usable), cuBLAS (usable|not usable)$'
	[[ $cuda =~ $re ]] || fail "cuda row: $cuda"
	ok=${BASH_REMATCH[1]} ndev=${BASH_REMATCH[4]} cu=${BASH_REMATCH[5]} cb=${BASH_REMATCH[6]}
	# [OKAY] exactly when CUDA and cuBLAS both worked on device 0
	if [ "$cu $cb" = "usable usable" ]; then want=OKAY; else want=NO; fi
	assert_equal "$ok" "$want"
	[[ $nccl =~ ^nccl\ \.+\ \[YES\]\ \.+\ \[(OKAY|NO)\]\ \.+\ NCCL\ [0-9]+\.[0-9]+\.[0-9]+\;\ (usable|not\ usable)$ ]] ||
		fail "nccl row: $nccl"
	if [ "${BASH_REMATCH[2]}" = usable ]; then want=OKAY; else want=NO; fi
	assert_equal "${BASH_REMATCH[1]}" "$want"
	# nothing is usable without a device, and then the reason is CUDA's
	if [ "$ndev" = 0 ]; then
		[ "$cu $cb" = "not usable not usable" ] || fail "usable without a device: $cuda"
		assert_line --regexp '^    reason: cudaGetDeviceCount: '
	fi
	assert_line "gpus ............................. $ndev"
	assert_line --regexp '^cublas \.+ [0-9]+\.[0-9]+\.[0-9]+$'
	assert_line --regexp '^cuda_runtime \.+ [0-9]+\.[0-9]+$'
}

@test "ds-report: SIMD rows agree with the flags in /proc/cpuinfo" {
	[ -r /proc/cpuinfo ] || skip "no /proc/cpuinfo"
	flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
	run -0 --separate-stderr ds-report --color=never
	for f in avx2 fma f16c avx512f avx512_bf16; do
		if [[ "$flags" == *" $f "* ]]; then
			assert_line --regexp "^$f \\.+ \\[YES\\] \\.+ \\[OKAY\\]"
		else
			assert_line --regexp "^$f \\.+ \\[YES\\] \\.+ \\[NO\\]"
		fi
	done
}

@test "ds-report: the bf16_matmul row says which implementation bf16 products use and why" {
	[ -r /proc/cpuinfo ] || skip "no /proc/cpuinfo"
	flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
	feats=" $(ds-report --version | sed -n 's/^features: //p') "
	run -0 --separate-stderr ds-report --color=never
	row=$(grep '^bf16_matmul ' <<<"$output") || fail "no bf16_matmul row: $output"
	# dstk's own kernel is always built: the row is installed everywhere
	[[ "$row" =~ ^bf16_matmul\ \.+\ \[YES\] ]] || fail "$row"
	if [[ "$feats" == *" onednn "* && "$flags" == *" amx_bf16 "* && "$flags" == *" amx_tile "* ]]; then
		[[ "$row" == *"[OKAY]"*"oneDNN "*"amx"* ]] || fail "$row"
	elif [[ "$flags" == *" avx512_bf16 "* ]]; then
		# auto measured the kernel against sgemm: the faster one (by 10%) wins
		all=$(grep -A2 '^bf16_matmul ' <<<"$output")
		[[ "$all" =~ layer\ products\ ([0-9]+)\ vs\ sgemm\'s\ ([0-9]+)\ GFLOP/s,\ per-head\ ([0-9]+)\ vs\ ([0-9]+) ]] ||
			fail "no measurement: $all"
		k=${BASH_REMATCH[1]} s=${BASH_REMATCH[2]} kh=${BASH_REMATCH[3]} sh=${BASH_REMATCH[4]}
		if [[ "$row" == *"[OKAY]"* ]]; then
			[[ "$row" == *"dstk's AVX512_BF16 kernel"* ]] || fail "$row"
			[ $((10 * k >= 11 * s - 10 || 10 * kh >= 11 * sh - 10)) = 1 ] || fail "kernel chosen though slower: $all"
		else
			assert_line "    fix:    none needed (dstk.bf16_matmul \"avx512_bf16\" forces the kernel)"
			[ $((10 * k <= 11 * s + 10 && 10 * kh <= 11 * sh + 10)) = 1 ] || fail "sgemm chosen though slower: $all"
		fi
	else
		[[ "$row" == *"[NO]"* ]] || fail "$row"
		assert_line "    reason: this CPU has no AVX512_BF16 or AMX-BF16"
	fi
}

@test "ds-report --json parses and carries the same content" {
	require_jq
	run --separate-stderr ds-report --json
	assert_success
	echo "$output" | jq -e . >/dev/null
	for f in $FEATURES; do
		echo "$output" | jq -e --arg f "$f" '.features[$f] | (.installed|type=="boolean") and (.compatible|type=="boolean")' >/dev/null
	done
	# every row that is not fine carries a reason and a fix
	echo "$output" | jq -e '[.features[] | select(.installed and .compatible | not) | (.reason|type=="string") and (.fix|type=="string")] | all' >/dev/null
	assert_equal "$(echo "$output" | jq -r .build.features)" "$(ds-report --version | sed -n 's/^features: //p')"
}

@test "ds-report --json: machine facts match /proc/meminfo, getconf, nproc and df" {
	require_jq
	run -0 --separate-stderr ds-report --json
	mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
	assert_equal "$(echo "$output" | jq .machine.memory_total_bytes)" "$((mem_kb * 1024))"
	assert_equal "$(echo "$output" | jq .machine.cpus_online)" "$(getconf _NPROCESSORS_ONLN)"
	assert_equal "$(echo "$output" | jq .machine.cpus_usable)" "$(nproc)"
	assert_equal "$(echo "$output" | jq -r .machine.hostname)" "$(hostname)"
	if [ -d /dev/shm ]; then
		assert_equal "$(echo "$output" | jq .machine.shm_size_bytes)" "$(df -B1 --output=size /dev/shm | tail -1 | tr -d ' ')"
	fi
}

@test "ds-report: /dev/shm below 512 MiB is warned about, 512 MiB is not" {
	DS_REPORT_SHM_BYTES=67108864 run --separate-stderr ds-report --color=never --hide-operator-status
	assert_success
	assert_line "shm_size ......................... 64.00 MiB"
	assert_line --regexp '^    \[WARNING\] /dev/shm is smaller than 512 MiB.*--shm-size'
	DS_REPORT_SHM_BYTES=536870912 run -0 --separate-stderr ds-report --color=never
	assert_line "shm_size ......................... 512.00 MiB"
	refute_line --partial "/dev/shm is smaller"
	DS_REPORT_SHM_BYTES=1 run -0 --separate-stderr ds-report --color=never --hide_errors_and_warnings
	refute_line --partial "[WARNING]"
	refute_line --regexp '^    (reason|fix):'
	DS_REPORT_SHM_BYTES=lots run --separate-stderr -2 ds-report
	[[ "$stderr" == *"DS_REPORT_SHM_BYTES"* ]]
}

@test "ds-report --json lists the /dev/shm warning" {
	require_jq
	DS_REPORT_SHM_BYTES=1048576 run -0 --separate-stderr ds-report --json
	echo "$output" | jq -e '.machine.shm_size_bytes == 1048576 and ([.warnings[] | select(.name=="shm_size")] | length == 1)' >/dev/null
	DS_REPORT_SHM_BYTES=1073741824 run -0 --separate-stderr ds-report --json
	echo "$output" | jq -e '[.warnings[] | select(.name=="shm_size")] | length == 0' >/dev/null
}

@test "ds-report: --hide-operator-status (and DeepSpeed's _ spelling) leaves out the table" {
	run --separate-stderr ds-report --hide_operator_status --color=never
	assert_success
	refute_line --partial "# feature"
	refute_line --regexp '^async_io '
	assert_line "# machine"
}

@test "ds-report: colour only when asked or on a terminal" {
	run -0 --separate-stderr ds-report
	refute_output --partial $'\033['
	run -0 --separate-stderr ds-report --color=always
	assert_output --partial $'\033[92m[YES]\033[0m'
}

@test "ds-report: blas_threads reports the OpenBLAS actually loaded, not the one configured" {
	dir=/usr/lib/x86_64-linux-gnu
	[ -f $dir/openblas-pthread/libopenblas.so.0 ] || skip "no pthreads OpenBLAS (libopenblas0-pthread)"
	[ -f $dir/openblas-openmp/libopenblas.so.0 ] || skip "no OpenMP OpenBLAS (libopenblas0-openmp)"
	LD_LIBRARY_PATH=$dir/openblas-pthread run --separate-stderr ds-report --color=never
	assert_success
	assert_line --regexp '^blas_threads \.+ \[YES\] \.+ \[NO\] \.+ pthreads, '
	assert_line --partial "    reason: the pthreads OpenBLAS is loaded"
	LD_LIBRARY_PATH=$dir/openblas-openmp run -0 --separate-stderr ds-report --color=never
	assert_line --regexp '^blas_threads \.+ \[YES\] \.+ \[OKAY\] \.+ openmp, '
}

@test "ds-report: more OpenMP threads than usable CPUs is warned about" {
	n=$(nproc)
	OMP_NUM_THREADS=$((n + 1)) run --separate-stderr ds-report --color=never
	assert_line "openmp ................. [YES] ...... [OKAY] ...... OpenMP $(ds-report | sed -n 's/^openmp \.* \([0-9.]*\) .*/\1/p'), max $((n + 1)) threads"
	assert_line "    [WARNING] OpenMP will start $((n + 1)) threads on $n usable CPUs: set OMP_NUM_THREADS=$n"
	OMP_NUM_THREADS=1 run -0 --separate-stderr ds-report --color=never
	refute_line --partial "[WARNING] OpenMP"
}

@test "ds-report: a failed write is exit 1 with the reason, not a silent success" {
	[ -w /dev/full ] || skip "no /dev/full"
	run --separate-stderr -1 bash -c 'ds-report > /dev/full'
	[[ "$stderr" == "ds-report: writing the report: No space left on device" ]]
	run --separate-stderr -1 bash -c 'ds-report --json > /dev/full'
	[[ "$stderr" == *"No space left on device"* ]]
}

@test "configure's summary (config.log) says yes or no for each optional part, as --version's features do" {
	[ -f "$DS_BUILDDIR/config.log" ] || skip "no config.log in $DS_BUILDDIR"
	summary=$(sed -n '/^dstk .* configuration$/,/^$/p' "$DS_BUILDDIR/config.log")
	[ -n "$summary" ] || fail "no summary in config.log"
	[[ "$summary" != *'`'* ]] || fail "shell code in the summary: $summary"
	feats=" $(ds-report --version | sed -n 's/^features: //p') "
	for pair in MPI:mpi libaio:libaio "oneDNN (AMX bf16):onednn" "CUDA + NCCL:cuda"; do
		row=${pair%%:*} word=${pair#*:}
		want=no
		if [[ "$feats" == *" $word "* ]]; then want=yes; fi
		line=$(grep -F "  $row  " <<<"$summary") || fail "no $row row: $summary"
		val=${line:23}    # "  %-20s %s"
		[[ "$val" == "$want" || "$val" == "$want ("* ]] || fail "$row: '$val', want $want: $summary"
	done
}
