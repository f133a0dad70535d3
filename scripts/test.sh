#!/usr/bin/env bash
# README command two: set up, build, run the whole test suite (CPU; GPU tests
# skip without a GPU). Extra arguments go to ctest (e.g. -R format).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$BUILD_DIR"
# Tests run side by side and many start mpirun; each mpirun gets an Open MPI
# session directory of its own (tests/mpi_session.h and .sh): sharing the
# default one raced ("mkdir /tmp/ompi.<host>.<uid>: File exists").
ctest --output-on-failure --timeout 900 -j "${MXDP_TEST_JOBS:-2}" "$@"
