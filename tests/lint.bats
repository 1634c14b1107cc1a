#!/usr/bin/env bats
# lint.bats - the ShellCheck pass (tests/shellcheck.sh) and tests/bats-lint.awk
# catch the assertions that cannot fail in a bats test, name the file and the
# line, and leave conditions alone.
load cli/helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return
	LINT="$DS_SRCDIR/tests/bats-lint.awk"
}

@test "bats-lint: an && assertion and a ! command that cannot fail are errors naming the line" {
	# (TEST stands for @test, which bats would read as one of its own tests)
	sed 's/^TEST/@test/' >t.bats <<-'EOF'
	TEST "t" {
		[ -d a ] && [ -d b ]
		mkdir a && mv b a
		grep -q a f &&
			grep -q b f
		for s in 1 2; do
			! cmp -s a b
		done
		echo "$(cd "$x" && pwd)" && true
		[ 1 ]
	}
	EOF
	run -1 awk -f "$LINT" t.bats
	assert_line --index 0 --regexp '^t\.bats:2: error: a false command left of && is never reported .*\[bats-lint\]$'
	assert_line --index 1 --partial 't.bats:3: error: a false command left of &&'
	assert_line --index 2 --partial 't.bats:4: error: a false command left of &&'
	assert_line --index 3 --regexp '^t\.bats:7: error: a ! command never fails a test .*\[bats-lint\]$'
	assert_line --index 4 --partial 't.bats:9: error: a false command left of &&'
	[ "${#lines[@]}" -eq 5 ] || fail "$output"
}

@test "bats-lint: conditions, substitutions, quoted programs and here-documents pass" {
	sed 's/^TEST/@test/' >ok.bats <<-'EOF'
	pred() { ! grep -q x f; }
	TEST "t" {
		x=$(cd "$d" && pwd)
		y=$([ a = b ] && echo 1 || echo 2)
		[[ -f $f && -x $f ]]
		[ -n "$x" ] && skip "no x"
		for i in 1 2; do [ -f "$i" ] && break; done
		if [ a ] && [ b ]; then echo; fi
		if { [ a ] || [ b ]; } && grep -q c f; then :; fi
		while [ a ] &&
			[ b ]; do :; done
		awk 'BEGIN { exit !(1 && 2) }'
		awk '
			$1 && $2 { print }
		' f
		cat <<-EOT
		a && b
		EOT
		echo "x && y"
		[ a ] && st=1 tol=2
		[ a ] && { echo no; false; }
		[ "$s" -ne 0 ] && [ "$s" -ne 124 ] || fail "status $s"
		! cmp -s a b || fail "same"
		if ! cmp -s a b; then :; fi
		! grep -q x f
	}
	EOF
	run -0 awk -f "$LINT" ok.bats
	assert_output ""
}

@test "the ShellCheck pass fails the file with the finding, one TAP line per file" {
	command -v shellcheck >/dev/null || skip "shellcheck not installed"
	mkdir -p src/tests src/contrib src/bench
	printf '#!/usr/bin/env bats\n%s "t" {\n\t! grep -q x f\n\ttrue\n}\n' @test >src/tests/bad.bats
	printf '#!/bin/bash\necho hello\n' >src/tests/good.sh
	pass="$DS_SRCDIR/tests/shellcheck.sh"
	DS_SRCDIR=$PWD/src SHELLCHECK=shellcheck run -0 bash "$pass"
	assert_line --index 0 '1..2'
	assert_line --index 1 'not ok 1 - tests/bad.bats'
	assert_line --regexp '^# tests/bad\.bats:3:2: error: In Bats, ! does not cause a test failure.*\[SC2314\]$'
	assert_line --regexp '^# tests/bad\.bats:3: error: a ! command never fails a test'
	assert_line 'ok 2 - tests/good.sh'
	# no shellcheck: skipped as a whole
	SHELLCHECK='' run -0 bash "$pass"
	assert_output --regexp '^1\.\.0 # SKIP shellcheck not installed'
}
