#!/bin/bash
# pipeline.sh - submit nvme-tune -> autotune -> train -> convert as four
# Slurm jobs, each starting only when the one before succeeded
# (--dependency=afterok).  Run it on a login node:
#
#   contrib/slurm/pipeline.sh WORK_DIR DS_CONFIG MODEL NVME_DIR [ds-train flags...]
#
# DS_CONFIG holds "auto" values and an "autotuning" section.  Under WORK_DIR:
# ds_config_aio.json (stage 1), autotune/ds_config_optimal.json (2),
# ckpt/ (3, preemptible: see train.sbatch), hf/ (4).  Prints one
# "STAGE JOBID" line per job.  Environment: DS_NTASKS (ranks of the autotune
# and train jobs, default 2), NVME_TUNE_FLAGS, AUTOTUNE_FLAGS, CONVERT_FLAGS
# (extra flags of those tools), SBATCH_FLAGS (extra sbatch flags of every job).
set -eu
if [ $# -lt 4 ]; then
	echo "usage: $0 WORK_DIR DS_CONFIG MODEL NVME_DIR [ds-train flags...]" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
work=$(mkdir -p "$1" && cd "$1" && pwd)
cfg=$2 model=$3 nvme=$4
shift 4
n=${DS_NTASKS:-2}
# shellcheck disable=SC2086  # SBATCH_FLAGS: a list of flags, split on purpose
sb() { sbatch --parsable ${SBATCH_FLAGS:-} "$@"; }
# shellcheck disable=SC2086  # the *_FLAGS: lists of flags, split on purpose
j1=$(sb --output="$work/nvme-tune-%j.out" "$here/nvme-tune.sbatch" "$nvme" "$cfg" "$work/ds_config_aio.json" \
	${NVME_TUNE_FLAGS:-})
# shellcheck disable=SC2086  # the *_FLAGS: lists of flags, split on purpose
j2=$(sb --dependency=afterok:"$j1" --ntasks="$n" --output="$work/autotune-%j.out" "$here/autotune.sbatch" \
	"$work/ds_config_aio.json" "$model" "$work/autotune" ${AUTOTUNE_FLAGS:-})
j3=$(sb --dependency=afterok:"$j2" --ntasks="$n" --output="$work/train-%j.out" "$here/train.sbatch" \
	"$work/autotune/ds_config_optimal.json" "$model" "$work/ckpt" "$@")
# shellcheck disable=SC2086  # the *_FLAGS: lists of flags, split on purpose
j4=$(sb --dependency=afterok:"$j3" --output="$work/convert-%j.out" "$here/convert.sbatch" "$work/ckpt" "$work/hf" \
	${CONVERT_FLAGS:-})
printf 'nvme-tune %s\nautotune %s\ntrain %s\nconvert %s\n' "$j1" "$j2" "$j3" "$j4"
