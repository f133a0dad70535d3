"""PyTorch's side of bench/compare_adamw.sh: torch.optim.AdamW(fused=True) over
GPT-2 124M's parameters (fp32, the same 124,475,904 elements as mxdp's GPT-2
with its vocabulary padded to 50304), then a torch.compile'd MXFP8 quantize
(32-element blocks, E8M0 scales rounded up as TransformerEngine does, E4M3
elements) of the same number of fp32 values. Prints one JSON line.
  python3 bench/torch_adamw.py [--params N] [--iters 50]
"""
import argparse
import json
import statistics

import torch


def gpt2_shapes(vocab=50304, ctx=1024, d=768, layers=12):
    s = [(vocab, d), (ctx, d)]
    for _ in range(layers):
        s += [(d,), (d,), (d, 3 * d), (3 * d,), (d, d), (d,), (d,), (d,), (d, 4 * d), (4 * d,), (4 * d, d), (d,)]
    return s + [(d,), (d,)]


@torch.compile
def mxfp8_quantize(x):
    b = x.view(-1, 32)
    amax = b.abs().amax(dim=1, keepdim=True)
    bits = (amax * (1.0 / 448.0)).view(torch.int32)
    e = (bits >> 23) & 0xFF
    e = torch.where(((bits & 0x7FFFFF) != 0) & (e < 254), e + 1, e)  # ceil(log2(amax / 448)) + 127
    mult = ((254 - e) << 23).view(torch.float32)  # 2^(127 - e)
    q = (b * mult).to(torch.float8_e4m3fn)
    return q.view(-1), e.to(torch.uint8).view(-1)


def time_ms(fn, iters, reps=7):
    for _ in range(5):
        fn()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / iters)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=0, help="0: GPT-2 124M's shapes")
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    dev = torch.device("cuda")
    shapes = gpt2_shapes() if args.params == 0 else [(args.params,)]
    params = [torch.nn.Parameter(torch.randn(s, device=dev) * 0.02) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p)
    n = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=1e-6, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    adamw_ms = time_ms(opt.step, args.iters)
    x = torch.randn(n // 32 * 32, device=dev) * 0.02
    quant_ms = time_ms(lambda: mxfp8_quantize(x), args.iters)
    print(json.dumps({"system": "pytorch", "what": "adamw+mxfp8", "device": torch.cuda.get_device_name(),
                      "torch": torch.__version__, "params": n, "tensors": len(params),
                      "adamw_ms": round(adamw_ms, 4), "mxfp8_quantize_ms": round(quant_ms, 4),
                      "ms": round(adamw_ms + quant_ms, 4)}))


if __name__ == "__main__":
    main()
