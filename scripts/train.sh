#!/usr/bin/env bash
# README command one: set up, build, and run the default training job — the
# tiny GPT on the shipped corpus, 2 MPI ranks, MXFP8 parameter gather with
# overlap and grad-buffer reuse, evals as it goes — then plot the loss curve.
# Extra arguments go to `mxdp train` (e.g. --steps 100).
set -euo pipefail
export MXDP_TARGETS=${MXDP_TARGETS:-mxdp}  # the job needs only the executable
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=${MXDP_RUN_DIR:-runs/default}
mkdir -p "$OUT"
# The default job is a demonstration: run again, it trains from scratch and
# replaces its own earlier checkpoints (--start-over), unless the extra
# arguments say --load (e.g. `--load auto --steps 400` to train on).
fresh=(--start-over)
for a in "$@"; do case $a in --load|--load=*) fresh=() ;; esac; done
mpirun --oversubscribe --bind-to none -np "${MXDP_RANKS:-2}" "$MXDP_BIN" train \
  --eval-first --sample-prompt "And God said" --metrics "$OUT/metrics.jsonl" --save-dir "$OUT/ckpt" "${fresh[@]}" "$@"
"$MXDP_BIN" plot --metrics "$OUT/metrics.jsonl" --output "$OUT/loss.svg"
echo "metrics: $OUT/metrics.jsonl   loss curve: $OUT/loss.svg   checkpoints: $OUT/ckpt/"
