"""What the Python tests of scripts/ share: scripts/ on the import path, and
check() / finish(), which count failed checks and end the test with them."""
import os
import sys

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
sys.path.insert(0, SCRIPTS)

_failures = 0


def check(what, got, want):
    global _failures
    if got != want:
        _failures += 1
        print(f"FAIL {what}: got {got!r}, want {want!r}")


def finish(name):
    if _failures:
        sys.exit(f"{name}: {_failures} check(s) failed")
    print(f"{name}: all checks passed")
