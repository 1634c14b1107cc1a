#!/bin/bash
# gpu-run.sh - run dstk's GPU tests and benches on a machine that has a GPU
# but none of dstk's Debian packages (the GPU test machine of
# shared/spec/gpu-machine.md), in one command there.
#
#   bench/gpu-run.sh pack         on the Debian 12 development machine: build
#                                 with CUDA (sm_80, sm_90) into build-gpu/ and
#                                 put the binaries, the data the tests read and
#                                 every shared library they need that is not
#                                 glibc, CUDA or NCCL into one archive,
#                                 build-gpucarry/payload.tar.xz (git ignores it)
#   bench/gpu-run.sh run [OUTDIR] on the GPU machine, from the repository root
#                                 with build-gpucarry carried: unpack, record the
#                                 machine's facts, run the unit tests (the CUDA
#                                 kernels' included), tests/gpu and the GPU
#                                 benches, raw output into OUTDIR (default $OUT,
#                                 else bench/results/gpu-DATE)
#
# tests/gpu holds what needs a device: test_* programs built there, and
# *.bats files (comm.bats: every collective on CUDA buffers over NCCL at one
# rank, over mpi staging through pinned memory at 2 and 4 ranks on one GPU,
# NCCL between ranks when there are two GPUs; train.bats: ds-train
# --device cuda against --device cpu, losses at ZeRO 0 and 3 and checkpoints
# resumed across devices).
#
# The run step needs nothing from the machine but bash, tar, xz, the NVIDIA
# driver, the CUDA runtime and cuBLAS under /usr/local/cuda, and NCCL (there
# or inside PyTorch's wheels: nvidia/nccl/lib); it says which one it used.
# bench/gpu-step.sh (GPT-2 124M and 350M training steps, ds-train --device
# cuda next to PyTorch eager and torch.compile: tokens/s, MFU, peak device
# memory) runs after the tests, within about 4 minutes, into gpu-step.txt.
# At most 8 output files (the device tool's limit): facts.txt, closure.txt,
# unit.tap, gpu-tests.tap, smoke.txt, gpu-step.txt, bench.txt.
set -u -o pipefail
stage=

top=$(cd "$(dirname "$0")/.." && pwd)
carry=$top/build-gpucarry
build=$top/build-gpu

die() { echo "gpu-run.sh: $*" >&2; exit 1; }

# libraries that come from the machine, never from the payload: glibc's, and
# the CUDA runtime, cuBLAS and NCCL, which must match the machine's driver
base_re='^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libutil|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia-.*)\.so'

closure() { # files... : the shared libraries they load, one path per line
	local f
	for f in "$@"; do
		ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
	done | sort -u | while read -r name path; do
		[[ $name =~ $base_re ]] || echo "$path"
	done | sort -u
}

elves() { # dir: the ELF programs and shared objects under it
	find "$1" -type f \( -perm -u+x -o -name '*.so*' \) -print0 2>/dev/null | while IFS= read -r -d '' f; do
		[ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] && echo "$f"
	done
}

