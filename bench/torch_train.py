"""What the PyTorch benches bench/torch_gpt.py and bench/torch_llama.py share,
and the trajectory checks tests/gpu_torch_trajectory.py and
tests/gpu_llama_trajectory.py with them: mxdp's init, its optimizer in
PyTorch, one training step, and how a bench times its steps.
"""
import math, statistics, time

import torch


def mxdp_init(model, n_layer, residual):
    """mxdp's init of the GPT-2 and the Llama (gpt_init_param, llama_init_param): every 2-D
    weight normal(0, 0.02), those whose names end in one of residual (the
    residual projections) normal(0, 0.02/sqrt(2 n_layer)), biases 0; norms keep theirs."""
    for name, p in model.named_parameters():
        if p.dim() == 2:
            std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(residual) else 0.02
            torch.nn.init.normal_(p, 0.0, std)
        elif name.endswith("bias"):
            torch.nn.init.zeros_(p)


def adamw(model, lr):
    """Fused AdamW as mxdp's: betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D weights only."""
    params = list(model.parameters())
    return torch.optim.AdamW([{"params": [p for p in params if p.dim() == 2], "weight_decay": 0.1},
                              {"params": [p for p in params if p.dim() != 2], "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


def train_step(model, step_model, opt, x, y, clip=True):
    """One step: bf16 autocast forward, backward, clip at 1.0 (unless clip is False), AdamW. Returns the loss."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = step_model(x, y)
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def time_steps(step, warmup, steps):
    """Times step() (one training step, returning its loss as a tensor) after warmup
    steps, and resets the peak memory statistics after the warm-up, so that
    torch.cuda.max_memory_allocated() then reports the peak of training steps
    (weights and optimizer state included). Returns (ms_per_step, ms_synced, the
    last loss): ms_synced is the median of steps run alone, host and GPU idle in
    turn; ms_per_step the mean over steps run as a training loop runs them, each
    loss read one step late, so the host submits step i+1 while the GPU runs step i."""
    for _ in range(warmup):
        step().item()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step().item()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    prev = None
    for _ in range(steps):
        loss = step().detach()
        if prev is not None:
            prev.item()
        prev = loss
    last = prev.item()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps * 1e3, statistics.median(times) * 1e3, last
