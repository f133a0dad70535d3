#!/usr/bin/env python3
"""Where one training step's GPU time goes, kernel by kernel.

Runs one step of `gpubench_gpt ... profile` (a Llama-family model:
`gpubench_llama ... profile`; 5 warm-up steps first) under
Nsight Compute, which times every kernel of the step alone on the GPU
(gpu__time_duration, clocks not locked), and prints the time per part of the
step (GEMMs, attention, LayerNorm, ...) and the longest kernels.

    python3 scripts/profile_step.py [--build build] [--model gpt2-124m] [--batch 16] [--seq 1024]
                                    [--format bf16] [--csv saved.csv]
    python3 scripts/profile_step.py --model qwen2.5-0.5b --batch 8 --seq 2048

Kernels run one at a time under ncu, so the sum is GPU busy time without
overlap or launch gaps; compare it with the step's wall time from gpubench_gpt.
"""
import argparse
import collections
import csv
import io
import re
import subprocess
import sys

from step_bench import add_step_arguments, profile_command

# First match wins: attention before GEMM (cuDNN's kernels name their tiles too),
# and the engine's GEMM-layout scales (pad_gemm_scales) before GEMM too.
PARTS = [
    ("attention (cuDNN SDPA)", r"cudnn|sdpa|flash|fmha|attn"),
    ("engine: FP8 W^T (transpose, GEMM scales)", r"transpose_tile|transpose_bytes|transpose_scales|pad_gemm_scales"),
    ("GEMMs (cuBLASLt)", r"gemm|nvjet|cutlass|xmma|sm90_|sm100_|splitk|reduce_kernel"),
    ("LayerNorm", r"layernorm"),
    ("RMSNorm", r"rmsnorm"),
    ("norm backward (LayerNorm / RMSNorm, with their parameter gradients)", r"norm_backward"),
    ("RoPE", r"rope"),
    ("SwiGLU", r"swiglu"),
    ("column sums (bias, LN params)", r"colsum|chunk_sums"),
    ("FP8 operands (act_quantize: bias, GELU, 1x128 quantize)", r"act_quantize"),
    ("GELU recompute", r"gelu"),
    ("classifier + loss", r"classifier|mean_loss"),
    ("embedding", r"encoder|wte_|wpe_|embedding_"),
    ("AdamW (+ stage)", r"adamw"),
    ("engine: quantize/dequantize", r"quant|dequant|nvfp4|mxfp8|amax"),
    ("engine: grad norm, step control", r"sum_squares|sum_partials|step_control|sum_into"),
    ("engine: other", r"scale_kernel|to_bf16|from_bf16|bf16_to|f32_to|copy|fill|zero"),
    ("NCCL", r"nccl"),
]


def part_of(name):
    low = name.lower()
    for part, pat in PARTS:
        if re.search(pat, low):
            return part
    return "other"


def run_ncu(args):
    cmd = ["ncu", "--profile-from-start", "off", "--clock-control", "none", "--metrics",
           "gpu__time_duration.sum", "--csv", "--page", "raw"] + profile_command(args)
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
        sys.exit(f"ncu failed with exit code {p.returncode}")
    return p.stdout


def parse(text):
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if '"Kernel Name"' in l), None)
    if start is None:
        sys.exit("no kernel rows in ncu's output:\n" + text[-2000:])
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    head = rows[0]
    name_col, t_col = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    unit = "nsecond"
    out = []
    for r in rows[1:]:
        if len(r) <= t_col:
            continue
        v = r[t_col].replace(",", "")
        try:
            t = float(v)
        except ValueError:
            unit = v or unit  # the units row
            continue
        scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(unit, 1e-6)
        out.append((r[name_col], t * scale))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_step_arguments(ap)
    ap.add_argument("--csv", help="parse this saved ncu CSV instead of running ncu")
    ap.add_argument("--save-csv", help="also write ncu's CSV here (to parse again later with --csv)")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    text = open(args.csv).read() if args.csv else run_ncu(args)
    if args.save_csv and not args.csv:
        with open(args.save_csv, "w") as f:
            f.write(text)
    kernels = parse(text)
    if not kernels:
        sys.exit("ncu timed no kernel")
    total = sum(t for _, t in kernels)
    by_part = collections.defaultdict(lambda: [0, 0.0])
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for name, t in kernels:
        by_part[part_of(name)][0] += 1
        by_part[part_of(name)][1] += t
        short = re.sub(r"\(.*", "", name)[:90]
        by_name[short][0] += 1
        by_name[short][1] += t
    print(f"one step, {args.model} B {args.batch} T {args.seq} {args.format}: {len(kernels)} kernels, "
          f"{total:.3f} ms of GPU time (kernels alone, one at a time)")
    print(f"| part | launches | ms | share |\n| --- | --- | --- | --- |")
    for part, (n, t) in sorted(by_part.items(), key=lambda kv: -kv[1][1]):
        print(f"| {part} | {n} | {t:.3f} | {100 * t / total:.1f}% |")
    print(f"\nlongest kernels (total over the step):\n| kernel | launches | ms |\n| --- | --- | --- |")
    for name, (n, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"| `{name}` | {n} | {t:.3f} |")


if __name__ == "__main__":
    main()
