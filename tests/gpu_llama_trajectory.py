"""The GPU Llama against PyTorch: 20 optimizer steps from mxdp's own initial
weights on the same batches (written by tests/gpu_trajectory), a
PyTorch Llama (bench/torch_llama.py's torchtitan-style model, eager) with bf16
autocast and fused AdamW, the same hyperparameters (constant lr 6e-4, clip
1.0, weight decay 0.1 on 2-D weights). Both compute in bf16 with fp32
accumulation but round in different places (autocast keeps RMSNorm, the
residual stream and the loss in fp32; mxdp keeps a bf16 residual stream), so
the trajectories agree within a tolerance: every step's loss within 2%
relative (GPT-2's bound, tests/gpu_torch_trajectory.py), and both must fall
by at least 30% (tests/py/trajectory.py holds them to it).

    python3 tests/gpu_llama_trajectory.py BUILD_DIR [MODEL B T]
"""
import os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
from trajectory import check  # noqa: E402  (also puts bench/ on the path)
from torch_llama import CONFIGS, Llama  # noqa: E402

sys.exit(check(("smollm2-135m", 8, 512), CONFIGS, lambda name, T: Llama(name, max_seq=T)))
