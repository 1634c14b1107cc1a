## tests/slurm: the contrib/slurm scripts and srun launches on a private
## one-node Slurm (cluster.bash) that each file starts and stops; skipped
## with the reason when not root or Slurm is not installed.
if HAVE_MPI
if HAVE_BATS
TESTS += tests/slurm/launch.bats tests/slurm/jobs.bats tests/slurm/cluster.bats
endif
endif
EXTRA_DIST += tests/slurm/launch.bats tests/slurm/jobs.bats tests/slurm/cluster.bats tests/slurm/helper.bash tests/slurm/cluster.bash \
	contrib/slurm
