#!/usr/bin/env python3
"""The reference for the safetensors tests: the `safetensors` package (Hugging Face).

    st_tool.py dump FILE OUT.json        every tensor: dtype, shape, and its values as
                                         float64 (F32/F16/BF16), read by the package
    st_tool.py write OUT.safetensors     a file with known contents (F32, F16, I64,
                                         an empty tensor), written by the package
    st_tool.py edit SRC DST OP [ARG...]  a changed copy of an HF GPT-2 file, written
                                         by the package:
        strip-prefix                       names without "transformer." (as on the hub),
                                           plus the h.N.attn.bias mask buffers old files have
        drop NAME | rename OLD NEW | transpose NAME | add-head | add-bad-head | add NAME
"""
import json
import os
import sys

import numpy as np
import safetensors
from safetensors.numpy import save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from hf_gpt2_numpy import st_array  # noqa: E402  (the package's bytes as numpy: shared with the user script)


def read_all(path):
    out = {}
    for name, t in safetensors.deserialize(open(path, "rb").read()):
        dtype, shape = t["dtype"], t["shape"]
        a = st_array(dtype, bytes(t["data"]))
        if a is None:
            raise SystemExit(f"{path}: {name}: dtype {dtype}")
        out[name] = (dtype, list(shape), a.reshape(shape))
    return out


def main():
    cmd = sys.argv[1]
    if cmd == "dump":
        t = read_all(sys.argv[2])
        with safetensors.safe_open(sys.argv[2], framework="numpy") as f:
            meta = f.metadata()
        json.dump({"metadata": meta, "tensors": {n: {"dtype": d, "shape": s, "values": a.astype(np.float64).ravel().tolist()}
                                                 for n, (d, s, a) in t.items()}},
                  open(sys.argv[3], "w"))
    elif cmd == "write":
        save_file({"weight": (np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5) / 3,
                   "half": np.array([1.0, -2.5, 65504.0, 6.1e-5, 0.0], dtype=np.float16),
                   "ids": np.array([1, -2, 3], dtype=np.int64),
                   "empty": np.zeros((0, 4), dtype=np.float32)},
                  sys.argv[2], metadata={"format": "pt", "who": "st_tool"})
    elif cmd == "edit":
        src, dst, op, args = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
        t = {n: a for n, (d, s, a) in read_all(src).items()}
        t = {n: np.ascontiguousarray(a.astype(np.float32)) for n, a in t.items()}
        if op == "strip-prefix":
            t = {n[len("transformer."):] if n.startswith("transformer.") else n: a for n, a in t.items()}
            L = 1 + max(int(n.split(".")[1]) for n in t if n.startswith("h."))
            T = t["wpe.weight"].shape[0]
            for l in range(L):
                t[f"h.{l}.attn.bias"] = np.tril(np.ones((T, T), dtype=np.float32)).reshape(1, 1, T, T)
        elif op == "drop":
            del t[args[0]]
        elif op == "rename":
            t[args[1]] = t.pop(args[0])
        elif op == "transpose":
            t[args[0]] = np.ascontiguousarray(t[args[0]].T)
        elif op == "add-head":
            t["lm_head.weight"] = t["transformer.wte.weight"].copy()
        elif op == "add-bad-head":
            t["lm_head.weight"] = t["transformer.wte.weight"] * 2
        elif op == "add":
            t[args[0]] = np.zeros(3, dtype=np.float32)
        else:
            raise SystemExit(f"unknown op {op}")
        save_file(t, dst, metadata={"format": "pt"})
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
