#!/usr/bin/env python3
"""Golden data for tests/test_gpt.cpp: mxdp's GPT-2 computed by PyTorch.

Builds the architecture of src/models/gpt2/gpt.h in PyTorch (float64, so the reference is
far more exact than the fp32 code under test), with random weights chosen here
(biases and LayerNorm params non-trivial, padded vocab rows non-zero), and
writes to tests/data/gpt_golden.bin:

  header      8 bytes  magic b"MXGPTGD1"
              12 int32 version(=1), vocab, padded_vocab, max_seq, n_layer, n_head,
                       d_model, B, T, n_steps, n_params, 0
              5 float32 lr, beta1, beta2, eps, weight_decay
  shapes      per param: int32 ndim, int32 dims[ndim]  (mxdp's param order)
  inputs      int32[B*T]
  targets     int32[B*T]
  params      float32, every param in order, row-major (mxdp's layout)
  logits      float32[B*T*padded_vocab]
  loss        float32
  grads       float32, every param's gradient of the mean loss, in order
  losses      float32[n_steps]: loss before AdamW step i on the same batch

All little-endian. AdamW is torch.optim.AdamW with weight decay on the 2-D
params only (two param groups), no clipping.

Regenerate (needs torch; CI does not):  python3 scripts/gen_gpt_golden.py
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

VOCAB, PADDED_VOCAB, MAX_SEQ, N_LAYER, N_HEAD, D_MODEL = 60, 64, 16, 2, 4, 64
B, T = 4, 12  # T < max_seq: rows T.. of wpe get no gradient
N_STEPS, LR, BETA1, BETA2, EPS, WD = 10, 1e-3, 0.9, 0.95, 1e-8, 0.1
SEED = 1234


def param_shapes():
    C, L = D_MODEL, N_LAYER
    shapes = [("wte", (PADDED_VOCAB, C)), ("wpe", (MAX_SEQ, C))]
    for l in range(L):
        p = f"h{l}."
        shapes += [
            (p + "ln1.w", (C,)), (p + "ln1.b", (C,)),
            (p + "attn.qkv.w", (3 * C, C)), (p + "attn.qkv.b", (3 * C,)),
            (p + "attn.proj.w", (C, C)), (p + "attn.proj.b", (C,)),
            (p + "ln2.w", (C,)), (p + "ln2.b", (C,)),
            (p + "mlp.fc.w", (4 * C, C)), (p + "mlp.fc.b", (4 * C,)),
            (p + "mlp.proj.w", (C, 4 * C)), (p + "mlp.proj.b", (C,)),
        ]
    shapes += [("lnf.w", (C,)), ("lnf.b", (C,))]
    return shapes


def make_params(gen):
    """fp32 values (exactly what the C++ test loads), held as float64 leaves."""
    params = {}
    for name, shape in param_shapes():
        r = torch.randn(shape, generator=gen, dtype=torch.float32)
        if name.endswith("proj.w"):
            v = r * (0.1 / math.sqrt(2 * N_LAYER))
        elif len(shape) == 2:
            v = r * 0.1
        elif name.endswith(".w"):  # LayerNorm weights
            v = 1.0 + 0.1 * r
        else:  # biases
            v = 0.05 * r
        params[name] = v.to(torch.float32).to(torch.float64).requires_grad_(True)
    return params


def forward(P, idx, tgt):
    C, NH = D_MODEL, N_HEAD
    hs = C // NH
    Bn, Tn = idx.shape
    x = P["wte"][idx] + P["wpe"][:Tn]
    mask = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    for l in range(N_LAYER):
        p = f"h{l}."
        h = F.layer_norm(x, (C,), P[p + "ln1.w"], P[p + "ln1.b"], 1e-5)
        qkv = h @ P[p + "attn.qkv.w"].T + P[p + "attn.qkv.b"]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.view(Bn, Tn, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + y @ P[p + "attn.proj.w"].T + P[p + "attn.proj.b"]
        h = F.layer_norm(x, (C,), P[p + "ln2.w"], P[p + "ln2.b"], 1e-5)
        h = F.gelu(h @ P[p + "mlp.fc.w"].T + P[p + "mlp.fc.b"], approximate="tanh")
        x = x + h @ P[p + "mlp.proj.w"].T + P[p + "mlp.proj.b"]
    x = F.layer_norm(x, (C,), P["lnf.w"], P["lnf.b"], 1e-5)
    logits = x @ P["wte"].T  # tied head, over the padded vocab
    loss = F.cross_entropy(logits[..., :VOCAB].reshape(-1, VOCAB), tgt.reshape(-1))
    return logits, loss


def f32(t):
    return t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()


def main():
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    P = make_params(gen)
    seq = torch.randint(0, VOCAB, (B, T + 1), generator=gen)
    idx, tgt = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    names = [n for n, _ in param_shapes()]

    init_bytes = b"".join(f32(P[n]) for n in names)
    logits, loss = forward(P, idx, tgt)
    loss.backward()
    grads_bytes = b"".join(f32(P[n].grad) for n in names)
    logits_bytes, loss_value = f32(logits), loss.item()

    decay = [P[n] for n in names if P[n].dim() == 2]
    no_decay = [P[n] for n in names if P[n].dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(BETA1, BETA2), eps=EPS)
    losses = []
    for _ in range(N_STEPS):
        opt.zero_grad(set_to_none=True)
        _, l = forward(P, idx, tgt)
        l.backward()
        losses.append(l.item())
        opt.step()
    assert losses[0] == loss_value

    out = bytearray(b"MXGPTGD1")
    out += struct.pack("<12i", 1, VOCAB, PADDED_VOCAB, MAX_SEQ, N_LAYER, N_HEAD, D_MODEL, B, T,
                       N_STEPS, len(names), 0)
    out += struct.pack("<5f", LR, BETA1, BETA2, EPS, WD)
    for _, shape in param_shapes():
        out += struct.pack(f"<{1 + len(shape)}i", len(shape), *shape)
    out += idx.to(torch.int32).numpy().astype("<i4").tobytes()
    out += tgt.to(torch.int32).numpy().astype("<i4").tobytes()
    out += init_bytes + logits_bytes + struct.pack("<f", loss_value) + grads_bytes
    out += struct.pack(f"<{N_STEPS}f", *losses)

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                        "gpt_golden.bin")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(out)
    print(f"wrote {os.path.normpath(path)}: {len(out)} bytes, torch {torch.__version__}, "
          f"loss {loss_value:.6f}, losses {' '.join(f'{x:.6f}' for x in losses)}", file=sys.stderr)


if __name__ == "__main__":
    main()
