"""What the checks against transformers, scripts/check_hf_export.py (GPT-2) and
scripts/check_llama_hf.py (the Llama family), share: their options, the
commands they run, the work directory with its copy of the corpus, and the
eval's windows that mxdp's eval loss and transformers' are computed over."""
import argparse
import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T, B, E = 64, 4, 4  # seq len, batch size, eval batches: E*B windows of T+1 tokens


def parser(doc, workdir, steps):
    """The options every check takes (--mxdp, --workdir, --steps), described by the first paragraph of doc."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--mxdp", default=os.path.join(ROOT, "build", "mxdp"))
    ap.add_argument("--workdir", default=workdir)
    ap.add_argument("--steps", type=int, default=steps)
    return ap


def parse_args(ap):
    """The options, with --mxdp made absolute. Everything is local: transformers
    must not look for a model on the Hub (the GPU machine has no network)."""
    a = ap.parse_args()
    a.mxdp = os.path.abspath(a.mxdp)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    return a


def run(cmd):
    """Runs cmd, echoed; its output when it succeeds, else its output printed and the check failed."""
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        print(r.stdout)
        raise SystemExit(f"FAIL: {cmd[0]} {cmd[1]} exited with {r.returncode}")
    return r.stdout


def fresh_workdir(w):
    """Empties w and copies data/kjv.txt into it; returns the copy's path (the --data of every run)."""
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    data = os.path.join(w, "kjv.txt")
    shutil.copy(os.path.join(ROOT, "data", "kjv.txt"), data)
    return data


def val_bin(w):
    """The validation tokens of the copy in w: `--data FILE.txt` is prepared into FILE.txt.mxdp/ beside it (docs/data.md)."""
    return os.path.join(w, "kjv.txt.mxdp", "val.bin")


def eval_windows(w):
    """The eval's E*B windows of T+1 tokens (int64, numpy) from the start of val_bin(w): what mxdp's eval reads."""
    import numpy as np
    tok = np.fromfile(val_bin(w), dtype="<u2", offset=64).astype(np.int64)
    return np.stack([tok[k * T:k * T + T + 1] for k in range(E * B)])


def rel(x, y):
    return abs(x - y) / abs(y)
