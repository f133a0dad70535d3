"""The GPU Llama against PyTorch: 20 optimizer steps from mxdp's own initial
weights on the same batches (written by tests/gpu_llama_trajectory), a
PyTorch Llama (bench/torch_llama.py's torchtitan-style model, eager) with bf16
autocast and fused AdamW, the same hyperparameters (constant lr 6e-4, clip
1.0, weight decay 0.1 on 2-D weights). Both compute in bf16 with fp32
accumulation but round in different places (autocast keeps RMSNorm, the
residual stream and the loss in fp32; mxdp keeps a bf16 residual stream), so
the trajectories agree within a tolerance: every step's loss within 2%
relative (GPT-2's bound, tests/gpu_torch_trajectory.py), and both must fall
by at least 30%.

    python3 tests/gpu_llama_trajectory.py BUILD_DIR [MODEL B T]
"""
import json, os, subprocess, sys, tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
from torch_llama import Llama, adamw, train_step  # noqa: E402

build = sys.argv[1]
model_name, B, T = (sys.argv[2], int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else ("smollm2-135m", 8, 512)
out = tempfile.mkdtemp()
subprocess.run([os.path.join(build, "tests", "gpu_llama_trajectory"), model_name, str(B), str(T), out], check=True)
mx = json.load(open(os.path.join(out, "mxdp_losses.json")))
model = Llama(model_name, max_seq=T).cuda()
order = model.mxdp_order()
init = np.fromfile(os.path.join(out, "init.f32"), dtype=np.float32)
assert init.size == sum(p.numel() for p in order), "init.f32 does not match the model's parameter count"
at = 0
with torch.no_grad():
    for p in order:
        p.copy_(torch.from_numpy(init[at:at + p.numel()]).view_as(p))
        at += p.numel()
batches = np.fromfile(os.path.join(out, "batches.i32"), dtype=np.int32).reshape(20, 2, B, T)
opt = adamw(model, 6e-4)
th = []
for s in range(20):
    x = torch.from_numpy(batches[s, 0]).long().cuda()
    y = torch.from_numpy(batches[s, 1]).long().cuda()
    th.append(train_step(model, model, opt, x, y).item())
worst = max(abs(a - b) / b for a, b in zip(mx, th))
print(f"{model_name} B={B} T={T}")
print("step  mxdp     torch    rel diff")
for s, (a, b) in enumerate(zip(mx, th)):
    print(f"{s + 1:>4}  {a:.4f}  {b:.4f}  {abs(a - b) / b:.4f}")
print(f"worst relative difference {worst:.4f} (limit 0.02); mxdp fell {mx[0]:.3f} -> {mx[-1]:.3f}, torch {th[0]:.3f} -> {th[-1]:.3f}")
ok = worst < 0.02 and mx[-1] < 0.7 * mx[0] and th[-1] < 0.7 * th[0]
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
