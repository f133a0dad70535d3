#!/bin/sh
# Runs a command (an mpirun) with an Open MPI session directory base of its own,
# removed afterwards: concurrent mpiruns race creating the shared default one
# (see tests/mpi_session.h). ctest runs every mpitest_*/mpigputest_* through it.
#   sh tests/mpi_session.sh mpirun -np 2 ...
d=$(mktemp -d "${TMPDIR:-/tmp}/mxdp-ompi.XXXXXX") || exit 1
OMPI_MCA_orte_tmpdir_base=$d PRTE_MCA_prte_tmpdir_base=$d "$@"
rc=$?
rm -rf "$d"
exit $rc
