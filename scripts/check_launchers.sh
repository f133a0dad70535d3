#!/usr/bin/env bash
# Launching without mpirun (issue 24), with the tiny GPT (seconds per run):
#   a) a plain run to step 20, started with torchrun's variables by hand
#      (RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR MASTER_PORT): the header's
#      launcher line names torchrun;
#   b) `torchrun --nproc_per_node=1 --no-python mxdp train` to step 10, saved;
#      the header names torchrun (its worker: TORCHELASTIC_RUN_ID);
#   c) that checkpoint resumed with the bare variables to step 20: its train
#      losses of steps 11-20 equal (bitwise, as printed round-trip exact in the
#      metrics) those of the plain run a);
#   d) RANK=0 WORLD_SIZE=2 with no rank 1 and --comm-timeout 3: a real 2-rank
#      job, so it must stop within 30 s with an error naming the missing rank 1
#      (it used to train alone).
# Prints a PASS/FAIL line per check; exits 0 when all pass.
#   bash scripts/check_launchers.sh [build dir=build]
# MXDP_LAUNCH_DEVICE=cpu runs a), c) on the CPU (b, d need torchrun and a GPU: skipped).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-build}/mxdp
DEV=${MXDP_LAUNCH_DEVICE:-cuda}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
COMMON=(train --device "$DEV" --model tiny --data data/kjv.txt --batch-size 4 --seq-len 64 --eval-every 0
        --sample-tokens 0 --progress lines --log-every 5 --seed 1 --warmup-steps 4 --lr-decay-steps 20)
BARE=(env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID -u TORCHELASTIC_RUN_ID
      RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511)
fail=0
verdict() {  # name, ok(0/1), detail
  if (($2 == 0)); then echo "PASS $1: $3"; else echo "FAIL $1: $3"; fail=1; fi
}
losses() {  # metrics file, first step, last step -> "step loss" lines
  python3 - "$@" <<'EOF'
import json, sys
f, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for line in open(f):
    r = json.loads(line)
    if r.get("kind") == "train" and a <= r["step"] <= b:
        print(r["step"], repr(r["loss"]))
EOF
}

"${BARE[@]}" "$BIN" "${COMMON[@]}" --steps 20 --metrics "$D/plain.jsonl" >"$D/plain.log" 2>&1
rc=$?
grep -q "launcher .*= torchrun: rank 0 of 1" "$D/plain.log"; hdr=$?
verdict bare_env_train $((rc != 0 || hdr != 0)) "rc $rc, header: $(grep -m1 'launcher' "$D/plain.log")"

if [[ $DEV == cuda ]]; then
  torchrun --nproc_per_node=1 --no-python "$BIN" "${COMMON[@]}" --steps 10 --save-dir "$D/ckpt" \
    >"$D/torchrun.log" 2>&1
  rc=$?
  grep -q "launcher .*= torchrun: rank 0 of 1" "$D/torchrun.log"; hdr=$?
  verdict torchrun_train_save $((rc != 0 || hdr != 0)) "rc $rc, header: $(grep -m1 'launcher' "$D/torchrun.log")"
else
  "${BARE[@]}" "$BIN" "${COMMON[@]}" --steps 10 --save-dir "$D/ckpt" >"$D/torchrun.log" 2>&1
  echo "SKIP torchrun_train_save (on the CPU: saved with the bare variables instead)"
fi

"${BARE[@]}" "$BIN" "${COMMON[@]}" --steps 20 --load "$D/ckpt" --metrics "$D/resumed.jsonl" >"$D/resumed.log" 2>&1
rc=$?
grep -q "loaded .*: step 10" "$D/resumed.log"; loaded=$?
want=$(losses "$D/plain.jsonl" 11 20)
got=$(losses "$D/resumed.jsonl" 11 20)
same=1
[[ -n $want && $want == "$got" ]] && same=0
verdict resume_bitwise $((rc != 0 || loaded != 0 || same != 0)) \
  "rc $rc, $(echo "$got" | wc -l) steps compared, step 20 loss $(echo "$got" | tail -1 | cut -d' ' -f2) vs plain $(echo "$want" | tail -1 | cut -d' ' -f2)"

if [[ $DEV == cuda ]]; then
  start=$(date +%s)
  env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=29513 timeout 60 "$BIN" "${COMMON[@]}" --steps 5 --comm-timeout 3 \
    >"$D/missing.log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  grep -q "rank 1 of 2 has not connected within 3 s" "$D/missing.log"; named=$?
  verdict missing_rank_named $((rc == 0 || rc == 124 || named != 0 || took > 30)) \
    "rc $rc after ${took}s: $(grep -m1 -o 'rank 1 of 2 has not connected[^:]*' "$D/missing.log")"
fi
((fail)) && tail -n 20 "$D"/*.log
exit $fail
