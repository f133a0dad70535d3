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
import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T, B, E = 64, 4, 4


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        print(r.stdout)
        raise SystemExit(f"FAIL: {cmd[0]} {cmd[1]} exited with {r.returncode}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mxdp", default=os.path.join(ROOT, "build", "mxdp"))
    ap.add_argument("--workdir", default="/tmp/mxdp_llama_check")
    ap.add_argument("--steps", type=int, default=100)
    a = ap.parse_args()
    a.mxdp = os.path.abspath(a.mxdp)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import numpy as np
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    except ImportError as e:
        print(f"skipped: torch, transformers and numpy are needed here ({e})")
        return 0
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, compute float64 on the CPU")
    w = a.workdir
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    shutil.copy(os.path.join(ROOT, "data", "kjv.txt"), os.path.join(w, "kjv.txt"))
    common = ["--device", "cpu", "--data", os.path.join(w, "kjv.txt"), "--seq-len", str(T), "--batch-size", str(B),
              "--eval-batches", str(E), "--sample-tokens", "0", "--progress", "lines"]
    tok = None

    def windows():
        nonlocal tok
        if tok is None:
            val = os.path.join(w, "kjv.txt.mxdp", "val.bin")
            tok = np.fromfile(val, dtype="<u2", offset=64).astype(np.int64)
        return torch.tensor(np.stack([tok[k * T:k * T + T + 1] for k in range(E * B)]))

    def hf_loss(model):
        x = windows()
        with torch.no_grad():
            z = model.double().eval()(input_ids=x[:, :-1]).logits
            return float(torch.nn.functional.cross_entropy(z.reshape(-1, z.shape[-1]), x[:, 1:].reshape(-1)))

    def rel(x, y):
        return abs(x - y) / abs(y)

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
