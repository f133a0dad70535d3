#!/usr/bin/env python3
"""scripts/profile_step.py on a hand-written ncu CSV: the units row read, each
kernel of an FP8 step filed under its part (the names the step's kernels have
today, so a renamed kernel cannot fall into "other" unnoticed), and the
printed table's sums, through the script's own --csv path. Run by ctest."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
from checks import SCRIPTS, check, finish  # noqa: E402
from profile_step import parse, part_of  # noqa: E402

# ncu --csv --page raw: a header row, a units row, then a row per kernel.
CSV = '''==PROF== Connected to process 1
"ID","Kernel Name","gpu__time_duration.sum"
"","","usecond"
"0","void mxdp::cuda::(anonymous namespace)::norm_backward_kernel<true>(mxdp::cuda::NormBackward)","100.4"
"1","void mxdp::cuda::(anonymous namespace)::chunk_sums_kernel<1>(const float *, int)","2,000"
"2","void mxdp::cuda::(anonymous namespace)::transpose_tile(const unsigned char *, const float *, long)","7"
"3","void mxdp::cuda::detail::adamw_tile_quant<false>(mxdp::cuda::AdamWArgs)","40"
"4","nvjet_sm90_qqsss_128x128_64x4_1x2_h_bz_coopA_TNT","300"
"5","cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64","250"
"6","void mxdp::cuda::(anonymous namespace)::act_quantize_kernel<(mxdp::cuda::ActOp)2, false, true, true, true>(mxdp::cuda::ActQuant, int, int, int)","60"
"7","void mxdp::cuda::(anonymous namespace)::layernorm_forward_kernel(float)","5"
"8","mxdp::cuda::(anonymous namespace)::pad_gemm_scales(const float *, long, long, long, float *)","3"
'''

kernels = parse(CSV)
check("kernel rows", len(kernels), 9)
check("times in ms from usecond, thousands separator dropped", [round(t, 4) for _, t in kernels],
      [0.1004, 2.0, 0.007, 0.04, 0.3, 0.25, 0.06, 0.005, 0.003])
parts = [part_of(n) for n, _ in kernels]
check("norm backward", parts[0], "norm backward (LayerNorm / RMSNorm, with their parameter gradients)")
check("chunk sums", parts[1], "column sums (bias, LN params)")
check("W^T", parts[2], "engine: FP8 W^T (transpose, GEMM scales)")
check("AdamW with the stage", parts[3], "AdamW (+ stage)")
check("cuBLASLt", parts[4], "GEMMs (cuBLASLt)")
check("attention before GEMM", parts[5], "attention (cuDNN SDPA)")
check("act_quantize", parts[6], "FP8 operands (act_quantize: bias, GELU, 1x128 quantize)")
check("LayerNorm forward", parts[7], "LayerNorm")
check("the GEMM-layout scales are not a GEMM", parts[8], "engine: FP8 W^T (transpose, GEMM scales)")
check("nothing unfiled", "other" in parts, False)

with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "step.csv")
    with open(path, "w") as f:
        f.write(CSV)
    p = subprocess.run([sys.executable, os.path.join(SCRIPTS, "profile_step.py"), "--csv", path, "--model",
                        "gpt2-1558m", "--batch", "8", "--format", "fp8b128+fp8"], capture_output=True, text=True)
    check("exit code", p.returncode, 0)
    out = p.stdout
    check("headline: 9 kernels, their sum", "9 kernels, 2.765 ms of GPU time" in out, True)
    check("the GEMM row", "| GEMMs (cuBLASLt) | 1 | 0.300 | 10.8% |" in out, True)

finish("profile_step parser")
