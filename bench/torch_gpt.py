"""GPT-2 in PyTorch, the same model as mxdp's (src/models/gpt2/gpt.h): learned positions, pre-LN
blocks, tanh GELU, LM head tied to wte, vocab padded to 50304, LayerNorm eps 1e-5.

Benchmark mode (what bench/compare_torch.sh runs): bf16 autocast, fused AdamW,
eager or torch.compile, random tokens of the given batch shape; prints one JSON
line with ms/step (the timed steps run with each loss read one step late, as
a training loop does; ms_synced: the median step run alone), tokens/s, peak memory.

The benchmark is the fastest configuration a user would run, nanoGPT's: the
loss over the padded 50304-entry vocabulary (no logits[..., :50257] copy;
--loss-vocab real slices as mxdp's loss does, and is what the trajectory
comparison tests/gpu_torch_trajectory.py uses through GPT's default), clipping
at 1.0 on (--no-clip to drop it). --float8 tensorwise|rowwise converts every
nn.Linear (all but the tied LM head, a matmul with wte) to torchao's float8
training (torchao.float8, before torch.compile).

    python3 bench/torch_gpt.py --model gpt2-124m --batch 16 --seq 1024 --mode compile
    python3 bench/torch_gpt.py --model gpt2-774m --batch 8 --float8 tensorwise
"""
import argparse, json

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_train import adamw, mxdp_init, time_steps, train_step

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
    def __init__(self, L, H, C, vocab=50257, padded=50304, max_seq=1024, loss_over_padded=False):
        super().__init__()
        self.vocab = vocab
        self.loss_over_padded = loss_over_padded  # nanoGPT's loss: softmax over all 50304 logits
        self.wte, self.wpe = nn.Embedding(padded, C), nn.Embedding(max_seq, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        # GPT-2 init, as mxdp's: normal(0, 0.02), residual projections 0.02/sqrt(2L), biases 0.
        mxdp_init(self, L, ("proj.weight", "mproj.weight"))

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
        return self.head(x, targets)

    def head(self, x, targets):
        """Final LayerNorm, tied LM head and the loss."""
        logits = self.lnf(x) @ self.wte.weight.t()
        if self.loss_over_padded:
            return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        return F.cross_entropy(logits[..., : self.vocab].float().flatten(0, 1), targets.flatten())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-124m", choices=sorted(CONFIGS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--mode", default="compile", choices=["eager", "compile", "compile-blocks"],
                    help="compile: torch.compile of the whole model; compile-blocks: each block and the "
                         "head compiled on their own (torchtitan's regional compile: the blocks share one "
                         "compiled graph, so a 48-layer model compiles in the time of one block)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--loss-vocab", default="padded", choices=["padded", "real"],
                    help="loss over the padded 50304 logits (nanoGPT, default) or the real 50257 (a slice)")
    ap.add_argument("--no-clip", action="store_true", help="no gradient clipping")
    ap.add_argument("--float8", default="none", choices=["none", "tensorwise", "rowwise"],
                    help="torchao float8 training on every nn.Linear (needs torchao)")
    a = ap.parse_args()
    torch.manual_seed(0)
    L, H, C = CONFIGS[a.model]
    model = GPT(L, H, C, loss_over_padded=a.loss_vocab == "padded").cuda()
    if a.float8 != "none":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(a.float8),
                                   module_filter_fn=lambda m, fqn: isinstance(m, nn.Linear))
    opt = adamw(model, 3e-4)
    clip = not a.no_clip
    step_model = torch.compile(model) if a.mode == "compile" else model
    if a.mode == "compile-blocks":
        for b in model.blocks:
            b.compile()
        model.head = torch.compile(model.head)
    x = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")
    y = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")
    ms, ms_synced, last = time_steps(lambda: train_step(model, step_model, opt, x, y, clip), a.warmup, a.steps)
    system = f"pytorch-{a.mode}" + ("" if a.float8 == "none" else f"-float8-{a.float8}")
    print(json.dumps({"system": system, "model": a.model, "batch": a.batch, "seq": a.seq,
                      "loss_vocab": a.loss_vocab, "clip": clip,
                      "ms_per_step": ms, "ms_synced": ms_synced,
                      "tokens_per_s": a.batch * a.seq / ms * 1e3,
                      "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
                      "loss": last}), flush=True)


if __name__ == "__main__":
    main()
