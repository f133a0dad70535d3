#!/usr/bin/env python3
"""scripts/gpu_clocks.py without a GPU: its parser on nvidia-smi's lines, its
summary on hand-made samples (only busy samples count; the power-cap and
thermal bits), and the whole script with a stand-in nvidia-smi on PATH (the
command's output and exit code pass through, one JSON line follows) and with
none at all. Run by ctest."""
import json
import os
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
from checks import SCRIPTS, check, finish  # noqa: E402  (also puts scripts/ on the path)
from gpu_clocks import parse_line, summarize  # noqa: E402

# The fields as `--format=csv,noheader,nounits` prints them (an H200 at its power cap).
check("parse", parse_line("1560, 1980, 690.97, 700.00, 100, 0x0000000000000004\n"),
      {"sm": 1560.0, "sm_max": 1980.0, "power": 690.97, "limit": 700.0, "util": 100.0, "reasons": 4})
check("parse [N/A]", parse_line("1980, 1980, [N/A], 700.00, 0, 0x0000000000000000"), None)
check("parse short line", parse_line("Failed to initialize NVML"), None)


def sample(sm, power, util, reasons, sm_max=1980.0, limit=700.0):
    return {"sm": sm, "sm_max": sm_max, "power": power, "limit": limit, "util": util, "reasons": reasons}


# Two idle samples (left out), four busy ones: two power-capped, one thermal, one free.
s = [sample(345, 82, 0, 0x1), sample(1980, 127, 50, 0),
     sample(1500, 690, 100, 0x4), sample(1700, 680, 98, 0x4 | 0x20), sample(1900, 600, 95, 0x40),
     sample(1980, 500, 90, 0)]
got = summarize(s, busy=90, label="x")
check("samples", (got["samples"], got["busy_samples"]), (6, 4))
check("median clock", got["sm_clock_median_mhz"], 1800.0)
check("min / max clock", (got["sm_clock_min_mhz"], got["sm_clock_max_mhz"]), (1500, 1980.0))
check("mean power", got["power_mean_w"], 617.5)
check("power limit", got["power_limit_w"], 700.0)
check("power-capped share", got["power_capped_share"], 0.5)
check("thermal share", got["thermal_share"], 0.5)
check("label", got["label"], "x")
none = summarize([sample(345, 82, 0, 1)], busy=90)
check("no busy sample", (none["busy_samples"], "note" in none, "sm_clock_median_mhz" in none), (0, True, False))

script = os.path.join(SCRIPTS, "gpu_clocks.py")
with tempfile.TemporaryDirectory() as d:
    # A stand-in nvidia-smi: a capped sample every 20 ms until it is stopped.
    fake = os.path.join(d, "nvidia-smi")
    with open(fake, "w") as f:
        f.write("#!/usr/bin/env python3\nimport sys, time\n"
                "while True:\n"
                "    print('1650, 1980, 695.5, 700.00, 100, 0x0000000000000004', flush=True)\n"
                "    time.sleep(0.02)\n")
    os.chmod(fake, os.stat(fake).st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=d + os.pathsep + os.environ.get("PATH", ""))
    cmd = [sys.executable, script, "--interval-ms", "20", "--label", "run", "--",
           sys.executable, "-c", "import time, sys; print('hello'); time.sleep(0.4); sys.exit(3)"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    check("exit code passes through", out.returncode, 3)
    lines = out.stdout.splitlines()
    check("command output first", lines[0] if lines else None, "hello")
    j = json.loads(lines[-1]) if lines else {}
    check("summary line", (j.get("what"), j.get("label")), ("gpu_clocks", "run"))
    check("sampled while it ran", j.get("busy_samples", 0) >= 3, True)
    check("clock and cap", (j.get("sm_clock_median_mhz"), j.get("power_capped_share")), (1650.0, 1.0))

    # No nvidia-smi anywhere on PATH: the command still runs, and the line says why there are no figures.
    bare = os.path.join(d, "bare")
    os.mkdir(bare)
    out = subprocess.run([sys.executable, script, "--", sys.executable, "-c", "print('alone')"],
                         capture_output=True, text=True, env=dict(os.environ, PATH=bare), timeout=60)
    check("without nvidia-smi: exit code", out.returncode, 0)
    lines = out.stdout.splitlines()
    check("without nvidia-smi: output", lines[0] if lines else None, "alone")
    j = json.loads(lines[-1]) if lines else {}
    check("without nvidia-smi: note", "nvidia-smi not found" in j.get("note", ""), True)

    # No command: an error that says so, not a traceback.
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=60)
    check("no command: exit code", out.returncode, 2)
    check("no command: message", "no command given" in out.stderr, True)

finish("gpu_clocks")
