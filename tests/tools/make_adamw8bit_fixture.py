#!/usr/bin/env python3
"""make_adamw8bit_fixture.py: the quantization maps of bitsandbytes' 8-bit
optimizers, written to tests/fixtures/optim/dynamic_maps.txt for
tests/test_adamw_8bit.cpp.

bitsandbytes' Optimizer8bit.fill_qmap takes the first moment's map from
functional.create_dynamic_map(signed=True) and the second's from
create_dynamic_map(signed=False) (max_exponent_bits=7, total_bits=8). This
script re-derives that function without torch, rounding every operation to
float32 where torch computes in float32:

  torch.linspace(0.1, 1, k, dtype=float32), CPU: step = (end - start) / (k - 1)
  in float32; element i is start + step * i for i < k // 2, else
  end - step * (k - 1 - i), each rounded once (a fused multiply-add).
  means = (b[:-1] + b[1:]) / 2.0                (float32)
  scale * means, scale = 10 ** (e) a Python number, cast to float32 first
  (a CPU scalar operand of a float32 tensor is used as float32).

When torch and bitsandbytes are importable it also calls the real
create_dynamic_map and fails unless both maps agree bit for bit.

With bitsandbytes importable it also writes adamw8bit_steps.txt beside the
maps: bitsandbytes' own 8-bit AdamW update (its CPU kernel) over four steps.

Usage: python3 tests/tools/make_adamw8bit_fixture.py [output path]
"""
import math
import os
import struct
import sys
from fractions import Fraction