pack() {
	command -v apt-get >/dev/null || die "pack runs on the Debian 12 development machine (no apt-get here)"
	[ -x /usr/local/cuda/bin/nvcc ] || die "pack needs the CUDA toolkit under /usr/local/cuda (nvcc not found)"
	cd "$top" || exit 1
	[ -x configure ] || autoreconf -fi >/dev/null 2>&1 || die "autoreconf failed"
	mkdir -p "$build" && cd "$build" || exit 1
	"$top/configure" -q --with-cuda --with-mpi >configure.out 2>&1 || { cat configure.out; die "configure --with-cuda failed"; }
	nice make -j"$(nproc)" >make.out 2>&1 || { tail -30 make.out; die "build failed (build-gpu/make.out)"; }
	nice make -j"$(nproc)" check TESTS= >>make.out 2>&1 || { tail -30 make.out; die "building the tests failed"; }

	stage=$(mktemp -d /tmp/dstk-gpu-pack.XXXXXX) || exit 1
	trap 'rm -rf "$stage"' EXIT
	mkdir -p "$stage/dstk/build-gpu" "$stage/dstk/lib" "$stage/root"
	# the binaries at the paths the tests expect, and the sources the tests read
	(cd "$build" && elves tools && elves tests && elves bench) | sed 's|^\./||' |
		(cd "$build" && xargs -r cp --parents -t "$stage/dstk/build-gpu")
	(cd "$top" && git ls-files -z tests share bench | xargs -0 cp --parents -t "$stage/dstk")
	# OpenMPI's launcher with its plugins and help files, as Debian lays them out
	(cd "$stage" && apt-get download -q openmpi-bin openmpi-common libopenmpi3 libpmix2 >/dev/null 2>&1) ||
		die "apt-get download of OpenMPI failed"
	local d
	for d in "$stage"/*.deb; do dpkg -x "$d" "$stage/root"; done
	rm -f "$stage"/*.deb
	# bats with bats-support and bats-assert, for tests/gpu
	tar -C / -cf - usr/bin/bats usr/lib/bats-core usr/libexec/bats-core usr/lib/bats |
		tar -C "$stage/root" -xf - || die "bats, bats-support and bats-assert must be installed here"
	# every library that a binary or an MPI plugin loads, to a fixed point
	local n=-1 m files
	while :; do
		mapfile -t files < <(elves "$stage")
		closure "${files[@]}" | while read -r d; do
			[ -e "$stage/dstk/lib/${d##*/}" ] || [[ $d == "$stage"* ]] || cp -L "$d" "$stage/dstk/lib/"
		done
		m=$(find "$stage/dstk/lib" -type f | wc -l)
		[ "$m" -eq "$n" ] && break
		n=$m
	done
	mkdir -p "$carry"
	git -C "$top" rev-parse HEAD >"$stage/dstk/COMMIT" 2>/dev/null
	tar -C "$stage" -cJf "$carry/payload.tar.xz" dstk root || die "tar failed"
	echo "build-gpucarry/payload.tar.xz: $(du -h "$carry/payload.tar.xz" | cut -f1)," \
		"$n libraries, commit $(cat "$stage/dstk/COMMIT")"
	echo "carry it: device run with carry [\"build-gpucarry\"] and command 'bench/gpu-run.sh run'"
}

find_nccl() { # a directory holding libnccl.so.2, the toolkit's first
	local d
	for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
		[ -e "$d/libnccl.so.2" ] && { echo "$d"; return; }
	done
	d=$(find / -xdev -name libnccl.so.2 -path '*nvidia/nccl/lib/*' 2>/dev/null | head -1)
	[ -n "$d" ] && dirname "$d"
}

