#!/usr/bin/env python3
"""mxdp's Llama family against transformers, both directions (needs torch and
transformers: the GPU machine, or any venv with them; without them it says it skipped).

From the repository root, after building:

    python3 scripts/check_llama_hf.py [--mxdp build/mxdp] [--workdir /tmp/mxdp_llama_check]

1. export: trains llama-tiny with mxdp on data/kjv.txt (CPU, one rank, MXFP8
   gather) with an eval at the end, exports the weights as trained (fp32 and
   bf16), loads each with transformers' AutoModelForCausalLM and computes the
   loss over the eval's windows (float64 on the CPU): within 1e-5 relative of
   mxdp's eval loss (the bf16 file equal to the fp32 one: MXFP8 weights are
   bf16-exact);
2. init-from: builds a random Qwen2ForCausalLM and a LlamaForCausalLM (untied,
   Llama 3 rope scaling) of vocabulary 256 with transformers, save_pretrained,
   then `mxdp train --model DIR --init-from DIR --steps 0 --eval-first
   --weight-format bf16 --weights...`: mxdp's step-0 eval loss (bf16 weights:
   the gather format) equals transformers' loss on the same windows with the
   weights rounded to bf16, within 1e-5 relative.
Prints every number, then PASS (exit 0) or FAIL (exit 1).
"""
import json
import os
import sys

from hf_check import B, E, T, eval_windows, fresh_workdir, parse_args, parser, rel, run


def main():
    a = parse_args(parser(__doc__, "/tmp/mxdp_llama_check", 100))
    try:
        import numpy  # noqa: F401  (hf_check.eval_windows reads the windows with it)
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    except ImportError as e:
        print(f"skipped: torch, transformers and numpy are needed here ({e})")
        return 0
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, compute float64 on the CPU")
    w = a.workdir
    common = ["--device", "cpu", "--data", fresh_workdir(w), "--seq-len", str(T), "--batch-size", str(B),
              "--eval-batches", str(E), "--sample-tokens", "0", "--progress", "lines"]
    x = None  # the eval's windows, read once the first run has prepared the data

    def hf_loss(model):
        nonlocal x
        if x is None:
            x = torch.tensor(eval_windows(w))
        with torch.no_grad():
            z = model.double().eval()(input_ids=x[:, :-1]).logits
            return float(torch.nn.functional.cross_entropy(z.reshape(-1, z.shape[-1]), x[:, 1:].reshape(-1)))

    def last_eval(metrics):
        return [json.loads(l) for l in open(metrics) if '"eval"' in l][-1]["loss"]

    ok = True
    # 1. export
    run([a.mxdp, "train", *common, "--model", "llama-tiny", "--n-layer", "2", "--steps", str(a.steps),
         "--eval-every", str(a.steps), "--weight-format", "mxfp8", "--metrics", os.path.join(w, "m.jsonl"),
         "--save-dir", os.path.join(w, "ck")])
    mx = last_eval(os.path.join(w, "m.jsonl"))
    losses = {}
    for name, flags in {"trained": [], "trained_bf16": ["--dtype", "bf16"]}.items():
        run([a.mxdp, "export", "--load", os.path.join(w, "ck"), "--output", os.path.join(w, name)] + flags)
        m = AutoModelForCausalLM.from_pretrained(os.path.join(w, name), dtype=torch.float32,
                                                 attn_implementation="eager")
        losses[name] = hf_loss(m)
        r = rel(losses[name], mx)
        print(f"export '{name}': transformers {losses[name]!r}, mxdp eval {mx!r}, relative {r:.3e} (limit 1e-5)")
        ok &= r <= 1e-5
    # 2. init-from
    shape = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=256)
    cases = {
        "qwen2": (Qwen2ForCausalLM, Qwen2Config(**shape, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True)),
        "llama3": (LlamaForCausalLM, LlamaConfig(**shape, rope_theta=5e5, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                                  rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                                "original_max_position_embeddings": 128})),
    }
    for name, (cls, cfg) in cases.items():
        torch.manual_seed(7)
        cfg._attn_implementation = "eager"
        m = cls(cfg).float()
        with torch.no_grad():
            for pn, p in m.named_parameters():
                if p.dim() == 1:
                    p.add_(0.1 * torch.randn_like(p))
        d = os.path.join(w, "hf_" + name)
        m.save_pretrained(d, safe_serialization=True)
        met = os.path.join(w, name + ".jsonl")
        run([a.mxdp, "train", *common, "--model", d, "--init-from", d, "--steps", "0", "--eval-first",
             "--weight-format", "bf16", "--metrics", met])
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(p.to(torch.bfloat16).float())  # what mxdp computes with: the bf16 gather format
        h = hf_loss(m)
        r = rel(last_eval(met), h)
        print(f"init-from '{name}': mxdp step-0 eval {last_eval(met)!r}, transformers {h!r}, relative {r:.3e} (limit 1e-5)")
        ok &= r <= 1e-5
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
