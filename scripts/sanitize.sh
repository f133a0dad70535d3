#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer:
# builds into build-asan/ (-DMXDP_SANITIZE=ON, no CUDA, no benchmarks) and
# runs ctest there. An out-of-bounds access, a use after free, a leak in mxdp's
# own code or any undefined behaviour ends the test process with a report and
# fails the test. Extra arguments go to ctest (e.g. -R lifecycle).
#
# Slow (an instrumented build, then the suite at a few times its normal cost),
# so it is not part of scripts/test.sh; run it before each submission.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export MXDP_BUILD_DIR=${MXDP_SANITIZE_BUILD_DIR:-build-asan}
export MXDP_CMAKE_ARGS="-DMXDP_SANITIZE=ON -DMXDP_CUDA=OFF -DMXDP_BENCH=OFF -DMXDP_MPI_TEST_TIMEOUT=1800 ${MXDP_CMAKE_ARGS:-}"
source "$ROOT/scripts/setup.sh"
# Leaks inside the MPI runtime (allocated once, never freed at exit) are not
# ours: scripts/sanitize.supp names those libraries; a leak in mxdp still fails.
# fast_unwind_on_malloc=0: the frame-pointer unwinder stops at the first
# uninstrumented library, so the MPI frames a suppression matches would be
# missing from the allocation stacks.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:fast_unwind_on_malloc=0:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$ROOT/scripts/sanitize.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$BUILD_DIR"  # (setup.sh: relative to the repository root, where it left us)
ctest --output-on-failure --timeout 3600 -j "${MXDP_TEST_JOBS:-2}" "$@"
