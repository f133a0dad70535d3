#!/usr/bin/env python3
"""scripts/check_doc_refs.py: on a small git repository made here, where each
kind of reference (comma, parenthesis, list, wrapped over comment lines, a bold
lead-in, the README, a quoted passage) resolves or is broken on purpose, and on
this repository, whose every reference must resolve. Run by ctest."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
from checks import SCRIPTS, check, finish  # noqa: E402  (also puts scripts/ on the path)
from check_doc_refs import check_references  # noqa: E402

SCRIPT = os.path.join(SCRIPTS, "check_doc_refs.py")
REPO = os.path.dirname(SCRIPTS)

DOC = """# Speed notes

## Speed

**One launch per shard.** The fused pass.

## Where the time goes, at 1558M

Text with a passage in it.
"""
README_TEXT = "# tool\n\n## More ranks, more nodes\n"
GOOD = """// See docs/speed.md, "Speed" and "One launch per shard"; speed.md ("Where the
// time goes") and README's "More ranks"; speed.md's "a passage in it".
// Not a reference: open("speed.md") and other.md, "Nothing" (no such file).
"""
BROKEN = """# docs/speed.md, "Layout" and speed.md ("Where the time went")
# and speed.md's "no such passage"
"""


def make_repo(d, files):
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(d, path)) or d, exist_ok=True)
        with open(os.path.join(d, path), "w", encoding="utf-8") as f:
            f.write(text)
    subprocess.run(["git", "init", "-q", d], check=True)
    subprocess.run(["git", "-C", d, "add", "."], check=True)


def run(root):
    p = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)
    return p.returncode, p.stdout


with tempfile.TemporaryDirectory() as d:
    make_repo(d, {"docs/speed.md": DOC, "README.md": README_TEXT, "src/good.cpp": GOOD})
    checked, broken = check_references(d)
    check("good references: how many", checked, 5)
    check("good references: none broken", broken, [])
    check("good references: exit code", run(d)[0], 0)

    make_repo(d, {"scripts/broken.py": BROKEN})
    checked, broken = check_references(d)
    check("with the broken file: how many", checked, 8)
    check("with the broken file: which", sorted(broken), sorted([
        ("scripts/broken.py", 'speed.md "Where the time went"'),
        ("scripts/broken.py", 'speed.md "Layout"'),
        ("scripts/broken.py", 'speed.md\'s "no such passage"'),
    ]))
    rc, out = run(d)
    check("with the broken file: exit code", rc, 1)
    check("the message names the file and the section",
          "scripts/broken.py: speed.md \"Layout\": no such section" in out, True)

# This repository: every reference to a section of its docs resolves.
rc, out = run(REPO)
if rc != 0:
    print(out)
check("this repository's references", rc, 0)

finish("doc_refs")
