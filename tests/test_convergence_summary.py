#!/usr/bin/env python3
"""scripts/convergence_summary.py (the statistics of scripts/fp8_convergence.sh)
on hand-made metrics and pairs, every expected value worked out by hand: the
metrics reader, the loss-spike measure, the sign test, the mean ratio with its
standard error and the 1% verdict, and the two command lines end to end. Run
by ctest."""
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
from checks import SCRIPTS, check, finish  # noqa: E402  (also puts scripts/ on the path)
from convergence_summary import largest_spike, read_metrics, sign_test, summarize_seeds  # noqa: E402


def close(what, got, want, tol=1e-9):
    if abs(got - want) > tol:
        print(f"  {what}: got {got!r}, want {want!r} (to {tol})")
    check(what, abs(got - want) <= tol, True)


# The sign test, two-sided: n seeds, `above` of them on one side.
close("sign 3 of 3", sign_test(3, 3), 2 * 1 / 8)                  # 0.25
close("sign 0 of 3", sign_test(0, 3), 0.25)                       # symmetric
close("sign 9 of 10", sign_test(9, 10), 2 * (1 + 10) / 1024)      # 0.021484375
close("sign 5 of 5", sign_test(5, 5), 2 / 32)
close("sign 5 of 10 (even split)", sign_test(5, 10), 1.0)         # capped at 1
close("sign 2 of 4", sign_test(2, 4), 1.0)
close("sign no seeds", sign_test(0, 0), 1.0)

# Mean ratio 1.02 with a sample standard deviation of 0.01 over three seeds: the standard
# error is 0.01 / sqrt(3) = 0.0057735, so 1.02 - 2 SE = 1.00845 < 1.01 < 1.02 + 2 SE: undecided.
s = summarize_seeds([(1.0, 1.01), (1.0, 1.03), (2.0, 2.04)])
close("mean", s["mean"], 1.02)
close("se", s["se"], 0.01 / math.sqrt(3))
close("median", s["median"], 1.02)
check("verdict undecided", s["verdict"], "undecided")
check("above", (s["above"], s["seeds"]), (3, 3))
close("sign p", s["sign_p"], 0.25)
check("bf16 range", (s["bf16_min"], s["bf16_max"]), (1.0, 2.0))
# Its interval is the mean +- 2 SE.
close("low", s["low"], 1.02 - 0.02 / math.sqrt(3))
close("high", s["high"], 1.02 + 0.02 / math.sqrt(3))
# Ratios 0.991, 1.0, 1.03: mean 1.007, sample variance (0.016^2 + 0.007^2 + 0.023^2) / 2 =
# 4.17e-4, 0.003 below the target. n seeds decide it once 2 sd / sqrt(n) < 0.003, i.e.
# n > 4 * 4.17e-4 / 0.003^2 = 185.33: 186 seeds. A mean on the target: no number of seeds.
check("seeds to decide", summarize_seeds([(1.0, 0.991), (1.0, 1.0), (1.0, 1.03)])["to_decide"], 186)
check("mean on the target", summarize_seeds([(1.0, 1.0), (1.0, 1.02)])["to_decide"], None)
# Ratios 1.001, 1.003, 1.002: mean 1.002, SE 0.000577: 1.002 + 2 SE < 1.01, yes.
check("verdict yes", summarize_seeds([(1.0, 1.001), (1.0, 1.003), (1.0, 1.002)])["verdict"], "yes")
# Ratios 1.05, 1.06, 1.07: mean 1.06 - 2 SE (0.0115) > 1.01, no.
check("verdict no", summarize_seeds([(1.0, 1.05), (1.0, 1.06), (1.0, 1.07)])["verdict"], "no")
# Ratios 1.001, 1.006, 1.011: mean 1.006, SE 0.005 / sqrt(3) = 0.0028868. One SE above the mean
# (1.0089) is under 1.01, two (1.0118) are not: undecided.
check("verdict at two SE, not one", summarize_seeds([(1.0, 1.001), (1.0, 1.006), (1.0, 1.011)])["verdict"],
      "undecided")
