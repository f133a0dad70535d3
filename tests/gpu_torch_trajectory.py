"""GPT-2 on the GPU against PyTorch: 20 optimizer steps from mxdp's own initial
weights on the same batches (written by tests/gpu_trajectory), PyTorch with
bf16 autocast and fused AdamW, the same hyperparameters. Both compute in bf16
with fp32 accumulation but round in different places (autocast keeps
LayerNorm and the loss in fp32), so the trajectories agree within a tolerance:
every step's loss within 2% relative, and both must fall by at least 30%
(tests/py/trajectory.py holds them to it).

    python3 tests/gpu_torch_trajectory.py BUILD_DIR [MODEL B T]
"""
import os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
from trajectory import check  # noqa: E402  (also puts bench/ on the path)
from torch_gpt import CONFIGS, GPT  # noqa: E402

sys.exit(check(("gpt2-124m", 16, 1024), CONFIGS, lambda name, T: GPT(*CONFIGS[name])))
