#!/usr/bin/env python3
"""GPT-2 in numpy (float64), from a Hugging Face GPT-2 directory such as
`mxdp export` writes: the mean next-token cross-entropy over the windows that
mxdp's eval reads, so that the number can be held against mxdp's eval loss.

It shares no code with mxdp: the tensors come through the `safetensors`
package, the forward pass is written out below from GPT-2's definition
(LayerNorm eps 1e-5, GELU with the tanh approximation, causal attention,
Conv1D weights [in, out], head tied to wte).

Windows (mxdp's EvalLoader, docs/data.md): window k holds tokens
[k*T, k*T + T] of the shard; the first --windows of them are scored. With one
rank, --eval-batches E and --batch-size B, mxdp's eval reads E*B windows.

    python3 scripts/hf_gpt2_numpy.py --model DIR --tokens data/kjv.txt.mxdp/val.bin --seq-len 64 --windows 32

Prints the loss (repr, round-trip exact) on the last line. Needs numpy and
safetensors (pip install numpy safetensors).
"""
import argparse
import json
import os
import sys

import numpy as np


def st_array(dtype, data):
    """A safetensors tensor's bytes as a flat numpy array: F32, F16, BF16 (numpy has
    no bfloat16: widened to float32 by hand) and I64; None for any other dtype."""
    if dtype == "F32":
        return np.frombuffer(data, dtype="<f4")
    if dtype == "F16":
        return np.frombuffer(data, dtype="<f2")
    if dtype == "BF16":
        return (np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    if dtype == "I64":
        return np.frombuffer(data, dtype="<i8")
    return None


def load_tensors(path):
    """name -> float64 array; F32, F16 and BF16."""
    import safetensors
    with open(path, "rb") as f:
        raw = f.read()
    out = {}
    for name, t in safetensors.deserialize(raw):
        dtype = t["dtype"]
        a = st_array(dtype, bytes(t["data"])) if dtype in ("F32", "F16", "BF16") else None
        if a is None:
            raise SystemExit(f"{path}: tensor {name} has dtype {dtype}")
        out[name] = a.reshape(t["shape"]).astype(np.float64)
    return out


def read_tokens(path):
    head = np.fromfile(path, dtype=np.uint8, count=8)
    if bytes(head) == b"MXDPTOK1":
        return np.fromfile(path, dtype="<u2", offset=64).astype(np.int64)
    if np.frombuffer(bytes(head[:4]), dtype="<i4")[0] == 20240520:  # llm.c shard
        return np.fromfile(path, dtype="<u2", offset=1024).astype(np.int64)
    raise SystemExit(f"{path}: neither an mxdp token shard nor an llm.c shard")


def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


class Gpt2:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = json.load(f)
        t = load_tensors(os.path.join(model_dir, "model.safetensors"))
        self.t = {(k[len("transformer."):] if k.startswith("transformer.") else k): v for k, v in t.items()}
        self.L, self.H = self.cfg["n_layer"], self.cfg["n_head"]
        self.eps = self.cfg.get("layer_norm_epsilon", 1e-5)

    def logits(self, tokens):
        t, T = self.t, len(tokens)
        x = t["wte.weight"][tokens] + t["wpe.weight"][:T]
        C = x.shape[1]
        dh = C // self.H
        mask = np.triu(np.ones((T, T), dtype=bool), 1)
        for l in range(self.L):
            p = f"h.{l}."
            h = layernorm(x, t[p + "ln_1.weight"], t[p + "ln_1.bias"], self.eps)
            qkv = h @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]
            q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(T, self.H, dh).transpose(1, 0, 2) for i in range(3))
            att = q @ k.transpose(0, 2, 1) / np.sqrt(dh)
            att[:, mask] = -np.inf
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            y = (att @ v).transpose(1, 0, 2).reshape(T, C)
            x = x + y @ t[p + "attn.c_proj.weight"] + t[p + "attn.c_proj.bias"]
            h = layernorm(x, t[p + "ln_2.weight"], t[p + "ln_2.bias"], self.eps)
            f = gelu_tanh(h @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"])
            x = x + f @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
        x = layernorm(x, t["ln_f.weight"], t["ln_f.bias"], self.eps)
        return x @ t["wte.weight"].T

    def loss(self, window):
        z = self.logits(window[:-1])
        m = z.max(-1, keepdims=True)
        lse = (m + np.log(np.exp(z - m).sum(-1, keepdims=True)))[:, 0]
        return lse - z[np.arange(len(z)), window[1:]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face GPT-2 directory (config.json, model.safetensors)")
    ap.add_argument("--tokens", required=True, help="token shard: mxdp's (MXDPTOK1) or llm.c's")
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--windows", type=int, required=True)
    a = ap.parse_args()
    tok = read_tokens(a.tokens)
    T = a.seq_len
    if a.windows * T + 1 > len(tok):
        raise SystemExit(f"{a.tokens} has {len(tok)} tokens, too few for {a.windows} windows of {T + 1}")
    model = Gpt2(a.model)
    losses = np.concatenate([model.loss(tok[k * T:k * T + T + 1]) for k in range(a.windows)])
    print(f"windows {a.windows} x {T} tokens, mean loss")
    print(repr(float(losses.mean())))


if __name__ == "__main__":
    sys.exit(main())
