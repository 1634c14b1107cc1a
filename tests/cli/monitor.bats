#!/usr/bin/env bats
# monitor.bats - TensorBoard event files decoded by protoc, an encoder and
# decoder independent of lib/monitor/tb.c.  The TFRecord framing (u64 LE
# length, crc, data, crc) is stripped here with od and head/tail; the CRCs
# themselves are checked bit by bit in tests/unit/test_monitor.c.
load helper

EVENTS="$DS_BUILDDIR/tests/cli/monitor_events"

setup() {
	command -v protoc >/dev/null || skip "protoc not installed (apt-get install protobuf-compiler)"
}

# records FILE: decode each record with `protoc --decode=tensorboard.Event`,
# one "== record N" line before each.
records() {
	local f=$1 off=0 n=0 size len
	size=$(stat -c %s "$f")
	while [ "$off" -lt "$size" ]; do
		len=$(od -An -tu8 -j "$off" -N8 --endian=little "$f" | tr -d ' ')
		echo "== record $n"
		tail -c +$((off + 13)) "$f" | head -c "$len" |
			protoc --decode=tensorboard.Event -I "$TDATA" "$TDATA/tb_event.proto" || return 1
		off=$((off + 16 + len))
		n=$((n + 1))
	done
	[ "$off" -eq "$size" ] || { echo "trailing bytes: $off of $size"; return 1; }
}

# raw FILE N: record N through `protoc --decode_raw` (no schema at all).
raw() {
	local f=$1 want=$2 off=0 n=0 len
	while :; do
		len=$(od -An -tu8 -j "$off" -N8 --endian=little "$f" | tr -d ' ')
		[ -n "$len" ] || { echo "no record $want"; return 1; }
		if [ "$n" -eq "$want" ]; then
			tail -c +$((off + 13)) "$f" | head -c "$len" | protoc --decode_raw
			return
		fi
		off=$((off + 16 + len))
		n=$((n + 1))
	done
}

@test "event file: file_version first, then tags, steps and values as written" {
	run "$EVENTS" tb "$BATS_TEST_TMPDIR/tb"
	assert_success
	f=$output
	[[ "$(basename "$f")" =~ ^events\.out\.tfevents\.1700000000\.$(uname -n)\.[0-9]+\.[0-9]+$ ]]
	run records "$f"
	assert_success
	assert_output - <<'OUT'
== record 0
wall_time: 1700000000.5
file_version: "brain.Event:2"
== record 1
wall_time: 1700000001.25
step: 64
summary {
  value {
    tag: "Train/Samples/train_loss"
    simple_value: 2.5
  }
}
== record 2
wall_time: 1700000002
step: 128
summary {
  value {
    tag: "Train/Samples/lr"
    simple_value: 0.25
  }
}
== record 3
wall_time: 1700000003
step: 300
summary {
  value {
    tag: "Train/Samples/loss_scale"
    simple_value: 65536
  }
}
== record 4
wall_time: 1700000004
step: -5
summary {
  value {
    tag: "a tag, with \"quotes\""
    simple_value: -1.5
  }
}
OUT
}

@test "event file: --decode_raw sees the same field numbers and bit patterns" {
	run "$EVENTS" tb "$BATS_TEST_TMPDIR/tb"
	assert_success
	run raw "$output" 2
	assert_success
	# wall_time 1700000002.0 is 0x41d954fc40800000 and float 0.25 is 0x3e800000
	# (struct.pack("<d"/"<f") in Python)
	assert_output - <<'OUT'
1: 0x41d954fc40800000
2: 128
5 {
  1 {
    1: "Train/Samples/lr"
    2: 0x3e800000
  }
}
OUT
}

@test "monitor with csv_monitor and tensorboard: one job directory, DeepSpeed's files" {
	run "$EVENTS" both "$BATS_TEST_TMPDIR/out"
	assert_success
	f=$output
	[ "$(dirname "$f")" = "$BATS_TEST_TMPDIR/out/J" ]
	run records "$f"
	assert_success
	assert_line 'file_version: "brain.Event:2"'
	assert_line '    tag: "Train/Samples/train_loss"'
	assert_line '    simple_value: 2.34567809'  # float32(2.345678) to 9 digits
	assert_line 'step: 64'
	assert_line '    simple_value: 0.001'
	# the CSV files, byte for byte (Python's csv: \r\n line ends)
	printf 'step,lr\r\n64,0.001\r\n' | cmp - "$BATS_TEST_TMPDIR/out/J/Train_Samples_lr.csv"
	printf 'step,train_loss\r\n0,2.345678\r\n' | cmp - "$BATS_TEST_TMPDIR/out/J/Train_Samples_train_loss.csv"
}

@test "resumed run: the event file purges the abandoned steps, then DeepSpeed's x-axis" {
	run "$EVENTS" resume "$BATS_TEST_TMPDIR/out"
	assert_success
	run records "$output"
	assert_success
	# torch's SummaryWriter(purge_step=128): file_version and SessionLog START
	# at step 128; then train_loss at 2*64, lr and loss_scale at 3*64
	run grep -v wall_time <<<"$output"
	assert_output - <<'OUT'
== record 0
file_version: "brain.Event:2"
== record 1
step: 128
file_version: "brain.Event:2"
== record 2
step: 128
session_log {
  status: START
}
== record 3
step: 128
summary {
  value {
    tag: "Train/Samples/train_loss"
    simple_value: 3.5
  }
}
== record 4
step: 192
summary {
  value {
    tag: "Train/Samples/lr"
    simple_value: 0.001
  }
}
== record 5
step: 192
summary {
  value {
    tag: "Train/Samples/loss_scale"
    simple_value: 32768
  }
}
OUT
}

@test "monitor: an output_path that cannot be a directory is one clear error" {
	touch "$BATS_TEST_TMPDIR/file"
	run -1 "$EVENTS" both "$BATS_TEST_TMPDIR/file"
	assert_output --partial "$BATS_TEST_TMPDIR/file"
	assert_output --partial "not a directory"
	[ "${#lines[@]}" -eq 1 ]
}
