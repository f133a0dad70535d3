#!/usr/bin/env python3
"""Run a command while nvidia-smi samples the GPU, then say at what clock and
power the GPU ran while it was busy, and whether a power or thermal limit held
it back (docs/fp8.md, "The power cap": at gpt2-1558m every
system runs at the H200's 700 W cap, its clock well under the 1980 MHz that an
isolated kernel sees).

    python3 scripts/gpu_clocks.py [--interval-ms 200] [--gpu 0] [--label NAME] -- CMD [ARGS...]

The command's output passes through unchanged; at its end one JSON line
follows on stdout:

    {"what": "gpu_clocks", "label": ..., "busy_samples": N, "sm_clock_median_mhz": ...,
     "sm_clock_min_mhz": ..., "sm_clock_max_mhz": ... (the GPU's top clock), "power_mean_w": ...,
     "power_limit_w": ..., "power_capped_share": ..., "thermal_share": ...}

Busy samples are those whose utilization.gpu is at least --busy (default 90%):
start-up, compiles and host work between the timed parts do not dilute the
figures. power_capped_share is the share of busy samples whose throttle
reasons include the software power cap (0x4) or the hardware power brake
(0x80); thermal_share those with a thermal slowdown (0x20, 0x40) or the
hardware slowdown (0x8). The exit code is the command's. Without nvidia-smi
the command runs alone and the JSON line says why there are no figures.
"""
import argparse
import json
import shutil
import statistics
import subprocess
import sys
import threading

FIELDS = "clocks.sm,clocks.max.sm,power.draw,power.limit,utilization.gpu,clocks_throttle_reasons.active"
POWER_BITS = 0x4 | 0x80          # SW power cap, HW power brake slowdown
THERMAL_BITS = 0x8 | 0x20 | 0x40  # HW slowdown, SW thermal slowdown, HW thermal slowdown


def parse_line(line):
    """One line of `nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits`,
    as a dict, or None for a line that is not a sample (a warning, [N/A])."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 6:
        return None
    try:
        return {"sm": float(parts[0]), "sm_max": float(parts[1]), "power": float(parts[2]),
                "limit": float(parts[3]), "util": float(parts[4]), "reasons": int(parts[5], 16)}
    except ValueError:
        return None


def summarize(samples, busy=90.0, label=""):
    """The JSON summary of the samples whose utilization is at least `busy`."""
    out = {"what": "gpu_clocks", "label": label, "samples": len(samples)}
    hot = [s for s in samples if s["util"] >= busy]
    out["busy_samples"] = len(hot)
    if not hot:
        out["note"] = f"no sample with utilization >= {busy:g}%"
        return out
    clocks = [s["sm"] for s in hot]
    out.update({
        "sm_clock_median_mhz": statistics.median(clocks),
        "sm_clock_min_mhz": min(clocks),
        "sm_clock_max_mhz": max(s["sm_max"] for s in hot),
        "power_mean_w": round(statistics.fmean(s["power"] for s in hot), 1),
        "power_limit_w": max(s["limit"] for s in hot),
        "power_capped_share": round(sum(1 for s in hot if s["reasons"] & POWER_BITS) / len(hot), 3),
        "thermal_share": round(sum(1 for s in hot if s["reasons"] & THERMAL_BITS) / len(hot), 3),
    })
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval-ms", type=int, default=200)
    ap.add_argument("--gpu", default="0", help="nvidia-smi's -i: which GPU to sample")
    ap.add_argument("--busy", type=float, default=90.0, help="utilization.gpu (%%) at which a sample counts")
    ap.add_argument("--label", default="")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command to run")
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command given (put it after --)")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        rc = subprocess.call(cmd)
        print(json.dumps(dict(summarize([], a.busy, a.label), note="nvidia-smi not found: no clock figures")),
              flush=True)
        return rc
    sampler = subprocess.Popen([smi, "-i", a.gpu, f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits",
                                "-lms", str(a.interval_ms)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    samples = []

    def read():
        for line in sampler.stdout:
            s = parse_line(line)
            if s is not None:
                samples.append(s)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        rc = subprocess.call(cmd)
    finally:
        sampler.terminate()
        try:
            sampler.wait(timeout=5)
        except subprocess.TimeoutExpired:
            sampler.kill()
        reader.join(timeout=5)
    print(json.dumps(summarize(samples, a.busy, a.label)), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