def f32(x):
    """x rounded to the nearest float32 (returned as a Python float)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def linspace_f32(start, end, steps):
    # step is one float32 division; each element is start + step * i (first
    # half) or end - step * (steps - 1 - i) rounded once, as a fused
    # multiply-add: that is what torch's CPU kernel returns (checked against
    # torch 2.15 with ATEN_CPU_CAPABILITY default, avx2 and avx512). The exact
    # value has fewer than 40 significant bits here, so float() holds it exactly
    # and f32 rounds once.
    start, end = f32(start), f32(end)
    step = f32(f32(end - start) / (steps - 1))
    halfway = steps // 2
    out = []
    for i in range(steps):
        if i < halfway:
            out.append(f32(float(Fraction(start) + Fraction(step) * i)))
        else:
            out.append(f32(float(Fraction(end) - Fraction(step) * (steps - i - 1))))
    return out


def create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    data = []
    non_sign_bits = total_bits - 1
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    assert additional_items == 0  # the optimizers' setting: no extra linear items
    for i in range(max_exponent_bits):
        fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed
                             else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        boundaries = linspace_f32(0.1, 1, fraction_items)
        means = [f32(f32(a + b) / 2.0) for a, b in zip(boundaries[:-1], boundaries[1:])]
        scale = f32(10 ** (-(max_exponent_bits - 1) + i))
        data += [f32(scale * m) for m in means]
        if signed:
            data += [f32(-scale * m) for m in means]
    data.append(0.0)
    data.append(1.0)
    assert len(data) == 2 ** total_bits
    data.sort()
    return data


def check_against_bitsandbytes(maps):
    try:
        import bitsandbytes.functional as F  # noqa: F401
    except Exception as e:  # no torch / bitsandbytes here: the re-derivation stands alone
        print(f"bitsandbytes not importable ({type(e).__name__}: {e}); re-derivation only", file=sys.stderr)
        return "re-derivation only (bitsandbytes not importable)"
    import bitsandbytes
    import torch
    for name, signed in (("signed", True), ("unsigned", False)):
        real = F.create_dynamic_map(signed=signed).tolist()
        ours = maps[name]
        diff = [i for i in range(256) if bits(real[i]) != bits(ours[i])]
        if diff:
            raise SystemExit(f"{name} map differs from bitsandbytes at {len(diff)} entries, first {diff[0]}: "
                             f"{real[diff[0]]!r} vs {ours[diff[0]]!r}")
    return f"checked bit for bit against bitsandbytes {bitsandbytes.__version__} / torch {torch.__version__}"


# The step reference: bitsandbytes' 8-bit "adam" update as its CPU backend
# computes it (_optimizer_update_8bit_blockwise_cpu: float32 torch math), with
# states quantized by its default backend's quantize_blockwise (the nearest map
# entry, by midpoints), on one tensor of 600 elements (blocks of 256, 256, 88)
# for four steps. Not the native CPU quantizer: that one is a binary search
# that can miss the nearest entry (it stores 0.0 as 2.1e-5 in the signed map),
# where the default and triton backends take the nearest. Block 0 has
# gradients near 1e-3, block 1 near 1, block 2 a mix with exact zeros.
STEP_N, STEP_COUNT = 600, 4
STEP_LR, STEP_BETA1, STEP_BETA2, STEP_EPS, STEP_WD = 1e-3, 0.9, 0.999, 1e-8, 0.01


def step_inputs():
    state = 12345

    def uniform():  # a small LCG, in [-1, 1)
        nonlocal state
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        return (state >> 11) / 2**52 - 1.0

    param = [f32(0.5 * uniform()) for _ in range(STEP_N)]
    grads = []
    for _ in range(STEP_COUNT):
        g = []
        for i in range(STEP_N):
            u = uniform()
            if i < 256: g.append(f32(1e-3 * u))
            elif i < 512: g.append(f32(u))
            else: g.append(0.0 if i % 5 == 0 else f32(10.0 ** (-4 + (i % 4)) * u))
        grads.append(g)
    return param, grads


def write_step_reference(path, provenance):
    import torch
    import bitsandbytes.functional as F
    param, grads = step_inputs()
    p = torch.tensor(param, dtype=torch.float32)
    blocks = (STEP_N + 255) // 256
    s1 = torch.zeros(STEP_N, dtype=torch.uint8)
    s2 = torch.zeros(STEP_N, dtype=torch.uint8)
    a1 = torch.zeros(blocks, dtype=torch.float32)
    a2 = torch.zeros(blocks, dtype=torch.float32)
    q1, q2 = F.create_dynamic_map(signed=True), F.create_dynamic_map(signed=False)
    hexes = lambda xs: " ".join(f"{bits(x):08x}" for x in xs)

    def quantize(values, code):  # bitsandbytes/backends/default/ops.py quantize_blockwise
        out, absmax = torch.empty(STEP_N, dtype=torch.uint8), torch.empty(blocks, dtype=torch.float32)
        for b in range(blocks):
            block = values[256 * b:256 * (b + 1)]
            am = block.abs().max()
            scaled = torch.clamp(block * (1.0 / am.clamp(min=1e-38)), -1, 1)
            out[256 * b:256 * (b + 1)] = torch.bucketize(scaled, (code[:-1] + code[1:]) / 2).to(torch.uint8)
            absmax[b] = am
        return out, absmax

    def dequantize(state, absmax, code):
        return code[state.long()] * absmax.repeat_interleave(256)[:STEP_N]

    with open(path, "w") as f:
        f.write(f"# bitsandbytes' 8-bit adam update (CPU backend math, default-backend quantize_blockwise) on "
                f"{STEP_N} elements, {STEP_COUNT} steps,\n")
        f.write(f"# lr {STEP_LR} betas ({STEP_BETA1}, {STEP_BETA2}) eps {STEP_EPS} weight_decay {STEP_WD}; {provenance}\n")
        f.write("# lines: param0, then per step: grad, param, state1, state2 (bytes), absmax1, absmax2; floats as hex bits\n")
        f.write(f"param0 {hexes(param)}\n")
        for k in range(STEP_COUNT):
            g = torch.tensor(grads[k], dtype=torch.float32)
            m, v = dequantize(s1, a1, q1), dequantize(s2, a2, q2)
            m.mul_(STEP_BETA1).add_(g, alpha=1.0 - STEP_BETA1)
            v.mul_(STEP_BETA2).addcmul_(g, g, value=1.0 - STEP_BETA2)
            correction1 = 1.0 - STEP_BETA1 ** (k + 1)
            correction2 = math.sqrt(1.0 - STEP_BETA2 ** (k + 1))
            denom = (v.sqrt() / correction2).add_(STEP_EPS)
            p.mul_(1.0 - STEP_LR * STEP_WD)
            p.addcdiv_(m, denom, value=-STEP_LR / correction1)
            s1, a1 = quantize(m, q1)
            s2, a2 = quantize(v, q2)
            f.write(f"grad {hexes(grads[k])}\n")
            f.write(f"param {hexes(p.tolist())}\n")
            f.write("state1 " + " ".join(str(b) for b in s1.tolist()) + "\n")
            f.write("state2 " + " ".join(str(b) for b in s2.tolist()) + "\n")
            f.write(f"absmax1 {hexes(a1.tolist())}\n")
            f.write(f"absmax2 {hexes(a2.tolist())}\n")
    print(f"wrote {path}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "fixtures", "optim", "dynamic_maps.txt")
    maps = {"signed": create_dynamic_map(True), "unsigned": create_dynamic_map(False)}
    provenance = check_against_bitsandbytes(maps)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write("# bitsandbytes create_dynamic_map(signed=True) and (signed=False): index, signed, unsigned\n")
        f.write("# as float32 bit patterns (hex) and decimals; made by tests/tools/make_adamw8bit_fixture.py,\n")
        f.write(f"# {provenance}\n")
        for i in range(256):
            s, u = maps["signed"][i], maps["unsigned"][i]
            f.write(f"{i} {bits(s):08x} {bits(u):08x} {s!r} {u!r}\n")
    print(f"wrote {out} ({provenance})")
    if provenance.startswith("checked"):
        write_step_reference(os.path.join(os.path.dirname(out), "adamw8bit_steps.txt"), provenance)


if __name__ == "__main__":
    main()
