#!/usr/bin/env python3
"""Golden files for mxdp's Llama family against transformers (no hub: random configs).

For each case (a LlamaForCausalLM with Llama 3 rope scaling and an untied head;
a Qwen2ForCausalLM with q/k/v biases and a tied head) this builds the model
from a small random config in fp32 with eager attention, randomises every
parameter (norm weights and biases too, so that a kernel ignoring one is
caught), and writes tests/data/llama_golden/<case>/:

  config.json, model.safetensors   save_pretrained's output (the weights)
  golden.safetensors               tokens, targets [B, T] (F32, exact integers),
                                   logits [B, T, V], loss [1] (mean cross-entropy
                                   of logits against targets), and grad.<name>,
                                   the gradient of that loss for every parameter
                                   (Hugging Face names)

tests/test_llama_golden.cpp loads the directory into mxdp's CPU model and
compares. Needs torch, transformers and safetensors:

  python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers safetensors
  /tmp/venv/bin/python scripts/make_llama_golden.py [OUT_DIR]
"""
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

B, T = 2, 16

SHAPE = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, max_position_embeddings=1024)

CASES = {
    "llama3": (LlamaForCausalLM, LlamaConfig(
        **SHAPE, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False, attention_bias=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 512})),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config(
        **SHAPE, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False)),
}


def make_case(name, out_root):
    cls, cfg = CASES[name]
    cfg._attn_implementation = "eager"
    torch.manual_seed(1234 if name == "llama3" else 4321)
    model = cls(cfg).float().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.15)
            elif pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:  # biases
                p.normal_(0.0, 0.1)
    tokens = torch.randint(0, cfg.vocab_size, (B, T))
    targets = torch.randint(0, cfg.vocab_size, (B, T))
    logits = model(input_ids=tokens).logits
    loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), targets.reshape(-1))
    loss.backward()

    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(out, extra)):
            os.remove(os.path.join(out, extra))
    golden = {"tokens": tokens.float(), "targets": targets.float(), "logits": logits.detach().contiguous(),
              "loss": loss.detach().reshape(1)}
    seen = set()
    for pname, p in model.named_parameters():
        if id(p) in seen:  # a tied head: one tensor, one gradient
            continue
        seen.add(id(p))
        golden["grad." + pname] = p.grad.detach().contiguous()
    save_file(golden, os.path.join(out, "golden.safetensors"))
    print(f"{name}: loss {loss.item():.6f}, {len(golden) - 4} gradients -> {out}")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                                               "llama_golden")
    torch.set_default_dtype(torch.float32)
    for name in CASES:
        make_case(name, root)


if __name__ == "__main__":
    main()
