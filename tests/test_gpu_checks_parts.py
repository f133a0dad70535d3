#!/usr/bin/env python3
"""scripts/gpu_checks.sh's PART=1 / PART=2 halves, through its DRYRUN=1 mode
(no GPU, nothing run): the halves are disjoint, both hold steps and together
hold every step; a step that loads a checkpoint (--load "$LOGDIR/X") is in the
half of the step that saves it (--save-dir "$LOGDIR/X"), and after it; ONLY
narrows a half; a bad PART is refused. Run by ctest."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
from checks import SCRIPTS, check, finish  # noqa: E402

SCRIPT = os.path.join(SCRIPTS, "gpu_checks.sh")


def dry(**env):
    e = dict(os.environ, DRYRUN="1", LOGDIR=os.path.join(os.environ.get("TMPDIR", "/tmp"), "mxdp-gpu-checks-dry"))
    e.pop("ONLY", None)
    e.pop("PART", None)
    e.update(env)
    p = subprocess.run(["bash", SCRIPT], env=e, capture_output=True, text=True)
    return p.returncode, p.stdout.split(), p.stderr


rc, every, _ = dry()
check("all steps: exit code", rc, 0)
rc1, one, _ = dry(PART="1")
rc2, two, _ = dry(PART="2")
check("PART=1 exit code", rc1, 0)
check("PART=2 exit code", rc2, 0)
check("both halves hold steps", bool(one) and bool(two), True)
check("the halves are disjoint", set(one) & set(two), set())
check("the halves together are every step, each once", sorted(one + two), sorted(every))
check("no step twice", len(set(every)), len(every))
check("each half keeps the steps' order", [one, two], [[s for s in every if s in one], [s for s in every if s in two]])

# Which step saves and which loads each checkpoint directory, from the script's text.
text = open(SCRIPT).read().replace("\\\n", " ")
saves, loads = {}, []
for line in text.splitlines():
    m = re.match(r"\s*step (\S+) (.*)", line)
    if not m:
        continue
    name, rest = m.groups()
    for d in re.findall(r'--save-dir "\$LOGDIR/([^"]+)"', rest):
        saves[d] = name
    for d in re.findall(r'--load "\$LOGDIR/([^"]+)"', rest):
        loads.append((name, d))
check("the script has steps that load a saved checkpoint", len(loads) >= 2, True)
for name, d in loads:
    saver = saves.get(d)
    check(f"{name}: its checkpoint {d} is saved by a step", saver is not None, True)
    if saver:
        check(f"{name} is in {saver}'s half", name in one, saver in one)
        check(f"{name} runs after {saver}", every.index(saver) < every.index(name), True)

rc, narrowed, _ = dry(PART="2", ONLY="^train_")
check("ONLY narrows a half", narrowed, [s for s in two if s.startswith("train_")])
rc, _, err = dry(PART="3")
check("PART=3 refused", rc, 2)
check("PART=3's sentence", "PART must be 1 or 2" in err, True)
rc, _, err = dry(PART="1", ONLY="^train_")
check("nothing picked: exit code 2", rc, 2)

finish("gpu_checks halves")
