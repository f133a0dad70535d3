"""GPT-2 on the GPU against PyTorch: 20 optimizer steps from mxdp's own initial
weights on the same batches (written by tests/gpu_trajectory), PyTorch with
bf16 autocast and fused AdamW, the same hyperparameters. Both compute in bf16
with fp32 accumulation but round in different places (autocast keeps
LayerNorm and the loss in fp32), so the trajectories agree within a tolerance:
every step's loss within 2% relative, and both must fall by at least 30%.

    python3 tests/gpu_torch_trajectory.py BUILD_DIR [MODEL B T]
"""
import json, os, subprocess, sys, tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
from torch_gpt import CONFIGS, GPT  # noqa: E402

build = sys.argv[1]
model_name, B, T = (sys.argv[2], int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else ("gpt2-124m", 16, 1024)
out = tempfile.mkdtemp()
subprocess.run([os.path.join(build, "tests", "gpu_trajectory"), model_name, str(B), str(T), out], check=True)
mx = json.load(open(os.path.join(out, "mxdp_losses.json")))
L, H, C = CONFIGS[model_name]
model = GPT(L, H, C).cuda()
# mxdp's parameter order (gpt.h): wte, wpe, per block ln1 w/b, qkv w/b, proj w/b, ln2 w/b, fc w/b, mproj w/b, lnf w/b.
order = [model.wte.weight, model.wpe.weight]
for b in model.blocks:
    order += [b.ln1.weight, b.ln1.bias, b.qkv.weight, b.qkv.bias, b.proj.weight, b.proj.bias,
              b.ln2.weight, b.ln2.bias, b.fc.weight, b.fc.bias, b.mproj.weight, b.mproj.bias]
order += [model.lnf.weight, model.lnf.bias]
init = np.fromfile(os.path.join(out, "init.f32"), dtype=np.float32)
assert init.size == sum(p.numel() for p in order), "init.f32 does not match the model's parameter count"
at = 0
with torch.no_grad():
    for p in order:
        p.copy_(torch.from_numpy(init[at:at + p.numel()]).view_as(p))
        at += p.numel()
batches = np.fromfile(os.path.join(out, "batches.i32"), dtype=np.int32).reshape(20, 2, B, T)
decay = [p for p in order if p.dim() == 2]
no_decay = [p for p in order if p.dim() != 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
th = []
for s in range(20):
    x = torch.from_numpy(batches[s, 0]).long().cuda()
    y = torch.from_numpy(batches[s, 1]).long().cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    th.append(loss.item())
worst = max(abs(a - b) / b for a, b in zip(mx, th))
print("step  mxdp     torch")
for s, (a, b) in enumerate(zip(mx, th)):
    print(f"{s + 1:>4}  {a:.4f}  {b:.4f}")
print(f"worst relative difference {worst:.4f} (limit 0.02); mxdp fell {mx[0]:.3f} -> {mx[-1]:.3f}, torch {th[0]:.3f} -> {th[-1]:.3f}")
ok = worst < 0.02 and mx[-1] < 0.7 * mx[0] and th[-1] < 0.7 * th[0]
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
