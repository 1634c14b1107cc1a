# bats-lint.awk - for tests/shellcheck.sh: the assertions that cannot fail
# which ShellCheck does not see, in bats files and their helpers.  bats runs
# a test under `set -e`, and bash stops neither at
#   - a failing command of an && list other than the last one, e.g.
#         [ -d ck/global_step2 ] && [ -d ck/global_step4 ]
#     (a false left side is never reported): write one assertion per line,
#     A || fail "...", or an if.  An && list stays allowed where it is
#     plainly a condition: in an if/while/until test, with a || after it,
#     or ending in skip, continue, break, return, exit, shift, an
#     assignment, export/local/declare/unset, or a { ... } group;
#   - a `!` command, e.g. `! cmp -s a b` (ShellCheck's SC2314/SC2315 see it
#     only at the top level of a @test, not in a loop or an if): use
#     `run -1 cmp -s a b`, or `if cmp -s a b; then fail ...; fi`.  A `!`
#     command right before a closing } (a predicate function's result, or a
#     test's last line) is left alone.
# Prints FILE:LINE: error: ... [bats-lint], as ShellCheck's gcc format does;
# exit status 1 when it printed anything.

# blank(s): s with the text of quotes, $( ), [[ ]] and (( )) replaced by
# spaces; an open quote carries over to the next line in `q`.
function blank(s,    out, i, n, c) {
	out = ""
	n = length(s)
	for (i = 1; i <= n; i++) {
		c = substr(s, i, 1)
		if (q == "'") {
			if (c == "'") { q = ""; out = out c } else out = out " "
			continue
		}
		if (q == "\"") {
			if (c == "\\") { out = out "  "; i++; continue }
			if (c == "\"") { q = ""; out = out c } else out = out " "
			continue
		}
		if (c == "\\") { out = out substr(s, i, 2); i++; continue }
		if (c == "'" || c == "\"") { q = c; out = out c; continue }
		if (c == "#" && (i == 1 || substr(s, i - 1, 1) ~ /[ \t;]/)) break
		out = out c
	}
	return out
}

# inner(s, open, close): s with what lies between each `open` and its
# matching `close` (nested pairs counted) blanked.
function inner(s, op, cl,    p, i, d, c, r) {
	while ((p = index(s, op)) > 0) {
		d = 1
		for (i = p + length(op); i <= length(s) && d > 0; i++) {
			c = substr(s, i, length(cl))
			if (substr(s, i, length(op)) == op) d++
			else if (c == cl) d--
		}
		r = substr(s, p + length(op), i - 1 - p - length(op))
		gsub(/./, " ", r)
		s = substr(s, 1, p - 1) "\001" r "\002" substr(s, i - 1 + length(cl))
	}
	gsub(/\001/, op, s); gsub(/\002/, cl, s)
	return s
}

function complain(line, msg) {
	printf "%s:%d: error: %s [bats-lint]\n", FILENAME, line, msg
	bad++
}

# check(stmt, line): the statement (quotes blanked) that starts on `line`,
# split at ; and at then/do/else (a "\001" marks where a body starts, so
# the segments of an if/while condition, a { } group included, are known).
function check(stmt, line,    segs, k, n, seg, last, cond) {
	stmt = inner(stmt, "$(", ")")
	stmt = inner(stmt, "[[", "]]")
	stmt = inner(stmt, "((", "))")
	gsub(/;;/, "  ", stmt)
	stmt = " " stmt " "
	gsub(/[ \t;](then|do|else)[ \t]/, ";\001 ", stmt)
	n = split(stmt, segs, /;/)
	cond = 0
	for (k = 1; k <= n; k++) {
		seg = segs[k]
		if (seg ~ /^\001/) cond = 0
		sub(/^[\001 \t]*([{(][ \t]+)*/, "", seg)
		if (seg ~ /^[ \t]*$/) continue
		if (bang) {	# a `!` statement is fine only as a function's last
			if (seg !~ /^}/) complain(bang, "a ! command never fails a test (set -e ignores it): run -1 CMD, or if CMD; then fail ...; fi")
			bang = 0
		}
		if (seg ~ /^(if|elif|while|until)[ \t]/) cond = 1
		if (cond) continue
		if (seg ~ /^![ \t]/ && seg !~ /\|\|/) bang = line
		if (seg !~ /&&/) continue
		last = seg
		sub(/.*&&[ \t]*/, "", last)
		if (last ~ /\|\|/) continue
		if (last ~ /^(skip|continue|break|return|exit|shift|export|local|declare|unset)([ \t]|$)/) continue
		if (last ~ /^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=/) continue
		if (last ~ /^[{(]/) continue
		complain(line, "a false command left of && is never reported (set -e stops only at the last command of an && list): one assertion per line, A || fail \"...\", or if")
	}
}

FNR == 1 { q = ""; hd = ""; buf = ""; bang = 0 }
{
	if (hd != "") {			# a here-document's text: data, not code
		t = $0
		if (hdtabs) sub(/^\t+/, "", t)
		if (t == hd) hd = ""
		next
	}
	if (buf == "") start = FNR
	wasq = q
	b = blank($0)
	if (wasq == "" && match($0, /<<-?[ \t]*['"]?[A-Za-z_][A-Za-z0-9_]*/) && substr($0, RSTART, 3) != "<<<") {
		hd = substr($0, RSTART, RLENGTH)
		hdtabs = (hd ~ /^<<-/)
		sub(/^<<-?[ \t]*['"]?/, "", hd)
	}
	buf = buf " " b
	if (q != "" || buf ~ /(\\|&&|\|\||\|)[ \t]*$/) {	# the statement goes on
		sub(/\\[ \t]*$/, "", buf)
		next
	}
	check(buf, start)
	buf = ""
}
END { exit bad > 0 }
