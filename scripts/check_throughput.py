#!/usr/bin/env python3
"""Is the rate `mxdp train` reports true? (issue 21)

Runs `mxdp train ARGS --progress lines --log-every 1 --metrics M`, stamps
each progress line ("step N/...") with this script's own clock as it arrives
(the trainer flushes every line), and compares, over the steady steps of the
run (from --skip on, up to the last step before any eval or save), the
tokens/s the trainer reported for each step (metrics: tokens_per_s, from its
own timing: CUDA events on a GPU) with the tokens those steps hold divided by
the wall time between their lines here. Passes when the sum of the reported
step times and the median reported rate are within --tolerance of the wall
clock's (--no-median: the sum alone, for a CPU shared with other work, whose
step times vary too much for a median to stand for the mean).

With --expect-mfu the run must also report MFU (a peak from --peak-tflops
among the arguments, or on a GPU the one its name gives): every train line's
"mfu" is its tokens_per_s times the config line's train_flops_per_token over
peak_tflops times the ranks, and the median over the steady steps is printed.

  python3 scripts/check_throughput.py --mxdp build/mxdp -- --device cuda \
      --model gpt2-124m --batch-size 16 --seq-len 1024 --steps 60
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mxdp", default="build/mxdp")
    ap.add_argument("--skip", type=int, default=10, help="first steps left out (warm-up)")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--no-median", action="store_true", help="judge the sum of the step times alone")
    ap.add_argument("--expect-mfu", action="store_true", help="the run must report a consistent MFU")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then mxdp train's arguments")
    a = ap.parse_args()
    args = [x for x in a.args if x != "--"]
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        cmd = [a.mxdp, "train", *args, "--progress", "lines", "--log-every", "1", "--sample-tokens", "0",
               "--metrics", metrics]
        print("running:", " ".join(cmd), flush=True)
        seen = {}
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        step_line = re.compile(r"^step +(\d+)/")
        for line in p.stdout:
            t = time.monotonic()
            m = step_line.match(line)
            if m:
                seen.setdefault(int(m.group(1)), t)
            elif line.startswith(("eval", "saved", "done")):
                print(line.rstrip())
        if p.wait() != 0:
            sys.exit(f"FAIL: mxdp train exited {p.returncode}")
        rows = [json.loads(s) for s in open(metrics)]
    train = {r["step"]: r for r in rows if r["kind"] == "train"}
    mfu_ok = not a.expect_mfu or check_mfu(rows)
    pauses = sorted(r["step"] for r in rows if r["kind"] == "eval")
    last = max(train)
    end = min([s for s in pauses if s > a.skip] + [last])  # the eval (or the end) after the steady stretch
    window = [s for s in range(a.skip + 1, end) if s in train and s in seen and s - 1 in seen]
    if len(window) < 5:
        sys.exit(f"FAIL: only {len(window)} steady steps to compare (steps {a.skip + 1}..{end - 1})")
    lo, hi = window[0] - 1, window[-1]
    wall = seen[hi] - seen[lo]
    tokens_per_step = train[hi]["tokens_per_s"] * train[hi]["step_s"]
    wall_rate = tokens_per_step * (hi - lo) / wall
    reported = statistics.median(train[s]["tokens_per_s"] for s in window)
    step_sum = sum(train[s]["step_s"] for s in window)
    print(f"steps {lo + 1}..{hi}: {tokens_per_step:.0f} tokens/step")
    print(f"  wall clock here : {wall:.3f} s, {wall_rate:,.0f} tokens/s")
    mean = tokens_per_step * len(window) / step_sum
    print(f"  mxdp reported   : {mean:,.0f} tokens/s over the step times, which sum to {step_sum:.3f} s; "
          f"median of the steps' rates {reported:,.0f}")
    ok = abs(step_sum / wall - 1) <= a.tolerance
    if not a.no_median:
        ok = ok and abs(reported / wall_rate - 1) <= a.tolerance
    print(f"PASS: within {a.tolerance:.0%}" if ok else f"FAIL: off by more than {a.tolerance:.0%}")
    if a.expect_mfu:
        print(f"  MFU, median of the steady steps: {statistics.median(train[s]['mfu'] for s in window):.1%}"
              if mfu_ok else "FAIL: no MFU, or one that is not the metrics' own rate and FLOPs over the peak")
    sys.exit(0 if ok and mfu_ok else 1)


def check_mfu(rows):
    """Whether the run reported a peak and every train line's mfu follows from its own numbers."""
    config = next(r for r in rows if r["kind"] == "config")
    peak, flops, ranks = config.get("peak_tflops", 0), config["train_flops_per_token"], config["ranks"]
    print(f"  peak {peak} TFLOP/s a rank, {flops:,.0f} FLOP a trained token, {ranks} rank(s)")
    if not peak > 0:
        return False
    for r in rows:
        if r["kind"] != "train":
            continue
        want = r["tokens_per_s"] * flops / (peak * 1e12 * ranks)
        if "mfu" not in r or abs(r["mfu"] - want) > 1e-9 * want:
            print(f"  step {r['step']}: mfu {r.get('mfu')}, want {want}")
            return False
    return True


if __name__ == "__main__":
    main()
