"""The Llama family in PyTorch, two ways, for bench/compare_llama.sh and
tests/gpu_llama_trajectory.py:

  --impl titan  a torchtitan-style Llama written here: the same model as mxdp's
                (src/models/llama/llama_config.h): RMSNorm in fp32, RoPE in
                Hugging Face's rotate_half convention (Llama 3 scaling when set),
                grouped-query attention through F.scaled_dot_product_attention
                (k/v heads repeated as torchtitan's repeat_kv), SwiGLU, tied or
                untied head, q/k/v biases for Qwen2; parameters stacked as
                mxdp's (qkv, gate_up) so its weights load one to one.
  --impl hf     transformers' LlamaForCausalLM / Qwen2ForCausalLM built from the
                preset's config (no download), SDPA attention.

Benchmark mode: bf16 autocast, fp32 parameters, fused AdamW (0.9/0.95, eps
1e-8, weight decay 0.1 on 2-D weights), clip at 1.0, torch.compile (--compile
block: each transformer block compiled, torchtitan's default and cheap to
compile; model: the whole model), random tokens; prints one JSON line with
ms/step (results read one step late, as a training loop does; ms_synced: the
median step run alone), tokens/s and peak memory (torch.cuda.max_memory_allocated).

    python3 bench/torch_llama.py --model qwen2.5-0.5b --batch 8 --seq 2048 --impl titan
"""
import argparse, json, math

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_train import adamw, mxdp_init, time_steps, train_step

# The mxdp presets (docs/llama.md): n_layer, d_model, n_head, n_kv_head, head_dim, d_ff, vocab,
# rope_theta, rms_eps, qkv_bias, tied, llama3 rope scaling (factor, low, high, original max) or None.
CONFIGS = {
    "smollm2-135m": (30, 576, 9, 3, 64, 1536, 49152, 1e5, 1e-5, False, True, None),
    "smollm2-360m": (32, 960, 15, 5, 64, 2560, 49152, 1e5, 1e-5, False, True, None),
    "qwen2.5-0.5b": (24, 896, 14, 2, 64, 4864, 151936, 1e6, 1e-6, True, True, None),
    "llama3.2-1b": (16, 2048, 32, 8, 64, 8192, 128256, 5e5, 1e-5, False, True, (32.0, 1.0, 4.0, 8192)),
}


