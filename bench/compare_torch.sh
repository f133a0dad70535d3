#!/usr/bin/env bash
# mxdp against PyTorch (eager and torch.compile) on one GPU, same model and
# batch shape, in one invocation; prints one table with mxdp's ratio to each.
#   bash bench/compare_torch.sh [model=gpt2-124m] [batch=16] [seq=1024] [formats=bf16,mxfp8,nvfp4]
# Needs a CUDA build (build/bench/gpubench_gpt; MXDP_BUILD_DIR to use another) and python3 with torch.
# STEPS (default 30) timed steps per system; MODES (default "eager compile") the PyTorch modes to run;
# FLOAT8 (default none; "tensorwise", "rowwise" or both) adds torchao float8 training under
# torch.compile for each recipe named (needs torchao: on a machine without network, carry its wheel);
# FLOAT8_MODE (default compile; compile-blocks compiles each block on its own, torchtitan's regional
# compile, which a 48-layer model needs to compile in minutes) the mode of those rows.
# CLOCKS (default 1; 0 = off): where nvidia-smi exists, each system's process runs under
# scripts/gpu_clocks.py, and the table gains its median SM clock and the share of its busy
# samples held back by the power cap (docs/fp8.md: at 1558M every system runs at the cap), so
# one mxdp process per format.
# Issue 22's same-run table at one size:
#   FLOAT8=tensorwise MODES=compile bash bench/compare_torch.sh gpt2-774m 8 1024 bf16,fp8b128+fp8
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MODEL=${1:-gpt2-124m} B=${2:-16} T=${3:-1024} FORMATS=${4:-bf16,mxfp8,nvfp4}
BIN=${MXDP_BUILD_DIR:-build}/bench/gpubench_gpt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
LOG=$(mktemp)
trap 'rm -f "$LOG" "$LOG.err"' EXIT
STEPS=${STEPS:-30}
# A system's process, under scripts/gpu_clocks.py where nvidia-smi exists (CLOCKS=0: bare).
clocked=0
if [ "${CLOCKS:-1}" != 0 ] && command -v nvidia-smi >/dev/null; then clocked=1; fi
clocks() {
  if [ "$clocked" = 1 ]; then python3 scripts/gpu_clocks.py -- "$@"; else "$@"; fi
}
if [ "$clocked" = 1 ]; then
  for f in ${FORMATS//,/ }; do clocks "$BIN" "$MODEL" "$B" "$T" "$STEPS" "$f" | tee -a "$LOG"; done
else
  "$BIN" "$MODEL" "$B" "$T" "$STEPS" "$FORMATS" | tee -a "$LOG"
fi
# One PyTorch row: its system name and why it may fail (for the table when it
# does), then bench/torch_gpt.py's options for it.
torch_row() {
  local name=$1 why=$2
  shift 2
  if ! clocks python3 bench/torch_gpt.py --model "$MODEL" --batch "$B" --seq "$T" --steps "$STEPS" --warmup 5 "$@" \
      2>"$LOG.err" | grep '^{' | tail -2 | tee -a "$LOG"; then
    echo "{\"system\": \"$name\", \"error\": \"failed ($why)\"}" | tee -a "$LOG"
    tail -5 "$LOG.err" >&2  # why, in PyTorch's words
  fi
}
for mode in ${MODES:-eager compile}; do torch_row "pytorch-$mode" "out of memory?" --mode "$mode"; done
for recipe in ${FLOAT8:-}; do
  fmode=${FLOAT8_MODE:-compile}
  torch_row "pytorch-$fmode-float8-$recipe" "torchao missing, or out of memory?" --mode "$fmode" --float8 "$recipe"
done
python3 - "$LOG" <<'PY'
import json, sys
rows, pending = [], []
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    r = json.loads(l)
    if r.get("what") == "gpu_clocks":  # the clocks of the process whose rows came since the last such line
        for p in pending: p["clocks"] = r
        pending = []
    else:
        rows.append(r)
        if "error" not in r: pending.append(r)  # a failed row is the shell's, printed after its clocks
clk = any("clocks" in r for r in rows)
mx = [r for r in rows if r["system"].startswith("mxdp")]
tf = mx[0].get("matmul_tflops", 0) if mx else 0
ref = {r["system"]: r for r in rows if r["system"].startswith("pytorch") and "ms_per_step" in r}
print(f"\n{rows[0].get('model')} B={rows[0].get('batch')} T={rows[0].get('seq')}; bf16 matmul measured in this run: {tf:.0f} TFLOP/s")
hdr = f"{'system':<34} {'ms/step':>8} {'tokens/s':>10} {'peak GiB':>9} {'MFU':>6}"
if clk: hdr += f" {'MHz':>5} {'capped':>6}"
for k in ref: hdr += f"  {'vs ' + k.replace('pytorch-', 'torch '):>14}"
print(hdr)
L, H, C = {"gpt2-124m": (12, 12, 768), "gpt2-350m": (24, 16, 1024), "gpt2-774m": (36, 20, 1280), "gpt2-1558m": (48, 25, 1600)}[rows[0]["model"]]
for r in rows:
    if "ms_per_step" not in r: print(f"{r['system']:<34} {r.get('error', '')}"); continue
    mfu = r.get("mfu")
    if mfu is None and mx:  # the same FLOP count as gpubench_gpt
        mfu = r["tokens_per_s"] * mx[0]["mfu"] / mx[0]["tokens_per_s"]
    line = f"{r['system']:<34} {r['ms_per_step']:>8.2f} {r['tokens_per_s']/1e3:>9.1f}k {r['peak_gib']:>9.2f} {mfu*100:>5.1f}%"
    if clk:
        c = r.get("clocks", {})
        line += (f" {c['sm_clock_median_mhz']:>5.0f} {c['power_capped_share']*100:>5.0f}%" if "sm_clock_median_mhz" in c
                 else f" {'-':>5} {'-':>6}")
    for k, p in ref.items():
        line += f"  {r['tokens_per_s']/p['tokens_per_s']:>13.3f}x"
    if r["system"].startswith("mxdp"): line += "  bitwise repeatable" if r.get("bitwise_repeatable") else "  NOT REPEATABLE"
    print(line)
if clk:
    top = max(r["clocks"].get("sm_clock_max_mhz", 0) for r in rows if "clocks" in r)
    print(f"MHz: median SM clock over each process's busy samples (the GPU's top clock {top:.0f}); "
          f"capped: share of them held back by the power cap (scripts/gpu_clocks.py)")
# Each other mxdp variant against mxdp's bf16 gather (issue 22: FP8 compute's tokens/s and peak memory).
base = next((r for r in mx if r["system"] == "mxdp-bf16" and "ms_per_step" in r), None)
for r in mx:
    if base and r is not base and "ms_per_step" in r:
        print(f"{r['system']} vs mxdp-bf16: {r['tokens_per_s'] / base['tokens_per_s']:.3f}x tokens/s, "
              f"peak {r['peak_gib']:.2f} vs {base['peak_gib']:.2f} GiB")
PY
