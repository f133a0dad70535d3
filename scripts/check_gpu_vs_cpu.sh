#!/usr/bin/env bash
# The tiny GPT's loss curve on the GPU against the CPU's: the same job (default
# corpus, seed, 300 steps, evals every 50) with --device cpu and --device cuda.
# The GPU computes in bf16, so the curves agree within a tolerance, not bitwise:
# every eval loss within 2% relative, the final train loss within 3%.
#   bash scripts/check_gpu_vs_cpu.sh [build dir=build]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-build}/mxdp
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
for dev in cpu cuda; do
  "$BIN" train --device $dev --steps 300 --eval-every 50 --sample-tokens 0 --progress lines --log-every 100 \
    --metrics "$D/$dev.jsonl" | grep -E "^(eval|done)"
done
python3 - "$D/cpu.jsonl" "$D/cuda.jsonl" <<'PY'
import json, sys
def load(p):
    rows = [json.loads(l) for l in open(p)]
    return ({r["step"]: r["loss"] for r in rows if r["kind"] == "eval"},
            [r["loss"] for r in rows if r["kind"] == "train"])
(ec, tc), (eg, tg) = load(sys.argv[1]), load(sys.argv[2])
assert ec.keys() == eg.keys() and len(tc) == len(tg) == 300, "the two runs did not log the same steps"
worst = max(abs(eg[s] - ec[s]) / ec[s] for s in ec)
final = abs(tg[-1] - tc[-1]) / tc[-1]
print(f"eval losses cpu vs cuda: " + ", ".join(f"{s}: {ec[s]:.4f}/{eg[s]:.4f}" for s in sorted(ec)))
print(f"worst eval relative difference {worst:.4f} (limit 0.02); final train loss {tc[-1]:.4f} vs {tg[-1]:.4f} ({final:.4f}, limit 0.03)")
sys.exit(0 if worst < 0.02 and final < 0.03 else 1)
PY
