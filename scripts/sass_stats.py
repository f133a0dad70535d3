#!/usr/bin/env python3
"""The instruction mix of each kernel in a CUDA object or binary, from its SASS:
no GPU needed (docs/fp8.md, "Where the time goes", uses it on act_quantize).

    python3 scripts/sass_stats.py build/src/CMakeFiles/mxdp_objs.dir/models/cuda/fp8_linear.cu.o [--match act_quantize]

Per kernel: static instructions in all, and how many of them are control flow
(BSSY/BSYNC convergence barriers, branches, calls and returns), division and
transcendental work (FCHK, MUFU), warp shuffles, FP8/BF16 packs (F2FP), FFMA,
global and shared loads and stores. Static counts: each instruction once,
whether a thread runs it or branches around it.

It needs cuobjdump and the nvdisasm it calls, which CUDA's toolkit has but a
minimal CUDA install may lack; the wheels `nvidia-cuda-cuobjdump` and
`nvidia-cuda-nvdisasm` on PyPI hold them (bin/cuobjdump, bin/nvdisasm):
    python3 -m pip download --no-deps -d /tmp/w nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
    python3 -m zipfile -e /tmp/w/nvidia_cuda_cuobjdump-*.whl /tmp/w/x
    python3 -m zipfile -e /tmp/w/nvidia_cuda_nvdisasm-*.whl /tmp/w/x; chmod +x /tmp/w/x/nvidia/*/bin/*
then put that bin/ on PATH (or name cuobjdump in MXDP_CUOBJDUMP and put nvdisasm on PATH).
Static counts include code that seldom runs (bf16x8_rn's NaN fallback through
the codec is compiled into every bf16 rounding); ncu's inst_executed gives the
dynamic ones."""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

INSTR = re.compile(r"/\*[0-9a-f]{4,6}\*/\s+(?:@!?U?P[0-9T]+\s+)?([A-Z][A-Z0-9_]*)")
GROUPS = {
    "control": ("BSSY", "BSYNC", "BRA", "BRX", "CALL", "RET", "WARPSYNC", "BREAK"),
    "div+mufu": ("FCHK", "MUFU"),
    "shfl": ("SHFL",),
    "f2fp": ("F2FP",),
    "ffma": ("FFMA",),
    "ldg/stg": ("LDG", "STG"),
    "lds/sts": ("LDS", "STS"),
}


def kernels(sass):
    """[(mangled name, Counter of opcodes)] of cuobjdump -sass text, in order."""
    out = []
    for part in sass.split("Function : ")[1:]:
        name, body = part.split("\n", 1) if "\n" in part else (part, "")
        out.append((name.strip(), collections.Counter(INSTR.findall(body))))
    return out


def row(ops):
    counts = {"instr": sum(ops.values())}
    for group, names in GROUPS.items():
        counts[group] = sum(ops[n] for n in names)
    return counts


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return names
    res = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
    lines = res.stdout.splitlines()
    return lines if res.returncode == 0 and len(lines) == len(names) else names


def find_cuobjdump():
    for c in (os.environ.get("MXDP_CUOBJDUMP"), shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    sys.exit("sass_stats: cuobjdump not found (PATH, /usr/local/cuda/bin or MXDP_CUOBJDUMP); "
             "this script's help says how to get it from PyPI")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="CUDA object files or binaries")
    ap.add_argument("--match", default="", help="only kernels whose demangled name contains this")
    args = ap.parse_args()
    tool = find_cuobjdump()
    found = []
    for f in args.files:
        if not os.path.isfile(f):
            sys.exit(f"sass_stats: {f}: no such file")
        res = subprocess.run([tool, "-sass", f], capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"sass_stats: cuobjdump could not read {f}: {res.stderr.strip()}")
        found += kernels(res.stdout)
    names = demangle([n for n, _ in found])
    hdr = f"{'instr':>6} " + " ".join(f"{g:>8}" for g in GROUPS) + "  kernel"
    print(hdr)
    shown = 0
    for name, (_, ops) in zip(names, found):
        if args.match not in name:
            continue
        r = row(ops)
        print(f"{r['instr']:>6} " + " ".join(f"{r[g]:>8}" for g in GROUPS) + f"  {name}")
        shown += 1
    if not shown:
        sys.exit(f"sass_stats: no kernel{' matching ' + repr(args.match) if args.match else ''} in {' '.join(args.files)}")


if __name__ == "__main__":
    main()
