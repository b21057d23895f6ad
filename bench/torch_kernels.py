#!/usr/bin/env python3
"""torch_kernels.py: what PyTorch's own kernels take at bert-large's shapes, as the yardstick for ours.

Two questions that `anatomy profile` alone cannot answer, measured with PyTorch's cuBLAS and SDPA on the same GPU:

1. Attention. For each SDPA backend PyTorch offers (flash, the one Trainer runs in bf16 with dropout; cuDNN, the
   one anatomy runs; memory-efficient), one layer's forward and backward, with dropout 0.1 and without. Query, key
   and value are laid out as BERT's SDPA attention makes them: [batch, seq, heads, head_dim] memory, viewed as
   [batch, heads, seq, head_dim].
2. The query/key/value products, three of [tokens, hidden] x [hidden, hidden], as anatomy runs them (a
   strided-batched product; three products adding into one input gradient) against one product over the three
   stacked (which needs query, key and value interleaved per token).

Each time is the mean of --runs calls after 3 of warm-up, between CUDA events; bf16 operands, float32
accumulation (the weight gradients' output in float32, as anatomy keeps gradients).

    python3 bench/torch_kernels.py [--batch 64] [--seq-len 512] [--runs 20] [--json FILE]
"""
import argparse
import json
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--json", help="write every figure here")
    a = p.parse_args()
    if a.hidden % a.heads:
        p.error(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}")
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        sys.exit(f"torch_kernels.py: PyTorch is needed ({e})")
    if not torch.cuda.is_available():
        sys.exit("torch_kernels.py: no CUDA device (this script measures PyTorch's GPU kernels)")

    def timed(fn):
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(a.runs):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / a.runs

    dev, bf16 = "cuda", torch.bfloat16
    B, L, H, heads = a.batch, a.seq_len, a.hidden, a.heads
    T, D = B * L, H // heads
    figures = dict(gpu=torch.cuda.get_device_name(0), torch=torch.__version__, batch=B, seq_len=L, hidden=H,
                   heads=heads, dropout=a.dropout, runs=a.runs, attention=[], products=[])

    def bshd():  # BERT's layout: [B, L, heads, D] memory, seen as [B, heads, L, D]
        return torch.randn(B, L, heads, D, device=dev, dtype=bf16).transpose(1, 2).requires_grad_()

    q, k, v = bshd(), bshd(), bshd()
    d_out = torch.randn(B, L, heads, D, device=dev, dtype=bf16).transpose(1, 2)
    attention_flops = 4 * B * heads * L * L * D  # forward: two products
    print(f"{figures['gpu']}, PyTorch {torch.__version__}; batch {B}, {L} tokens, {heads} heads of {D}\n")
    print("| SDPA backend | dropout | forward ms | backward ms | forward + backward ms | forward TFLOP/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    for name, backend in backends:
        for p_drop in (a.dropout, 0.0):
            def forward():
                return F.scaled_dot_product_attention(q, k, v, dropout_p=p_drop)

            def forward_backward():
                forward().backward(d_out)

            try:
                with sdpa_kernel(backend):
                    fwd = timed(forward)
                    both = timed(forward_backward)
            except RuntimeError as e:  # the backend does not take these shapes on this GPU
                print(f"| {name} | {p_drop} | not available: {str(e).splitlines()[0][:80]} | | | |")
                continue
            figures["attention"].append(dict(backend=name, dropout=p_drop, forward_ms=fwd, backward_ms=both - fwd))
            print(f"| {name} | {p_drop} | {fwd:.3f} | {both - fwd:.3f} | {both:.3f} | "
                  f"{attention_flops / fwd / 1e9:.0f} |")
    del q, k, v, d_out

    x = torch.randn(T, H, device=dev, dtype=bf16)
    w3 = torch.randn(3, H, H, device=dev, dtype=bf16)  # three [out, in] weights, adjacent
    w = w3.reshape(3 * H, H)
    d3 = torch.randn(3, T, H, device=dev, dtype=bf16)  # their output gradients, one plane each
    d = torch.randn(T, 3 * H, device=dev, dtype=bf16)  # the same, interleaved per token
    x3 = x.unsqueeze(0).expand(3, T, H)
    dx = torch.empty(T, H, device=dev, dtype=bf16)

    def three_input_gradients():
        torch.mm(d3[0], w3[0], out=dx)
        for i in (1, 2):
            dx.addmm_(d3[i], w3[i])

    cases = [
        ("forward", "strided-batched, 3 x [T,H]x[H,H]", lambda: torch.bmm(x3, w3.transpose(1, 2))),
        ("forward", "one [T,H]x[H,3H]", lambda: x @ w.t()),
        ("weight gradient", "strided-batched, 3 x [H,T]x[T,H]",
         lambda: torch.bmm(d3.transpose(1, 2), x3, out_dtype=torch.float32)),
        ("weight gradient", "one [3H,T]x[T,H]", lambda: torch.mm(d.t(), x, out_dtype=torch.float32)),
        ("input gradient", "three [T,H]x[H,H], adding", three_input_gradients),
        ("input gradient", "one [T,3H]x[3H,H]", lambda: d @ w),
    ]
    flops = 2 * T * H * H * 3
    print(f"\nQuery/key/value products, T = {T} tokens, H = {H}\n")
    print("| product | as | ms | TFLOP/s |")
    print("| --- | --- | ---: | ---: |")
    for what, how, fn in cases:
        ms = timed(fn)
        figures["products"].append(dict(product=what, layout=how, ms=ms))
        print(f"| {what} | {how} | {ms:.4f} | {flops / ms / 1e9:.0f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
