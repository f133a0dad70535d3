"""GPT-2 in PyTorch, the same model as mxdp's (src/models/gpt2/gpt.h): learned positions, pre-LN
blocks, tanh GELU, LM head tied to wte, vocab padded to 50304, LayerNorm eps 1e-5.

Benchmark mode (what bench/compare_torch.sh runs): bf16 autocast, fused AdamW,
eager or torch.compile, random tokens of the given batch shape; prints one JSON
line with ms/step (the timed steps run with each loss read one step late, as
a training loop does; ms_synced: the median step run alone), tokens/s, peak memory.

    python3 bench/torch_gpt.py --model gpt2-124m --batch 16 --seq 1024 --mode compile
"""
import argparse, json, math, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {  # n_layer, n_head, d_model (vocab 50257 padded to 50304, max_seq 1024)
    "gpt2-124m": (12, 12, 768), "gpt2-350m": (24, 16, 1024),
    "gpt2-774m": (36, 20, 1280), "gpt2-1558m": (48, 25, 1600),
}


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.mproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, vocab=50257, padded=50304, max_seq=1024):
        super().__init__()
        self.vocab = vocab
        self.wte, self.wpe = nn.Embedding(padded, C), nn.Embedding(max_seq, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        # GPT-2 init, as mxdp's: normal(0, 0.02), residual projections 0.02/sqrt(2L), biases 0.
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("proj.weight", "mproj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def mxdp_order(self):
        """The parameters in mxdp's order (gpt.h: gpt_param_specs)."""
        order = [self.wte.weight, self.wpe.weight]
        for b in self.blocks:
            order += [b.ln1.weight, b.ln1.bias, b.qkv.weight, b.qkv.bias, b.proj.weight, b.proj.bias,
                      b.ln2.weight, b.ln2.bias, b.fc.weight, b.fc.bias, b.mproj.weight, b.mproj.bias]
        return order + [self.lnf.weight, self.lnf.bias]

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits[..., : self.vocab].float().flatten(0, 1), targets.flatten())


def adamw(model, lr):
    """Fused AdamW as mxdp's: betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D weights only."""
    params = list(model.parameters())
    return torch.optim.AdamW([{"params": [p for p in params if p.dim() == 2], "weight_decay": 0.1},
                              {"params": [p for p in params if p.dim() != 2], "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


def train_step(model, step_model, opt, x, y):
    """One step: bf16 autocast forward, backward, clip at 1.0, AdamW. Returns the loss tensor."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = step_model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-124m", choices=sorted(CONFIGS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--mode", default="compile", choices=["eager", "compile"])
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    torch.manual_seed(0)
    L, H, C = CONFIGS[a.model]
    model = GPT(L, H, C).cuda()
    opt = adamw(model, 3e-4)
    step_model = torch.compile(model) if a.mode == "compile" else model
    x = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")
    y = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")
    for i in range(a.warmup):
        train_step(model, step_model, opt, x, y).item()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    # Synced: each step alone, host and GPU idle in turn (the median of steps).
    times = []
    for i in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        train_step(model, step_model, opt, x, y).item()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    # Pipelined, as a training loop runs: each loss read one step late, so the
    # host submits step i+1 while the GPU runs step i (the window's mean).
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    prev = None
    for i in range(a.steps):
        loss = train_step(model, step_model, opt, x, y).detach()
        if prev is not None:
            prev.item()
        prev = loss
    last = prev.item()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) / a.steps * 1e3
    print(json.dumps({"system": f"pytorch-{a.mode}", "model": a.model, "batch": a.batch, "seq": a.seq,
                      "ms_per_step": ms, "ms_synced": statistics.median(times) * 1e3,
                      "tokens_per_s": a.batch * a.seq / ms * 1e3,
                      "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
                      "loss": last}), flush=True)


if __name__ == "__main__":
    main()
