#!/bin/bash
# tests/shellcheck.sh - the ShellCheck pass of `make check`: one TAP line per
# shell file of the project (tests/**/*.bats, *.bash and *.sh,
# contrib/**/*.sh, contrib/slurm/*.sbatch, bench/*.sh, .ci/run), so a
# failure names the file, with each finding below it.  Any finding fails the
# file, whatever its severity (style notes included); a check the project
# does not want is disabled next to the line or at the top of the file, with
# its reason.  Among the checks: SC2314/SC2315, a bats `!` command that can
# never fail its test.  Bats files and helpers also go through
# tests/bats-lint.awk, for the && list that hides a false assertion, which
# ShellCheck does not check.
# SHELLCHECK: the program (configure's; empty: skipped, 1..0).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=${DS_SRCDIR:-$(cd "$here/.." && pwd)}
sc=${SHELLCHECK-shellcheck}
if [ -z "$sc" ] || ! command -v "$sc" >/dev/null 2>&1; then
	echo "1..0 # SKIP shellcheck not installed (apt-get install shellcheck)"
	exit 0
fi
cd "$src" || { echo "1..0 # SKIP no source tree at $src"; exit 0; }

files=()
while IFS= read -r f; do files+=("$f"); done < <(
	{
		find tests contrib bench -type f \( -name '*.bats' -o -name '*.bash' -o -name '*.sh' \
			-o -path 'contrib/slurm/*.sbatch' \)
		if [ -f .ci/run ]; then echo .ci/run; fi
	} | sort)

echo "1..${#files[@]}"
n=0
for f in "${files[@]}"; do
	n=$((n + 1))
	# -x -P SCRIPTDIR: a `source` of a sibling file is followed
	out=$("$sc" -f gcc -x -P SCRIPTDIR "$f" 2>&1)
	case $f in
	*.bats | *.bash) out=$(printf '%s\n' "$out" "$(awk -f "$here/bats-lint.awk" "$f" 2>&1)" | sed '/^$/d') ;;
	esac
	if [ -z "$out" ]; then
		echo "ok $n - $f"
	else
		echo "not ok $n - $f"
		printf '%s\n' "$out" | sed 's/^/# /'
	fi
done
