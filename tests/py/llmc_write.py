#!/usr/bin/env python3
"""Writes llm.c token shards (karpathy/llm.c dev/data/data_common.py's format,
written out here with numpy): a header of 256 int32 (magic, version, token
count), then the tokens. FORMAT is llm.c's model_desc:
    gpt-2     magic 20240520, version 1, uint16 tokens (the default)
    llama-3   magic 20240801, version 7, uint32 tokens

    llmc_write.py SRC OUT_PREFIX N_TRAIN [FORMAT]   splits the tokens of SRC
        (an mxdp shard: 64-byte header, token_bytes at bytes 16..19, then the
        tokens) into N_TRAIN training shards OUT_PREFIX_train_00000K.bin of
        equal size (the last takes the rest), and writes
        OUT_PREFIX_val_000000.bin from SRC's sibling val.bin
    llmc_write.py raw OUT VERSION COUNT N [FORMAT]  a shard with header
        (FORMAT's magic, VERSION, COUNT) and N tokens: i % 50257 (gpt-2) or
        (65536 + i) % 128256 (llama-3), i = 0..N-1, for the error tests
"""
import os
import sys

import numpy as np

FORMATS = {"gpt-2": (20240520, 1, "<u2"), "llama-3": (20240801, 7, "<u4")}


def write(path, tokens, fmt, version=None, count=None):
    magic, v, dtype = FORMATS[fmt]
    h = np.zeros(256, dtype="<i4")
    h[0], h[1], h[2] = magic, v if version is None else version, len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(h.tobytes())
        f.write(np.asarray(tokens, dtype=dtype).tobytes())


def read_mxdp(path):
    token_bytes = int(np.fromfile(path, dtype="<u4", count=5)[4])
    return np.fromfile(path, dtype={2: "<u2", 4: "<u4"}[token_bytes], offset=64)


def main():
    if sys.argv[1] == "raw":
        out, version, count, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        fmt = sys.argv[6] if len(sys.argv) > 6 else "gpt-2"
        i = np.arange(n)
        write(out, i % 50257 if fmt == "gpt-2" else (65536 + i) % 128256, fmt, version, count)
        return
    src, prefix, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fmt = sys.argv[4] if len(sys.argv) > 4 else "gpt-2"
    tr = read_mxdp(src)
    va = read_mxdp(os.path.join(os.path.dirname(src), "val.bin"))
    step = len(tr) // k
    for i in range(k):
        write(f"{prefix}_train_{i + 1:06d}.bin", tr[i * step:(i + 1) * step if i < k - 1 else len(tr)], fmt)
    write(f"{prefix}_val_{0:06d}.bin", va, fmt)


if __name__ == "__main__":
    main()
