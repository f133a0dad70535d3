#!/usr/bin/env bash
# Everything that needs a GPU, in one go (the GPU machine has no network: the
# cuDNN frontend headers travel with the tree, see the README). Logs to $LOGDIR.
#   bash scripts/gpu_checks.sh [build dir=build]
#   ONLY='^(memcheck|train_)' bash scripts/gpu_checks.sh   # only the steps whose names match
#   PART=1 bash scripts/gpu_checks.sh; PART=2 bash scripts/gpu_checks.sh   # the two halves
#   DRYRUN=1 PART=2 bash scripts/gpu_checks.sh   # print the steps' names, run nothing
# Each step prints PASS or FAIL with its seconds, so a rerun of what a short
# call left out can name those steps in ONLY. The whole run (about 530 s on an
# H100) and a full build (about 140 s) do not fit one 10-minute call of the GPU
# machine: PART=1 is the test binaries (every gputest_*, mpigputest_* and
# memcheck step, about 300 s), PART=2 the rest (racechecks, the checks against
# the CPU, PyTorch and transformers, the training runs and their samples, about
# 235 s), so a step that reads another's output (a sample, its training run's
# checkpoint) is in the same half. ONLY and PART together: the steps both pick.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
B=${1:-build}
LOGDIR=${LOGDIR:-/tmp/mxdp-gpu-checks}
mkdir -p "$LOGDIR"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
ONLY=${ONLY:-} PART=${PART:-} DRYRUN=${DRYRUN:-}
case "$PART" in
  "" | 1 | 2) ;;
  *) echo "PART must be 1 or 2 (the two halves of the steps), got '$PART'" >&2; exit 2 ;;
