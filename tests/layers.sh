#!/bin/sh
# layers.sh - the layer rule of DESIGN.md "Layers", checked on the sources:
# every #include "dir/..." in a module names that module or one it may use.
# One TAP line per module; a failure lists the offending lines.  Run by
# make check (DS_SRCDIR) or by hand from the top of the source tree.
src=${DS_SRCDIR:-.}
cd "$src" || exit 1

# module: the directories its sources may include from (itself implied)
rules='
lib/util:
lib/config: util
lib/comm: util cpu
kernels: util cpu common cuda
lib/app: util
lib/compute: util app comm cpu common cuda optim
lib/model: util config cpu common compute
lib/optim: util cpu common
lib/engine: util config comm cpu common compute model optim io
lib/io: util config comm
lib/monitor: util config comm
lib/tune: util config
lib/driver: util config comm cpu common app compute model optim engine io monitor tune
'

n=$(printf '%s\n' "$rules" | grep -c :)
echo "1..$n"
i=0 fail=0
printf '%s\n' "$rules" | grep : | {
	while IFS=: read -r mod allowed; do
		i=$((i + 1))
		self=${mod##*/}
		[ "$mod" = kernels ] && self=kernels
		ok=" $self $allowed "
		bad=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[a-z_]+/' "$mod" \
			--include='*.c' --include='*.h' --include='*.cu' 2>/dev/null |
			while IFS= read -r line; do
				dir=$(printf '%s\n' "$line" | sed -E 's/.*#[[:space:]]*include[[:space:]]+"([a-z_]+)\/.*/\1/')
				case "$ok" in *" $dir "*) ;; *) printf '%s\n' "$line" ;; esac
			done)
		if [ -z "$bad" ]; then
			echo "ok $i - $mod includes only from:$allowed"
		else
			echo "not ok $i - $mod includes from a layer above it (allowed:$allowed)"
			printf '%s\n' "$bad" | sed 's/^/#   /'
			fail=1
		fi
	done
	exit $fail
}
