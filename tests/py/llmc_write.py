#!/usr/bin/env python3
"""Writes llm.c token shards (karpathy/llm.c dev/data/data_common.py's format,
written out here with numpy): a header of 256 int32 (magic 20240520, version,
token count), then the tokens as uint16.

    llmc_write.py SRC OUT_PREFIX N_TRAIN   splits the tokens of SRC (an mxdp
        shard: 64-byte header, then uint16) into N_TRAIN training shards
        OUT_PREFIX_train_00000K.bin of equal size (the last takes the rest),
        and writes OUT_PREFIX_val_000000.bin from SRC's sibling val.bin
    llmc_write.py raw OUT VERSION COUNT N   a shard with header (VERSION, COUNT)
        and N tokens 0..N-1, for the error tests
"""
import os
import sys

import numpy as np


def write(path, tokens, version=1, count=None):
    h = np.zeros(256, dtype="<i4")
    h[0], h[1], h[2] = 20240520, version, len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(h.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def main():
    if sys.argv[1] == "raw":
        out, version, count, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        write(out, np.arange(n) % 50257, version, count)
        return
    src, prefix, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tr = np.fromfile(src, dtype="<u2", offset=64)
    va = np.fromfile(os.path.join(os.path.dirname(src), "val.bin"), dtype="<u2", offset=64)
    step = len(tr) // k
    for i in range(k):
        write(f"{prefix}_train_{i + 1:06d}.bin", tr[i * step:(i + 1) * step if i < k - 1 else len(tr)])
    write(f"{prefix}_val_{0:06d}.bin", va)


if __name__ == "__main__":
    main()
