#!/usr/bin/env bash
# mxdp's GPU Llama against PyTorch on one GPU, in one go: for each model, mxdp
# (bench/gpubench_llama, bf16 weights), the torchtitan-style PyTorch Llama and
# transformers' LlamaForCausalLM / Qwen2ForCausalLM (bench/torch_llama.py, both
# under torch.compile), the same batch shape; one table of tokens/s, MFU, peak
# memory and mxdp's ratio to the faster PyTorch variant.
#   bash bench/compare_llama.sh
# MODELS: "name:batch:seq[:micro] ..." (default below; micro: micro-batches per
# optimizer step, default 1; a spec with micro > 1 runs mxdp alone, as the
# PyTorch scripts take no gradient accumulation: it is there for llm.q's
# published configuration, "qwen2.5-0.5b:32:1024:16"); STEPS (20) timed steps,
# WARMUP (3); IMPLS (default "titan hf"; empty for mxdp alone);
# COMPILE (block | model, default block); MXDP_BUILD_DIR (default build).
# Needs python3 with torch and transformers.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MODELS=${MODELS:-"smollm2-360m:8:2048 qwen2.5-0.5b:8:2048 llama3.2-1b:4:2048"}
STEPS=${STEPS:-20} WARMUP=${WARMUP:-3} COMPILE=${COMPILE:-block}
BIN=${MXDP_BUILD_DIR:-build}/bench/gpubench_llama
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
LOG=$(mktemp)
for spec in $MODELS; do
  IFS=: read -r model B T MICRO <<<"$spec"
  MICRO=${MICRO:-1}
  "$BIN" "$model" "$B" "$T" "$STEPS" bf16 "$WARMUP" "$MICRO" | tee -a "$LOG" \
    || echo "{\"system\": \"mxdp-bf16\", \"model\": \"$model\", \"batch\": $B, \"seq\": $T, \"micro\": $MICRO, \"error\": \"failed\"}" | tee -a "$LOG"
  [ "$MICRO" = 1 ] || continue
  for impl in ${IMPLS-titan hf}; do
    python3 bench/torch_llama.py --model "$model" --batch "$B" --seq "$T" --impl "$impl" --compile "$COMPILE" \
      --steps "$STEPS" --warmup "$WARMUP" 2>"$LOG.err" | tail -1 | grep '^{' | tee -a "$LOG" \
      || { echo "{\"system\": \"pytorch-$impl\", \"model\": \"$model\", \"batch\": $B, \"seq\": $T, \"error\": \"failed: $(tail -1 "$LOG.err" | tr -d '"\\')\"}" | tee -a "$LOG"; }
  done
done
python3 - "$LOG" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
shape = lambda r: (r["model"], r.get("batch"), r.get("seq"), r.get("micro", 1))
shapes = []
for r in rows:
    if shape(r) not in shapes: shapes.append(shape(r))
print()
print(f"{'model':<14} {'system':<28} {'B':>3} {'T':>5} {'micro':>5} {'ms/step':>8} {'tokens/s':>10} {'MFU':>6} {'peak GiB':>9}  vs faster torch")
for sh in shapes:
    m = sh[0]
    rs = [r for r in rows if shape(r) == sh]
    mx = next((r for r in rs if r["system"].startswith("mxdp") and "ms_per_step" in r), None)
    torch_ok = [r for r in rs if r["system"].startswith("pytorch") and "ms_per_step" in r]
    best = max(torch_ok, key=lambda r: r["tokens_per_s"]) if torch_ok else None
    for r in rs:
        if "ms_per_step" not in r:
            print(f"{m:<14} {r['system']:<28} {r.get('error', '')}")
            continue
        # MFU from mxdp's FLOP count and matmul rate of the same run.
        mfu = r["tokens_per_s"] * mx["flops_per_token"] / (mx["matmul_tflops"] * 1e12) if mx else float("nan")
        line = (f"{m:<14} {r['system']:<28} {r['batch']:>3} {r['seq']:>5} {r.get('micro', 1):>5} {r['ms_per_step']:>8.2f} "
                f"{r['tokens_per_s']/1e3:>9.1f}k {mfu*100:>5.1f}% {r['peak_gib']:>9.2f}")
        if best: line += f"  {r['tokens_per_s']/best['tokens_per_s']:.3f}x"
        if r is mx: line += "  bitwise repeatable" if r.get("bitwise_repeatable") else "  NOT REPEATABLE"
        print(line)
    if mx and best:
        ok = mx["tokens_per_s"] >= 1.10 * best["tokens_per_s"] and mx["peak_gib"] <= best["peak_gib"]
        print(f"{m:<14} target (>= 1.10x {best['system']} at no more memory): {'MET' if ok else 'NOT MET'}")
    if m == "qwen2.5-0.5b" and mx:
        # llm.q, benchmarks/H100x1.md: --batch-size=32 --grad-accumulation=16 --seq-length=1024, bf16, 149-150k.
        same = sh[1:] == (32, 1024, 16)
        print(f"{m:<14} llm.q's published one-H100 bf16 149k tokens/s (B 32, T 1024, 16 micro-batches): "
              f"{'above' if mx['tokens_per_s'] > 149e3 else 'NOT above'} ({mx['tokens_per_s']/1e3:.1f}k"
              f"{'' if same else ', at another shape than llm.q'})")
PY
