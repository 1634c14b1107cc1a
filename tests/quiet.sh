#!/bin/sh
# quiet.sh - libds never prints, exits or aborts (STYLE rule 4): no
# printf/puts/perror, no stdout/stderr, no exit/abort/MPI_Abort in lib/ and
# kernels/, comments and string literals aside.  It writes only to streams
# its caller passes (monitor/out.h, FILE * arguments) and returns errors;
# the tools print, exit and decide to end a job.  The few places that must
# are listed below with the reason; ds_comm_abort is the tools' to call.
# One TAP line per directory.
src=${DS_SRCDIR:-.}
cd "$src" || exit 1

# file:word allowed there, and why
allow='
lib/util/log.c:stderr        the one logger: stderr unless the tool sets its stream
lib/comm/comm.h:ds_comm_abort   declared for the tools, which decide to end a job
lib/comm/comm.c:ds_comm_abort   defined for them
lib/comm/comm_mpi.c:MPI_Abort   the mpi backend of ds_comm_abort
lib/driver/autotune_run.c:dprintf a forked trial child that failed to exec: to its own stderr file
lib/driver/autotune_run.c:_exit   ... and ends that child only
'

# blank comments and string/char literals, keeping line numbers
strip() {
	awk '
	{
		out = ""; n = length($0); i = 1
		while (i <= n) {
			c = substr($0, i, 1); d = substr($0, i, 2)
			if (incom) {
				if (d == "*/") { incom = 0; i += 2 } else i++
				continue
			}
			if (d == "/*") { incom = 1; i += 2; continue }
			if (d == "//") break
			if (c == "\"" || c == "\047") {
				q = c; out = out q; i++
				while (i <= n && substr($0, i, 1) != q) i += (substr($0, i, 1) == "\\") ? 2 : 1
				out = out q; i++
				continue
			}
			out = out c; i++
		}
		print out
	}' "$1"
}

# calls of the printing and exiting functions (not members such as
# ops->abort), the standard streams by name, dprintf to fd 1 or 2
calls='printf|vprintf|puts|putchar|perror|exit|_exit|_Exit|quick_exit|abort|MPI_Abort|ds_comm_abort'
pat="(^|[^.>[:alnum:]_])($calls)[[:space:]]*\\(|(^|[^.>[:alnum:]_])(stdout|stderr)([^[:alnum:]_]|\$)"
pat="$pat|dprintf[[:space:]]*\\([[:space:]]*(1|2|STDOUT_FILENO|STDERR_FILENO)[[:space:]]*,"
names="$calls|stdout|stderr|dprintf"
dirs='lib/util lib/config lib/comm kernels lib/app lib/model lib/optim lib/engine lib/io lib/monitor lib/tune lib/driver'
echo "1..$(echo "$dirs" | wc -w)"
i=0 fail=0
for d in $dirs; do
	i=$((i + 1))
	bad=$(find "$d" -name '*.c' -o -name '*.h' -o -name '*.cu' | sort | while read -r f; do
		strip "$f" | grep -nE "$pat" | while IFS= read -r line; do
			ok=0
			for w in $(printf '%s\n' "$line" | grep -oE "$pat" | grep -oE "$names"); do
				printf '%s\n' "$allow" | grep -q "^$f:$w " || { ok=1; break; }
			done
			[ $ok -eq 1 ] && printf '%s:%s\n' "$f" "$line"
		done
	done)
	if [ -z "$bad" ]; then
		echo "ok $i - $d does not print, exit or abort on its own"
	else
		echo "not ok $i - $d prints, exits or aborts (STYLE rule 4; tests/quiet.sh lists the exceptions)"
		printf '%s\n' "$bad" | sed 's/^/#   /'
		fail=1
	fi
done
exit $fail
