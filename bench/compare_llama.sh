#!/usr/bin/env bash
# mxdp's GPU Llama against PyTorch on one GPU, in one go: for each model, mxdp
# (bench/gpubench_llama, bf16 weights), the torchtitan-style PyTorch Llama and
# transformers' LlamaForCausalLM / Qwen2ForCausalLM (bench/torch_llama.py, both
# under torch.compile), the same batch shape; one table of tokens/s, MFU, peak
# memory and mxdp's ratio to the faster PyTorch variant.
#   bash bench/compare_llama.sh
# MODELS: "name:batch:seq ..." (default below); STEPS (20) timed steps, WARMUP (3);
# IMPLS (default "titan hf"); COMPILE (block | model, default block);
# MXDP_BUILD_DIR (default build). Needs python3 with torch and transformers.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MODELS=${MODELS:-"smollm2-360m:8:2048 qwen2.5-0.5b:8:2048 llama3.2-1b:4:2048"}
STEPS=${STEPS:-20} WARMUP=${WARMUP:-3} COMPILE=${COMPILE:-block}
BIN=${MXDP_BUILD_DIR:-build}/bench/gpubench_llama
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
LOG=$(mktemp)
for spec in $MODELS; do
  IFS=: read -r model B T <<<"$spec"
  "$BIN" "$model" "$B" "$T" "$STEPS" bf16 "$WARMUP" | tee -a "$LOG" \
    || echo "{\"system\": \"mxdp-bf16\", \"model\": \"$model\", \"error\": \"failed\"}" | tee -a "$LOG"
  for impl in ${IMPLS:-titan hf}; do
    python3 bench/torch_llama.py --model "$model" --batch "$B" --seq "$T" --impl "$impl" --compile "$COMPILE" \
      --steps "$STEPS" --warmup "$WARMUP" 2>"$LOG.err" | tail -1 | grep '^{' | tee -a "$LOG" \
      || { echo "{\"system\": \"pytorch-$impl\", \"model\": \"$model\", \"error\": \"failed: $(tail -1 "$LOG.err" | tr -d '"\\')\"}" | tee -a "$LOG"; }
  done
done
python3 - "$LOG" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
models = []
for r in rows:
    if r["model"] not in models: models.append(r["model"])
print()
print(f"{'model':<14} {'system':<28} {'B':>3} {'T':>5} {'ms/step':>8} {'tokens/s':>10} {'MFU':>6} {'peak GiB':>9}  vs faster torch")
for m in models:
    rs = [r for r in rows if r["model"] == m]
    mx = next((r for r in rs if r["system"].startswith("mxdp") and "ms_per_step" in r), None)
    torch_ok = [r for r in rs if r["system"].startswith("pytorch") and "ms_per_step" in r]
    best = max(torch_ok, key=lambda r: r["tokens_per_s"]) if torch_ok else None
    for r in rs:
        if "ms_per_step" not in r:
            print(f"{m:<14} {r['system']:<28} {r.get('error', '')}")
            continue
        # MFU from mxdp's FLOP count and matmul rate of the same run.
        mfu = r["tokens_per_s"] * mx["flops_per_token"] / (mx["matmul_tflops"] * 1e12) if mx else float("nan")
        line = f"{m:<14} {r['system']:<28} {r['batch']:>3} {r['seq']:>5} {r['ms_per_step']:>8.2f} {r['tokens_per_s']/1e3:>9.1f}k {mfu*100:>5.1f}% {r['peak_gib']:>9.2f}"
        if best: line += f"  {r['tokens_per_s']/best['tokens_per_s']:.3f}x"
        if r is mx: line += "  bitwise repeatable" if r.get("bitwise_repeatable") else "  NOT REPEATABLE"
        print(line)
    if mx and best:
        ok = mx["tokens_per_s"] >= 1.10 * best["tokens_per_s"] and mx["peak_gib"] <= best["peak_gib"]
        print(f"{m:<14} target (>= 1.10x {best['system']} at no more memory): {'MET' if ok else 'NOT MET'}")
    if m == "qwen2.5-0.5b" and mx:
        print(f"{m:<14} llm.q's published one-H100 bf16 149k tokens/s: {'above' if mx['tokens_per_s'] > 149e3 else 'NOT above'} ({mx['tokens_per_s']/1e3:.1f}k)")
PY
