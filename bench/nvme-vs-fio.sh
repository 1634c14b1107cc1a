#!/bin/bash
# nvme-vs-fio.sh - the tuned dstk aio engine against fio on one directory.
#
#   bench/nvme-vs-fio.sh DIR [IO_SIZE] [LOOPS]      (defaults: 400M, 3)
#
# 1. ds-nvme-tune's default search on DIR (its wall time is the "finds the
#    best in under 60 s" figure);
# 2. three rounds of: ds-nvme-tune with only the best settings and LOOPS
#    loops (a fresh measurement, not the search's best draw), then fio,
#    libaio, O_DIRECT, the same bytes (IO_SIZE split into
#    intra_op_parallelism jobs of contiguous chunks of one file, as the
#    engine splits it), bs = block_size, iodepth = queue_depth, the
#    batch sizes that match single_submit / overlap_events, LOOPS loops.
# Prints the median GB/s (2^30 bytes/s) of each for read and write and dstk/fio.
# A benchmark, not a test: it never fails on a ratio.  Needs fio and jq.
set -euo pipefail

dir=${1:?usage: $0 DIR [IO_SIZE] [LOOPS]}
io=${2:-400M}
loops=${3:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
tune=${NVME_TUNE:-$(command -v ds-nvme-tune || echo "$here/tools/ds-nvme-tune")}
for t in fio jq "$tune"; do
	command -v "$t" >/dev/null || { echo "$0: $t not found (set NVME_TUNE to the built tool)" >&2; exit 2; }
done
work=$(mktemp -d)
fiofile="$dir/_fio_bench.$$"
trap 'rm -rf "$work"; rm -f "$fiofile"' EXIT

bytes=$(numfmt --from=iec "$io")
echo "# directory $dir ($(df -hT "$dir" | awk 'NR==2 {print $2 " on " $1}')), io_size $io, loops $loops"
echo "# $("$tune" --version | tr '\n' ' ')"
echo "# fio $(fio --version)"

t0=$(date +%s.%N)
"$tune" --nvme_dir "$dir" --io_size "$io" --json -q >"$work/search.json"
t1=$(date +%s.%N)
jq '.aio' "$work/search.json" >"$work/best.json"
read -r bs qd par ss ov < <(jq -r '[.block_size, .queue_depth, .intra_op_parallelism, .single_submit, .overlap_events] | @tsv' "$work/best.json")
printf 'search: %d trials of %d in %.1f s (engine %s, %s); best block_size %s queue_depth %s intra_op_parallelism %s single_submit %s overlap_events %s\n' \
	"$(jq .trials_run "$work/search.json")" "$(jq .space_size "$work/search.json")" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" \
	"$(jq -r .engine "$work/search.json")" "$(jq -r .io_mode "$work/search.json")" "$bs" "$qd" "$par" "$ss" "$ov"

jq '{block_size: [.block_size], queue_depth: [.queue_depth], intra_op_parallelism: [.intra_op_parallelism],
     single_submit: [.single_submit], overlap_events: [.overlap_events]}' "$work/best.json" >"$work/sweep.json"

chunk=$((bytes / par))
# the submission modes in fio's terms: single_submit = one iocb per
# io_submit; without overlap_events a whole batch is reaped before the next
batch=$qd; [ "$ss" = true ] && batch=1
reap=1; [ "$ov" = true ] || reap=$qd
fio_gbps() { # rw
	fio --name="dstk_$1" --filename="$fiofile" --rw="$1" --bs="$bs" --iodepth="$qd" --numjobs="$par" \
		--iodepth_batch_submit="$batch" --iodepth_batch_complete_min="$reap" --iodepth_batch_complete_max="$qd" \
		--size="$chunk" --offset_increment="$chunk" --ioengine=libaio --direct=1 --loops="$loops" \
		--group_reporting --output-format=json 2>/dev/null |
		jq --arg k "$1" '.jobs[0][$k].bw_bytes / 1073741824'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# three interleaved rounds, medians compared: the disk's drift hits both
for _ in 1 2 3; do
	"$tune" --nvme_dir "$dir" --io_size "$io" --loops "$loops" --sweep_config "$work/sweep.json" --json -q >"$work/again.json"
	jq .best.read_gbps "$work/again.json" >>"$work/ds_r"
	jq .best.write_gbps "$work/again.json" >>"$work/ds_w"
	fio_gbps write >>"$work/fio_w"
	fio_gbps read >>"$work/fio_r"
done
ds_r=$(median <"$work/ds_r")
ds_w=$(median <"$work/ds_w")
fio_r=$(median <"$work/fio_r")
fio_w=$(median <"$work/fio_w")
echo "# rounds (GB/s): dstk read $(paste -sd' ' "$work/ds_r"), fio read $(paste -sd' ' "$work/fio_r")"
echo "#                dstk write $(paste -sd' ' "$work/ds_w"), fio write $(paste -sd' ' "$work/fio_w")"

printf '%-6s %12s %12s %8s\n' op dstk_gbps fio_gbps ratio
awk -v r="$ds_r" -v fr="$fio_r" -v w="$ds_w" -v fw="$fio_w" 'BEGIN {
	printf "%-6s %12.3f %12.3f %7.1f%%\n", "read", r, fr, 100 * r / fr
	printf "%-6s %12.3f %12.3f %7.1f%%\n", "write", w, fw, 100 * w / fw
}'
