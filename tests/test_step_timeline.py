#!/usr/bin/env python3
"""scripts/step_timeline.py's analysis on hand-made timelines: busy time is the
union of the intervals, each gap is measured from the end of what ran last
(not of the last event to start) and named after it. Run by ctest."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
from checks import SCRIPTS, check, finish  # noqa: E402  (also puts scripts/ on the path)
from step_timeline import idle_gaps, load  # noqa: E402


# A [0, 1000) holds B [100, 500) inside it; C starts 2000 ns after A ends: the gap
# is 2000 ns after A (B ended earlier). D overlaps C's end and ends last; E after 500.
ev = [(0, 1000, "A"), (100, 500, "B"), (3000, 4000, "C"), (3500, 6000, "D"), (6500, 7000, "E")]
span, busy, gaps = idle_gaps(ev)
check("span", span, 7000 / 1e6)
check("busy", busy, (1000 + 3000 + 500) / 1e6)   # [0,1000) + [3000,6000) + [6500,7000)
check("gaps", gaps, [(2000, "A", "C"), (500, "D", "E")])

# Back-to-back events (end == next start) leave no gap; one event alone is all busy.
span, busy, gaps = idle_gaps([(10, 20, "x"), (20, 30, "y")])
check("back-to-back", (span, busy, gaps), (20 / 1e6, 20 / 1e6, []))
check("one event", idle_gaps([(5, 9, "z")]), (4 / 1e6, 4 / 1e6, []))

# load() sorts the tracer's CSV by start and reads quoted names with commas.
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "t.csv")
    with open(path, "w") as f:
        f.write('start_ns,end_ns,name\n300,400,"k2(int, float)"\n0,100,"k1"\n')
    check("load", load(path), [(0, 100, "k1"), (300, 400, "k2(int, float)")])
    # The whole script on it: the report names the one gap of 0.2 us between k1 and k2.
    out = subprocess.run([sys.executable, os.path.join(SCRIPTS, "step_timeline.py"), "--csv", path],
                         capture_output=True, text=True)
    check("exit code", out.returncode, 0)
    check("report line", "| 0.2 | `k1` | `k2` |" in out.stdout, True)

finish("step_timeline")