def inv_freq(hd, theta, scaling):
    """1 / theta^(2i/hd), then Llama 3's scaling (as transformers' _compute_llama3_parameters)."""
    f = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    if scaling is None:
        return f
    factor, low, high, orig = scaling
    low_wl, high_wl = orig / low, orig / high
    wl = 2 * math.pi / f
    out = torch.where(wl > low_wl, f / factor, f)
    smooth = (orig / wl - low) / (high - low)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wl < high_wl) * ~(wl > low_wl)
    return torch.where(medium, smoothed, out)


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(C))

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Block(nn.Module):
    def __init__(self, C, NH, KV, hd, Fd, eps, bias):
        super().__init__()
        self.NH, self.KV, self.hd = NH, KV, hd
        self.attn_norm, self.mlp_norm = RMSNorm(C, eps), RMSNorm(C, eps)
        self.qkv = nn.Linear(C, (NH + 2 * KV) * hd, bias=bias)
        self.o = nn.Linear(NH * hd, C, bias=False)
        self.gate_up = nn.Linear(C, 2 * Fd, bias=False)
        self.down = nn.Linear(Fd, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).split([self.NH * self.hd, self.KV * self.hd, self.KV * self.hd], dim=-1)
        q = q.view(B, T, self.NH, self.hd).transpose(1, 2)
        k = k.view(B, T, self.KV, self.hd).transpose(1, 2)
        v = v.view(B, T, self.KV, self.hd).transpose(1, 2)
        q = (q * cos + rotate_half(q) * sin).to(v.dtype)
        k = (k * cos + rotate_half(k) * sin).to(v.dtype)
        g = self.NH // self.KV
        if g > 1:  # torchtitan's repeat_kv
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, self.NH * self.hd))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, name, max_seq=8192):
        super().__init__()
        L, C, NH, KV, hd, Fd, V, theta, eps, bias, tied, scaling = CONFIGS[name]
        self.embed = nn.Embedding(V, C)
        self.blocks = nn.ModuleList(Block(C, NH, KV, hd, Fd, eps, bias) for _ in range(L))
        self.norm = RMSNorm(C, eps)
        self.lm_head = None if tied else nn.Linear(C, V, bias=False)
        t = torch.arange(max_seq).float()
        ang = torch.outer(t, inv_freq(hd, theta, scaling))  # position * inv_freq in fp32, as transformers
        emb = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        mxdp_init(self, L, ("o.weight", "down.weight"))  # mxdp's init (llama_init_param)

    def mxdp_order(self):
        """The parameters in mxdp's order (llama_param_specs)."""
        order = [self.embed.weight]
        for b in self.blocks:
            order += [b.attn_norm.weight, b.qkv.weight] + ([b.qkv.bias] if b.qkv.bias is not None else [])
            order += [b.o.weight, b.mlp_norm.weight, b.gate_up.weight, b.down.weight]
        order.append(self.norm.weight)
        return order + ([self.lm_head.weight] if self.lm_head is not None else [])

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.embed(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        for b in self.blocks:
            x = b(x, cos, sin)
        h = self.norm(x)
        logits = self.lm_head(h) if self.lm_head is not None else h @ self.embed.weight.t()
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def hf_model(name, seq):
    """transformers' model of the preset, fp32 parameters, SDPA attention; forward(idx, targets) -> loss."""
    import transformers
    L, C, NH, KV, hd, Fd, V, theta, eps, bias, tied, scaling = CONFIGS[name]
    kw = dict(vocab_size=V, hidden_size=C, intermediate_size=Fd, num_hidden_layers=L, num_attention_heads=NH,
              num_key_value_heads=KV, head_dim=hd, rms_norm_eps=eps, tie_word_embeddings=tied,
              max_position_embeddings=max(seq, 2048), hidden_act="silu", use_cache=False)
    rope = {"rope_type": "default", "rope_theta": theta}
    if scaling is not None:
        f, lo, hi, orig = scaling
        rope = {"rope_type": "llama3", "rope_theta": theta, "factor": f, "low_freq_factor": lo,
                "high_freq_factor": hi, "original_max_position_embeddings": orig}
    if int(transformers.__version__.split(".")[0]) >= 5:
        kw["rope_parameters"] = rope
    else:
        kw["rope_theta"] = theta
        if scaling is not None:
            kw["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    if bias:
        cfg, cls = transformers.Qwen2Config(**kw), transformers.Qwen2ForCausalLM
    else:
        cfg, cls = transformers.LlamaConfig(**kw), transformers.LlamaForCausalLM
    cfg._attn_implementation = "sdpa"
    model = cls(cfg).float()

    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, idx, targets):
            logits = self.m(input_ids=idx).logits
            return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

    return Wrapped()


def blocks_of(model):
    return model.blocks if isinstance(model, Llama) else model.m.model.layers


def compiled(model, scope):
    if scope == "none":
        return model
    if scope == "model":
        return torch.compile(model)
    for b in blocks_of(model):  # torchtitan: one compiled region per block (the blocks share its code)
        b.compile()
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-0.5b", choices=sorted(CONFIGS))
    ap.add_argument("--impl", default="titan", choices=["titan", "hf"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--compile", default="block", choices=["block", "model", "none"])
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = (Llama(a.model, max_seq=a.seq) if a.impl == "titan" else hf_model(a.model, a.seq)).cuda()
    opt = adamw(model, 3e-4)
    step_model = compiled(model, a.compile)
    V = CONFIGS[a.model][6]
    x = torch.randint(0, V, (a.batch, a.seq), device="cuda")
    y = torch.randint(0, V, (a.batch, a.seq), device="cuda")
    ms, ms_synced, last = time_steps(lambda: train_step(model, step_model, opt, x, y), a.warmup, a.steps)
    print(json.dumps({"system": f"pytorch-{a.impl}-compile-{a.compile}" if a.compile != "none" else f"pytorch-{a.impl}-eager",
                      "model": a.model, "batch": a.batch, "seq": a.seq,
                      "ms_per_step": ms, "ms_synced": ms_synced,
                      "tokens_per_s": a.batch * a.seq / ms * 1e3,
                      "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "loss": last}), flush=True)


if __name__ == "__main__":
    main()
