#!/bin/bash
# ds-train-cuda-emu.sh - tests/gpu/train.bats without a GPU: its --device
# cuda runs made by tests/unit/ds-train-emu (ds-train over the host
# emulation of CUDA, lib/driver/train.mk), against ds-train --device cpu,
# with the same bounds (1e-5 relative in fp32, 1e-2 in fp16/bf16, the
# loss scale equal), so every CI run trains the cuda backend end to end
# (dropout, AdamW, clipping, ZeRO-3, checkpoints across devices, fp16 and
# bf16 with the loss scaler and injected overflows) on emulated device
# memory that host code cannot touch.
# Emulated kernels are slow (about 6 s a step of the test model on 2
# cores, against 20 steps a run on a GPU): DS_GPU_TRAIN_ITERS steps a run
# here (default 6, the checkpoint at 3).  A device not answering fails
# (DS_GPU_REQUIRE=1) rather than skips.  A build without CUDA skips the
# file with the reason.  The TAP lines are train.bats's own.
set -u
: "${DS_BUILDDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${DS_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
export DS_BUILDDIR DS_SRCDIR
emu=$DS_BUILDDIR/tests/unit/ds-train-emu
if ! "$DS_BUILDDIR/tools/ds-report" --version 2>/dev/null | grep -qw cuda; then
	echo "1..0 # SKIP built without CUDA (no emulated ds-train)"
	exit 0
fi
if [ ! -x "$emu" ]; then
	echo "1..1"
	echo "not ok 1 $emu is missing: make check builds it (check_PROGRAMS) on a CUDA build"
	exit 1
fi
export DS_TRAIN_CUDA=$emu DS_GPU_REQUIRE=1 DS_GPU_TRAIN_ITERS=${DS_GPU_TRAIN_ITERS:-6}
exec "${BATS:-bats}" --tap "$DS_SRCDIR/tests/gpu/train.bats"
