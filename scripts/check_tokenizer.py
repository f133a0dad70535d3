#!/usr/bin/env python3
"""Checks `mxdp prepare --tokenizer` against the `tokenizers` package on any
tokenizer.json you have (a real Llama 3, Qwen2.5 or SmolLM2 download, say):

    python3 scripts/check_tokenizer.py --tokenizer DIR/tokenizer.json [--input data/kjv.txt] [--mxdp build/mxdp]

prepares INPUT with mxdp into a temporary directory, reads train.bin + val.bin
(2- or 4-byte tokens) and compares them id for id with
Tokenizer.from_file(...).encode(text, add_special_tokens=False). Prints PASS
or the first position where they differ, and exits 0 or 1.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
from tokenizers import Tokenizer


def read_shard(path):
    h = np.fromfile(path, dtype=np.uint8, count=64)
    assert bytes(h[:8]) == b"MXDPTOK1", path
    width = int(h[16:20].view("<u4")[0])
    return np.fromfile(path, dtype="<u2" if width == 2 else "<u4", offset=64).astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--input", default="data/kjv.txt")
    ap.add_argument("--mxdp", default="build/mxdp")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([a.mxdp, "prepare", "--input", a.input, "--output", d, "--tokenizer", a.tokenizer],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout + r.stderr, end="")
            return 1
        got = np.concatenate([read_shard(os.path.join(d, "train.bin")), read_shard(os.path.join(d, "val.bin"))])
    text = open(a.input, encoding="utf-8", newline="").read()
    want = np.array(Tokenizer.from_file(a.tokenizer).encode(text, add_special_tokens=False).ids, dtype=np.int64)
    n = min(len(got), len(want))
    diff = np.nonzero(got[:n] != want[:n])[0]
    if len(got) == len(want) and len(diff) == 0:
        print(f"PASS: {len(got)} ids equal ({a.tokenizer}, {a.input})")
        return 0
    first = int(diff[0]) if len(diff) else n
    print(f"FAIL: mxdp {len(got)} ids, tokenizers {len(want)}; first difference at id {first}: "
          f"mxdp {got[first:first + 8].tolist()} vs {want[first:first + 8].tolist()}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