# A tie (FP8 equal to bf16) counts on neither side and leaves the sign test's n: 2 above of 3
# seeds, one a tie, is 2 of 2 -> p = 0.5.
t = summarize_seeds([(1.0, 1.0), (1.0, 1.01), (1.0, 1.02)])
check("tie: above", t["above"], 2)
close("tie: sign p", t["sign_p"], 0.5)
# One seed: no standard error, so never "yes" or "no".
check("one seed", summarize_seeds([(1.0, 1.001)])["verdict"], "undecided")
check("one seed: no count", summarize_seeds([(1.0, 1.001)])["to_decide"], None)

# The spike: 230 steps at 2.0, then 30 at 2.2. The 20-step mean reaches 2.2 at step 250 (after
# step 200), 10% above the best mean, 2.0.
close("spike 10%", largest_spike([2.0] * 230 + [2.2] * 30), 0.1, 1e-12)
check("falling loss: no spike", largest_spike([3.0 - 0.001 * i for i in range(400)]), 0.0)
# The same rise before step 200 is not counted (the first steps' noise).
check("rise before step 200", largest_spike([2.0] * 100 + [2.2] * 20 + [2.0] * 80), 0.0)

with tempfile.TemporaryDirectory() as d:
    def metrics(name, train, evals):
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(json.dumps({"kind": "config", "step": 0}) + "\n")
            f.write("not json: a line cut short\n")
            for step, loss in train:
                f.write(json.dumps({"kind": "train", "step": step, "loss": loss}) + "\n")
            for step, loss in evals:
                f.write(json.dumps({"kind": "eval", "step": step, "loss": loss}) + "\n")
            f.write(json.dumps({"kind": "train", "step": 3, "loss": None}) + "\n")  # a skipped step
        return path

    # Steps written out of order come back in step order; the last eval is the highest step's.
    bf = metrics("bf16.jsonl", [(2, 4.0), (1, 5.0)], [(2, 3.5), (1, 4.5)])
    fp = metrics("fp8.jsonl", [(1, 5.0), (2, 4.1)], [(1, 4.6), (2, 3.535)])
    check("read train", read_metrics(bf)[0], [5.0, 4.0])
    check("read last eval", read_metrics(bf)[1], 3.5)
    # A run resumed from an earlier checkpoint logs its steps again: the later lines are the run's.
    again = metrics("resumed.jsonl", [(1, 5.0), (2, 4.0), (2, 3.9)], [(2, 3.6), (2, 3.4)])
    check("resumed: the later lines", read_metrics(again), ([5.0, 3.9], 3.4))
    check("no eval: NaN", math.isnan(read_metrics(metrics("none.jsonl", [(1, 5.0)], []))[1]), True)

    tool = os.path.join(SCRIPTS, "convergence_summary.py")
    pairs = os.path.join(d, "pairs.tsv")

    def run(*args):
        return subprocess.run([sys.executable, tool, *args], capture_output=True, text=True)

    r = run("pair", bf, fp, "m c seed 1", pairs)
    check("pair rc", r.returncode, 0)
    check("pair line", r.stdout.strip(), "m c seed 1: final eval bf16 3.5000, fp8 3.5350, fp8/bf16 1.0100 (+1.00%); "
          "largest spike bf16 0.0%, fp8 0.0%")
    run("pair", fp, bf, "m c seed 2", pairs)  # the other way round: ratio 3.5 / 3.535
    run("pair", bf, fp, "other c seed 1", pairs)  # another model: not in "m c"'s summary
    with open(pairs) as f:
        check("pairs.tsv at full precision", f.readline(), "m c seed 1\t3.5\t3.535\n")
    r = run("seeds", pairs, "m c")
    check("seeds rc", r.returncode, 0)
    mean = (1.01 + 3.5 / 3.535) / 2
    check("seeds line: two seeds, one above", (f"2 seeds: fp8/bf16 mean {mean:.4f}" in r.stdout,
                                               "fp8 above bf16 in 1 of 2 seeds (sign test p = 1)" in r.stdout),
          (True, True))
    r = run("seeds", pairs, "absent")
    check("no such pairs: refused", (r.returncode != 0, "no pair in" in r.stderr), (True, True))
    check("bad usage: refused", run("pairs").returncode != 0, True)

finish("test_convergence_summary")
