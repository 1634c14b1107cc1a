#!/usr/bin/env bats
# man.bats - every built tool keeps the common conventions (DESIGN.md
# "Conventions for the tools", STYLE rule 10) and a man page in step with
# its --help.  Generic over whatever ds-* the build's tools/ holds, so a new
# tool is checked as soon as it is built.
#
# Options are the tokens --[a-z0-9][a-z0-9_-]*, with '_' read as '-'.
# Every option --help shows must appear somewhere in share/man/TOOL.1; every
# option in the man page's SYNOPSIS and OPTIONS sections must appear in
# --help (other sections may quote other tools' or configure's flags).
# shellcheck disable=SC2154  # stderr, stderr_lines: set by bats' run --separate-stderr
load helper

# The ds-* executables this build made (objects and scripts skipped).
built_tools() {
	local f
	for f in "$DS_BUILDDIR"/tools/ds-*; do
		if [[ -f $f && -x $f && $(basename "$f") != *.* ]]; then basename "$f"; fi
	done
	return 0
}

# Long options in stdin, normalised, one per line, sorted and unique.
long_opts() { grep -oE -- '--[a-z0-9][a-z0-9_-]*' | tr _ - | sed 's/-*$//' | sort -u; }

# A roff page as text: \- is '-', font escapes dropped.
man_text() { sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' -e 's/\\f\[[A-Z]*\]//g' "$1"; }

# Only the SYNOPSIS and OPTIONS sections of a page.
man_option_text() {
	man_text "$1" | awk '/^\.SH/ { on = ($0 ~ /^\.SH +"?(SYNOPSIS|OPTIONS)"?[ \t]*$/); next } on'
}

@test "man: the build has tools to check" {
	run -0 built_tools
	assert_line ds-report
}

@test "man: every built tool has share/man/TOOL.1" {
	missing=
	for t in $(built_tools); do
		[ -f "$SHARE/man/$t.1" ] || missing+=" $t"
	done
	[ -z "$missing" ] || fail "no man page in $SHARE/man for:$missing"
}

@test "man: every long option of --help is in the man page" {
	bad=
	for t in $(built_tools); do
		page="$SHARE/man/$t.1"
		[ -f "$page" ] || continue # reported by the test above
		gone=$(comm -23 <("$t" --help | long_opts) <(man_text "$page" | long_opts) | tr '\n' ' ')
		[ -z "$gone" ] || bad+=$'\n'"$t: in --help, not in $t.1: $gone"
	done
	[ -z "$bad" ] || fail "$bad"
}

@test "man: every long option in a man page's SYNOPSIS and OPTIONS is in --help" {
	bad=
	for t in $(built_tools); do
		page="$SHARE/man/$t.1"
		[ -f "$page" ] || continue
		grep -q '^\.SH *"\{0,1\}OPTIONS' "$page" || { bad+=$'\n'"$t.1: no OPTIONS section"; continue; }
		extra=$(comm -13 <("$t" --help | long_opts) <(man_option_text "$page" | long_opts) | tr '\n' ' ')
		[ -z "$extra" ] || bad+=$'\n'"$t: in $t.1, not in --help: $extra"
	done
	[ -z "$bad" ] || fail "$bad"
}

@test "every tool: --version exits 0 and prints 'TOOL (dstk) VERSION' and 'features:'" {
	for t in $(built_tools); do
		run --separate-stderr "$t" --version
		[ "$status" -eq 0 ] || fail "$t --version exited $status"
		[[ "${lines[0]}" =~ ^$t\ \(dstk\)\ [0-9] ]] || fail "$t --version: first line '${lines[0]}'"
		[[ "$output" == *$'\n'"features: "* ]] || fail "$t --version: no 'features:' line"
	done
}

@test "every tool: --help exits 0 with the usage on stdout" {
	for t in $(built_tools); do
		run --separate-stderr "$t" --help
		[ "$status" -eq 0 ] || fail "$t --help exited $status"
		[[ "${lines[0]}" == "Usage: $t"* ]] || fail "$t --help: stdout does not start 'Usage: $t'"
	done
}

@test "every tool: a bad flag exits 2 with 'Try TOOL --help' on stderr" {
	for t in $(built_tools); do
		run --separate-stderr "$t" --no-such-option-xyzzy
		[ "$status" -eq 2 ] || fail "$t --no-such-option-xyzzy exited $status, not 2"
		[[ "$stderr" == *"Try '$t --help'"* ]] || fail "$t: no \"Try '$t --help'\" on stderr: $stderr"
		[ -z "$output" ] || fail "$t: a bad flag wrote to stdout: $output"
	done
}

@test "every tool: long options accept '_' for '-'" {
	cd "$BATS_TEST_TMPDIR"
	for t in $(built_tools); do
		for opt in $("$t" --help | long_opts | grep -- '--.*-' | grep -v -- '^--help$\|^--version$'); do
			under="--$(echo "${opt#--}" | tr - _)"
			# Two bad flags after it: whether or not $under takes a value,
			# the tool stops at a bad flag (exit 2) before doing any work,
			# or exits 0 for an option that acts at once (like --help).
			# getopt_long quotes an option it does not know: neither
			# spelling may be the one it complains about.
			run --separate-stderr bounded 20 "$t" "$under" --no-such-option-xyzzy --no-such-option-xyzzy
			[[ "$status" -eq 2 || "$status" -eq 0 ]] || fail "$t $under --no-such-option-xyzzy ...: exit $status"
			[[ "$stderr" != *"'$under'"* && "$stderr" != *"'$opt'"* ]] || fail "$t does not accept $under: $stderr"
		done
	done
}
