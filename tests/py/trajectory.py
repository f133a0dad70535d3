"""What the PyTorch trajectory checks tests/gpu_torch_trajectory.py (GPT-2) and
tests/gpu_llama_trajectory.py (the Llama family) share: bench/ on the import
path, and check(), which runs build/tests/gpu_trajectory (mxdp's initial
weights, 20 batches of the corpus and mxdp's loss after each of 20 optimizer
steps on one GPU), loads those weights into the PyTorch model, trains it on the
same batches with bench/torch_train.py's step (bf16 autocast, clip 1.0) and
fused AdamW at lr 6e-4, and holds the two trajectories to each other: every
step's loss within 2% relative, and both must fall by at least 30%."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from torch_train import adamw, train_step  # noqa: E402

STEPS = 20  # gpu_trajectory's


def check(defaults, configs, make_model):
    """The check for `SCRIPT BUILD_DIR [MODEL B T]` (sys.argv), MODEL B T from
    defaults when left out. configs: the PyTorch presets MODEL must be one of;
    make_model(MODEL, T): the PyTorch model, its parameters in mxdp's order by
    its mxdp_order(). Prints both trajectories; returns the exit status (0 PASS, 1 FAIL)."""
    build = sys.argv[1]
    model_name, B, T = (sys.argv[2], int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else defaults
    if model_name not in configs:
        sys.exit(f"{model_name}: not one of this check's models ({', '.join(sorted(configs))})")
    out = tempfile.mkdtemp()
    subprocess.run([os.path.join(build, "tests", "gpu_trajectory"), model_name, str(B), str(T), out], check=True)
    mx = json.load(open(os.path.join(out, "mxdp_losses.json")))
    model = make_model(model_name, T).cuda()
    order = model.mxdp_order()
    init = np.fromfile(os.path.join(out, "init.f32"), dtype=np.float32)
    assert init.size == sum(p.numel() for p in order), "init.f32 does not match the model's parameter count"
    at = 0
    with torch.no_grad():
        for p in order:
            p.copy_(torch.from_numpy(init[at:at + p.numel()]).view_as(p))
            at += p.numel()
    batches = np.fromfile(os.path.join(out, "batches.i32"), dtype=np.int32).reshape(STEPS, 2, B, T)
    opt = adamw(model, 6e-4)
    th = []
    for s in range(STEPS):
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
    return 0 if ok else 1