esac
part_of() { [[ $1 =~ ^(gputest_|mpigputest_|memcheck) ]] && echo 1 || echo 2; }
fail=0 ran=0
step() {  # name, command...
  local name=$1 t0=$SECONDS rc=0; shift
  if [ -n "$ONLY" ] && ! [[ $name =~ $ONLY ]]; then return 0; fi
  if [ -n "$PART" ] && [ "$(part_of "$name")" != "$PART" ]; then return 0; fi
  ran=$((ran + 1))
  if [ -n "$DRYRUN" ]; then echo "$name"; return 0; fi
  timeout 420 "$@" >"$LOGDIR/$name.log" 2>&1 || rc=$?
  if [ $rc -eq 0 ]; then echo "PASS $name ($((SECONDS - t0)) s)"
  else echo "FAIL $name (rc $rc, $((SECONDS - t0)) s)"; tail -25 "$LOGDIR/$name.log"; fail=1; fi
}
step gputest_gpt "$B/tests/gputest_gpt"
step gputest_gpt_golden "$B/tests/gputest_gpt_golden"
step gputest_llama "$B/tests/gputest_llama"
step gputest_engine_ops "$B/tests/gputest_engine_ops"
step gputest_quant "$B/tests/gputest_quant"
step gputest_fp8_format "$B/tests/gputest_fp8_format"
step gputest_fp8_gemm "$B/tests/gputest_fp8_gemm"
# fc's forward through the own GEMM's fused GELU + quantize (MXDP_FP8_GEMM=fused): the GPU GPT's FP8 tests again.
step gputest_gpt_fp8_fused env MXDP_FP8_GEMM=fused "$B/tests/gputest_gpt" --gtest_filter='GpuGpt.Fp8Compute*'
step gputest_pipeline "$B/tests/gputest_pipeline"
step gputest_stream_graphs "$B/tests/gputest_stream_graphs"
step mpigputest_engine "$B/tests/mpigputest_engine"
step mpigputest_comm "$B/tests/mpigputest_comm"
# memcheck with the CUDA modules loaded eagerly, and gputest_gpt in two
# processes. compute-sanitizer 2025.3.1 dies of a SIGSEGV inside its own
# library (libsanitizer-public.so, called from cuGraphLaunch) when
# GpuGpt.LossLogits* and then GpuGpt.Fp8Compute* run in one process, and
# reports 0 errors. Eager loading hid it until act_quantize gained its
# LayerNorm op (sixth session); each half alone runs clean (docs/gpu.md,
# "GPU check runs"). In the seventh session it died the same way at the start
# of the third GpuGpt.Fp8Compute* test with the three in one process, and each
# alone ran clean; so those three run one process each (memcheck_each). The
# two filters together are every test of the binary. In the seventeenth session
# it died once more, in GpuGpt.Fp8ComputeBackwardReadsItsOwnForward alone
# (rc 11, 0 errors), and ran clean when run again at once: so a test whose
# sanitizer dies of a signal with 0 errors reported runs once more, and the
# verdict says so. A reported error (rc 1) or a second death fails the step.
memcheck_one() {  # binary, gtest filter: memcheck of those tests in one process; output on stdout, the sanitizer's rc
  env CUDA_MODULE_LOADING=EAGER compute-sanitizer --tool memcheck --error-exitcode 1 "$1" --gtest_filter="$2" 2>&1
}
memcheck_each() {  # binary, gtest filter: memcheck of each matching test in a process of its own
  # The log ends with one line per test, so the tail a failure prints names every test's outcome.
  local bin=$1 filter=$2 t r rc=0 verdicts="" out note
  for t in $("$bin" --gtest_list_tests --gtest_filter="$filter" | awk '/^[^ ]/ { s = $1 } /^  / { print s $1 }'); do
    echo "== $t"
    r=0 note=""
    out=$(memcheck_one "$bin" "$t") || r=$?
    printf '%s\n' "$out"
    if [ $r -gt 1 ] && grep -q "ERROR SUMMARY: 0 errors" <<<"$out"; then
      echo "== $t again: the sanitizer died (rc $r) with 0 errors reported"
      note=" (run twice: the sanitizer died with rc $r and 0 errors the first time)"
      r=0
      out=$(memcheck_one "$bin" "$t") || r=$?
      printf '%s\n' "$out"
    fi
    verdicts+="memcheck $t: $([ $r -eq 0 ] && echo PASS || echo "FAIL (rc $r)")$note"$'\n'
    [ $r -eq 0 ] || rc=1
  done
  printf '%s' "$verdicts"
  return $rc
}
export -f memcheck_one memcheck_each
step memcheck bash -c 'memcheck_one "$0" "$1"' "$B/tests/gputest_gpt" '-GpuGpt.Fp8Compute*'
step memcheck_fp8 bash -c 'memcheck_each "$0" "$1"' "$B/tests/gputest_gpt" 'GpuGpt.Fp8Compute*'
step memcheck_llama bash -c 'memcheck_one "$0" "$1"' "$B/tests/gputest_llama" 'GpuLlamaKernels.*:GpuLlama.LossLogits*'
# The Llama's FP8 compute (act_quantize's RMSNorm and SwiGLU ops, Fp8Linear), in a process of its own.
step memcheck_llama_fp8 bash -c 'memcheck_one "$0" "$1"' "$B/tests/gputest_llama" 'GpuLlama.Fp8ComputeMatches*'
# mxdp's own sm_90a FP8 GEMM (TMA loads, wgmma; docs/fp8.md "Our own FP8 GEMM"): its tests under memcheck.
step memcheck_fp8_gemm bash -c 'memcheck_one "$0" "$1"' "$B/tests/gputest_fp8_gemm" '*OwnSm90*'
# racecheck on mxdp's own kernels only: the full-model tests (GpuGpt.*) run
# cuDNN's attention kernels, whose wgmma/TMA code racecheck reports hazards in
# (seen on an H200: only in sdpa_sm90_flash_bprop_wgmma), so a whole-model
# racecheck can only fail. The kernel tests minus the two that test library
# kernels (cuDNN attention, cuBLASLt GEMMs), and the engine ops (quantize,
# dequantize, AdamW, sums: all mxdp's).
step racecheck_kernels compute-sanitizer --tool racecheck --error-exitcode 1 "$B/tests/gputest_gpt" \
  --gtest_filter='GpuGptKernels.*-GpuGptKernels.CudnnAttention*:GpuGptKernels.Gemms*'
