#!/usr/bin/env python3
"""Where one training step's GPU timeline is idle.

Runs one step of a benchmark's profile mode (`gpubench_gpt ... profile`, or
`gpubench_llama ... profile` for a Llama-family model; 5 warm-up steps first)
with the CUPTI tracer build/bench/libmxdp_timeline.so injected
(CUDA_INJECTION64_PATH), which records every kernel, memcpy and memset between
cudaProfilerStart and cudaProfilerStop with its start and end on the GPU. It
prints the step's span (first start to last end), the time something ran, the
idle time in between, how the gaps are distributed, and the longest gaps with
what ran before and after each. Unlike scripts/profile_step.py (Nsight Compute,
kernels one at a time), the kernels run as in training, in their graphs.

    python3 scripts/step_timeline.py [--build build] [--model gpt2-124m] [--batch 16] [--seq 1024]
                                     [--format bf16] [--pipelined N] [--csv saved.csv]

--pipelined N traces N steps run back to back as the trainer runs them (each
step's result read one step late, so the host submits a step while the GPU runs
the one before); the gaps between and inside those steps are where the GPU
waited for the host.
"""
import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile

from step_bench import add_step_arguments, profile_command


def run(args, out):
    lib = os.path.abspath(f"{args.build}/bench/libmxdp_timeline.so")
    if not os.path.exists(lib):
        sys.exit(f"{lib} is not built (it needs CUDA with CUPTI: cmake --build {args.build} --target mxdp_timeline)")
    cmd = profile_command(args, args.pipelined)
    env = dict(os.environ, CUDA_INJECTION64_PATH=lib, MXDP_TIMELINE=out)
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    sys.stderr.write(p.stderr[-2000:])
    if p.returncode != 0:
        sys.exit(f"{cmd[0]} failed with exit code {p.returncode}")


def load(path):
    with open(path) as f:
        rows = [(int(r["start_ns"]), int(r["end_ns"]), r["name"]) for r in csv.DictReader(f)]
    if not rows:
        sys.exit(f"{path}: no events (was the step between cudaProfilerStart and cudaProfilerStop?)")
    return sorted(rows)


def idle_gaps(events):
    """(span ms, busy ms, gaps) of (start_ns, end_ns, name) events sorted by start: busy is the
    union of the intervals, gaps are (ns, name of what ended last before, name of what starts after)."""
    span = (max(e for _, e, _ in events) - events[0][0]) / 1e6
    busy, gaps = 0, []
    cur_s, cur_e, cur_name = events[0]
    for s, e, name in events[1:]:
        if s > cur_e:  # idle from the end of what ran last to this start
            busy += cur_e - cur_s
            gaps.append((s - cur_e, cur_name, name))
            cur_s, cur_e, cur_name = s, e, name
        elif e > cur_e:
            cur_e, cur_name = e, name
    return span, (busy + cur_e - cur_s) / 1e6, gaps


def short(name):
    return re.sub(r"\(.*", "", name)[:70]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_step_arguments(ap)
    ap.add_argument("--csv", help="analyse this saved timeline instead of running the benchmark")
    ap.add_argument("--pipelined", type=int, default=0, metavar="N",
                    help="trace N pipelined steps instead of one synced step")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    path = args.csv
    if not path:
        path = os.path.join(tempfile.mkdtemp(), "timeline.csv")
        run(args, path)
    ev = load(path)
    span, busy, gaps = idle_gaps(ev)
    idle = span - busy
    what = f"{args.pipelined} pipelined steps" if args.pipelined else "one step"
    print(f"{what}, {args.model} B {args.batch} T {args.seq} {args.format}: {len(ev)} events, span {span:.3f} ms, "
          f"busy {busy:.3f} ms, idle {idle:.3f} ms ({100 * idle / span:.1f}%)")
    bins = [(0, 2e3), (2e3, 5e3), (5e3, 20e3), (20e3, 100e3), (100e3, 1e12)]
    print("| gap | count | total ms |\n| --- | --- | --- |")
    for lo, hi in bins:
        sel = [g for g, _, _ in gaps if lo <= g < hi]
        label = f"{lo / 1e3:g}-{hi / 1e3:g} us" if hi < 1e12 else f">= {lo / 1e3:g} us"
        print(f"| {label} | {len(sel)} | {sum(sel) / 1e6:.3f} |")
    print(f"\nlongest gaps:\n| us | after | before |\n| --- | --- | --- |")
    for g, a, b in sorted(gaps, reverse=True)[: args.top]:
        print(f"| {g / 1e3:.1f} | `{short(a)}` | `{short(b)}` |")


if __name__ == "__main__":
    main()
