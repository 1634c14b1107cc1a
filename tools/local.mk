## tools: one thin main() per executable; the work is in libds (each
## tool's program is declared next to its driver, lib/driver/*.mk).
if HAVE_BATS
TESTS += tests/cli/man.bats
endif
EXTRA_DIST += tests/cli/man.bats