run() {
	local out=${1:-${OUT:-$top/bench/results/gpu-$(date +%Y%m%d-%H%M%S)}}
	mkdir -p "$out" || die "cannot create $out"
	[ -f "$carry/payload.tar.xz" ] || die "no build-gpucarry/payload.tar.xz: run 'bench/gpu-run.sh pack' on the development machine and carry build-gpucarry"
	local w=/tmp/dstk-gpu
	rm -rf "$w"
	mkdir -p "$w" || die "cannot create $w"
	tar -C "$w" -xJf "$carry/payload.tar.xz" || die "cannot unpack the payload"
	# bats at the paths tests/cli/helper.bash loads them from, where absent
	[ -e /usr/lib/bats/bats-support/load.bash ] || cp -a "$w/root/usr/lib/bats" /usr/lib/ 2>/dev/null
	local bats=bats
	command -v bats >/dev/null || bats="$w/root/usr/bin/bats"
	[ -x "$w/root/usr/libexec/bats-core/bats" ] && [ ! -e /usr/libexec/bats-core ] && bats="$w/root/usr/libexec/bats-core/bats"

	local nccl
	nccl=$(find_nccl)
	export LD_LIBRARY_PATH="$w/dstk/lib:$w/root/usr/lib/x86_64-linux-gnu:$w/root/usr/lib/x86_64-linux-gnu/openmpi/lib:/usr/local/cuda/lib64${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export OPAL_PREFIX="$w/root/usr" PATH="$w/dstk/build-gpu/tools:$w/root/usr/bin:$PATH"
	export DS_SRCDIR="$w/dstk" DS_BUILDDIR="$w/dstk/build-gpu" CMOCKA_MESSAGE_OUTPUT=TAP LC_ALL=C
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
	cd "$w/dstk" || exit 1

	{
		echo "date: $(date -u +%FT%TZ)"
		echo "commit: $(cat COMMIT)"
		echo "host: $(uname -a)"
		grep -E '^(PRETTY_NAME|VERSION_ID)=' /etc/os-release
		echo "glibc: $(ldd --version 2>&1 | head -1)"
		echo "cpus: $(nproc); $(grep -m1 'model name' /proc/cpuinfo)"
		echo "nccl: ${nccl:-not found}"
		nvidia-smi 2>&1
		nvidia-smi -q 2>&1 | grep -E 'Product Name|Driver Version|CUDA Version|Memory|Clocks' | head -20
		ls -l /usr/local/cuda/lib64/lib{cudart,cublas,cublasLt,nccl}.so.* 2>&1
		python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' 2>&1
		ds-report 2>&1
	} >"$out/facts.txt" 2>&1

	# every library resolved, and none from outside the payload but the base set
	{
		local f bad=0
		for f in $(elves build-gpu) $(elves "$w/root/usr/bin"); do
			ldd "$f" 2>&1 | grep -q 'not found' && { echo "MISSING in $f:"; ldd "$f" | grep 'not found'; bad=1; }
		done
		echo "closure: $([ $bad = 0 ] && echo complete || echo INCOMPLETE)"
	} >"$out/closure.txt" 2>&1

	local t rc=0
	: >"$out/unit.tap"
	for t in build-gpu/tests/unit/test_*; do
		[ -x "$t" ] || continue
		echo "# $t" >>"$out/unit.tap"
		timeout 600 bash tests/unit/cmocka-tap.sh "$t" >>"$out/unit.tap" 2>&1 || { echo "# exit $? from $t" >>"$out/unit.tap"; rc=1; }
	done
	{
		if [ -d tests/gpu ]; then
			for t in build-gpu/tests/gpu/test_*; do [ -x "$t" ] && { echo "# $t"; timeout 600 "$t" || rc=1; }; done
			ls tests/gpu/*.bats >/dev/null 2>&1 && { timeout 1200 "$bats" --tap tests/gpu/*.bats || rc=1; }
		else
			echo "# no tests/gpu at this commit"
		fi
	} >"$out/gpu-tests.tap" 2>&1
	{
		# the data by its path: the binaries' compiled-in source path is this machine's
		ds-train -m share/models/gpt-test.json --data share/data/devils-dictionary.txt --train-iters 4 2>&1
		echo "exit $?"
		timeout 300 mpirun.openmpi --oversubscribe --bind-to none -np 2 \
			ds-train -m share/models/gpt-test.json --data share/data/devils-dictionary.txt --train-iters 4 2>&1
		echo "exit $? (mpirun -np 2)"
	} >"$out/smoke.txt" 2>&1
	# bench/gpu-step.sh keeps to its 240 s budget (each part has its own
	# timeout); 300 s here is the backstop should the script itself hang
	timeout -k 10 300 bash bench/gpu-step.sh >"$out/gpu-step.txt" 2>&1
	echo "exit $? (bench/gpu-step.sh)" >>"$out/gpu-step.txt"
	{
		[ -x build-gpu/bench/cuda-kernels ] && timeout 300 build-gpu/bench/cuda-kernels 2>&1
		OMP_NUM_THREADS=$(nproc) timeout 300 build-gpu/bench/gpt-step gpt2 5 2>&1
	} >"$out/bench.txt" 2>&1
	echo "gpu-run.sh: raw output in $out:"
	ls -l "$out"
	grep -h -E '^(not ok|closure|# exit)' "$out"/*.t* "$out/closure.txt" 2>/dev/null
	sed -n '/^model /,/^# bench wall time/p' "$out/gpu-step.txt" 2>/dev/null
	return $rc
}

case ${1:-} in
pack) pack ;;
run) shift; run "$@" ;;
*) echo "usage: bench/gpu-run.sh pack | run [OUTDIR]" >&2; exit 2 ;;
esac