step racecheck_llama_kernels compute-sanitizer --tool racecheck --error-exitcode 1 "$B/tests/gputest_llama" \
  --gtest_filter='GpuLlamaKernels.*-GpuLlamaKernels.GroupedQueryAttention*'
step racecheck_engine_ops compute-sanitizer --tool racecheck --error-exitcode 1 "$B/tests/gputest_engine_ops"
step gpu_vs_cpu bash scripts/check_gpu_vs_cpu.sh "$B"
step torch_trajectory python3 tests/gpu_torch_trajectory.py "$B"
step llama_torch_trajectory python3 tests/gpu_llama_trajectory.py "$B"
step gpu_cpu_checkpoint bash scripts/check_gpu_cpu_checkpoint.sh "$B"
step launchers bash scripts/check_launchers.sh "$B"
step hf_export python3 scripts/check_hf_export.py --mxdp "$B/mxdp" --device cuda
# Llama / Qwen2 against transformers both ways: export loaded by transformers, --init-from its save_pretrained.
step llama_hf python3 scripts/check_llama_hf.py --mxdp "$B/mxdp"
step train_124m "$B/mxdp" train --device cuda --model gpt2-124m --batch-size 16 --seq-len 1024 --steps 60 \
  --eval-every 30 --eval-batches 4 --sample-tokens 0 --progress lines --log-every 10 --save-dir "$LOGDIR/ckpt" --start-over
# FP8 compute (docs/fp8.md): the same job with the block linears' GEMMs in FP8, its closing sample included.
step train_124m_fp8 "$B/mxdp" train --device cuda --model gpt2-124m --batch-size 16 --seq-len 1024 --steps 60 \
  --eval-every 30 --eval-batches 4 --sample-tokens 20 --progress lines --log-every 10 --weight-format fp8b128 \
  --compute-dtype fp8 --save-dir "$LOGDIR/ckpt_fp8" --start-over
# The tokens/s the trainer reports (CUDA events) against this script's wall clock, steps 11-59 (issue 21),
# and the MFU it reports against the peak its GPU's name gives (an H100's or H200's: no --peak-tflops).
step throughput_124m python3 scripts/check_throughput.py --expect-mfu --mxdp "$B/mxdp" -- --device cuda --model gpt2-124m \
  --batch-size 16 --seq-len 1024 --steps 60
step sample_cuda "$B/mxdp" sample --device cuda --load "$LOGDIR/ckpt" --tokens 80
step train_llama_cuda "$B/mxdp" train --device cuda --model llama-tiny --steps 200 --eval-every 100 --eval-batches 4 \
  --sample-tokens 0 --progress lines --log-every 50 --save-dir "$LOGDIR/ckpt_llama"
step sample_llama_cuda "$B/mxdp" sample --device cuda --load "$LOGDIR/ckpt_llama" --tokens 80
# The Llama with FP8 compute: the same job, its closing sample included.
step train_llama_cuda_fp8 "$B/mxdp" train --device cuda --model llama-tiny --steps 200 --eval-every 100 \
  --eval-batches 4 --sample-tokens 20 --progress lines --log-every 50 --weight-format fp8b128 --compute-dtype fp8 \
  --save-dir "$LOGDIR/ckpt_llama_fp8" --start-over
if [ $ran -eq 0 ]; then echo "no step's name matches ONLY='$ONLY' in PART='$PART'" >&2; exit 2; fi
[ -n "$DRYRUN" ] && exit 0
echo "$ran steps in $SECONDS s"
exit $fail
