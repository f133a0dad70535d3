#!/usr/bin/env python3
"""The summaries scripts/fp8_convergence.sh prints (docs/fp8.md, "Convergence").

  convergence_summary.py pair BF16_METRICS FP8_METRICS WHAT PAIRS_TSV
      one line for a pair of runs: both final eval losses, FP8/bf16, and each
      run's largest loss spike; appends "WHAT<tab>bf16<tab>fp8" to PAIRS_TSV.
  convergence_summary.py seeds PAIRS_TSV PREFIX
      one line over the pairs of PAIRS_TSV whose WHAT is "PREFIX seed N": the
      mean FP8/bf16 ratio, its standard error, the verdict on the 1% target at
      two standard errors (with the interval, and when undecided how many seeds
      would decide it at this spread), the sign test, and bf16's own spread.
"""
import json
import math
import statistics
import sys


def read_metrics(path):
    """A metrics file's train losses in step order and its last eval loss (NaN if none)."""
    train, ev = {}, {}
    with open(path) as f:
        for line in f:
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if not isinstance(j, dict) or j.get("loss") is None:
                continue
            kind = j.get("kind")
            if kind in ("train", "eval"):
                (train if kind == "train" else ev)[j["step"]] = j["loss"]
    return [train[k] for k in sorted(train)], ev[max(ev)] if ev else float("nan")


def largest_spike(losses, window=20, after=200):
    """The largest rise of the window-step mean train loss above its running minimum, after
    step `after`, as a fraction (0.1: 10% above the best mean so far)."""
    best, worst = float("inf"), 0.0
    for i in range(window, len(losses) + 1):
        m = sum(losses[i - window:i]) / window
        if i > after:
            worst = max(worst, m / best - 1)
        best = min(best, m)
    return worst


def sign_test(above, n):
    """Two-sided sign test: the chance of a split of n seeds at least as uneven as `above`
    of them on one side, if either side were equally likely."""
    if n == 0:
        return 1.0
    k = min(above, n - above)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def seeds_to_decide(mean, sd, target):
    """The fewest seeds whose two standard errors, at sample standard deviation sd, fall short
    of the distance from mean to target: how many would decide the verdict if the mean and the
    spread held. None when no number would (the mean on the target, or no spread measured)."""
    gap = abs(mean - target)
    if gap == 0 or not math.isfinite(sd):
        return None
    return math.floor((2 * sd / gap) ** 2) + 1


def summarize_seeds(pairs, target=1.01):
    """pairs: (bf16 final, FP8 final) per seed. The verdict is "yes" when the mean ratio
    plus two standard errors is at most `target`, "no" when minus two is above it. A run's
    final loss moves by a fraction of a percent from any change to its arithmetic, and one
    late spike by points, so the sign test (which a spike moves by one seed) goes beside it."""
    r = [f / b for b, f in pairs]
    mean = sum(r) / len(r)
    sd = statistics.stdev(r) if len(r) > 1 else float("inf")
    se = sd / math.sqrt(len(r))
    verdict = "yes" if mean + 2 * se <= target else "no" if mean - 2 * se > target else "undecided"
    above = sum(x > 1 for x in r)
    b = [b for b, _ in pairs]
    return {"seeds": len(r), "mean": mean, "se": se, "median": statistics.median(r), "min": min(r), "max": max(r),
            "verdict": verdict, "low": mean - 2 * se, "high": mean + 2 * se,
            "to_decide": seeds_to_decide(mean, sd, target), "above": above, "sign_p": sign_test(above, sum(x != 1 for x in r)),
            "bf16_min": min(b), "bf16_max": max(b)}


def pair_line(what, bf16_path, fp8_path):
    (tb, eb), (tf, ef) = read_metrics(bf16_path), read_metrics(fp8_path)
    line = (f"{what}: final eval bf16 {eb:.4f}, fp8 {ef:.4f}, fp8/bf16 {ef / eb:.4f} ({(ef / eb - 1) * 100:+.2f}%); "
            f"largest spike bf16 {largest_spike(tb) * 100:.1f}%, fp8 {largest_spike(tf) * 100:.1f}%")
    return line, eb, ef


def seeds_line(prefix, s):
    verdict = s["verdict"]
    if math.isfinite(s["se"]):
        verdict += f" ({(s['low'] - 1) * 100:+.2f}% to {(s['high'] - 1) * 100:+.2f}%"
        if s["verdict"] == "undecided":
            n = s["to_decide"]
            verdict += (f"; about {n} seeds would decide it at this spread" if n else "; no number of seeds decides it")
        verdict += ")"
    return (f"{prefix}, {s['seeds']} seeds: fp8/bf16 mean {s['mean']:.4f} +- {s['se']:.4f} (standard error; median "
            f"{s['median']:.4f}, min {s['min']:.4f}, max {s['max']:.4f}); within 1% at two standard errors: {verdict}; "
            f"fp8 above bf16 in {s['above']} of {s['seeds']} seeds (sign test p = {s['sign_p']:.2g}); "
            f"bf16 eval from seed to seed {s['bf16_min']:.4f}-{s['bf16_max']:.4f} "
            f"({(s['bf16_max'] / s['bf16_min'] - 1) * 100:.2f}% apart)")


def main(argv):
    if len(argv) == 6 and argv[1] == "pair":
        line, eb, ef = pair_line(argv[4], argv[2], argv[3])
        with open(argv[5], "a") as f:  # the finals at full precision, for `seeds`
            f.write(f"{argv[4]}\t{eb!r}\t{ef!r}\n")
        print(line)
        return 0
    if len(argv) == 4 and argv[1] == "seeds":
        with open(argv[2]) as f:
            rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
        pairs = [(float(b), float(f)) for what, b, f in rows if what.startswith(argv[3] + " seed ")]
        if not pairs:
            sys.exit(f"convergence_summary.py: no pair in {argv[2]} is named '{argv[3]} seed N'")
        print(seeds_line(argv[3], summarize_seeds(pairs)))
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
