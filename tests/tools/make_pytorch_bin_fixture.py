#!/usr/bin/env python3
"""make_pytorch_bin_fixture.py: writes tests/fixtures/pytorch-bin/ with torch.save, from the weights
of tests/fixtures/bert-tiny-cls (see tests/fixtures/README.md). Needs torch and transformers.

    python3 tests/tools/make_pytorch_bin_fixture.py [OUT_DIR]   (default: tests/fixtures/pytorch-bin)

writes
  single/    config.json + pytorch_model.bin: torch.save(model.state_dict()) of
             BertForSequenceClassification holding bert-tiny-cls's weights (an OrderedDict with
             _metadata, as transformers saved before safetensors)
  sharded/   config.json + pytorch_model-0000{1,2}-of-00002.bin (plain dicts of contiguous tensors)
             + pytorch_model.bin.index.json, as transformers 4.x's save_pretrained(safe_serialization=False)
  dtypes.bin       tensors of every dtype the reader takes, a scalar, an empty tensor, two views of one
                   storage (one at an offset) and the same tensor under two names
  dtypes.json      their values, as float64 lists (booleans 0/1), with dtypes and shapes
  protocol4.bin    a state dict pickled with protocol 4 (FRAME, SHORT_BINUNICODE, MEMOIZE)
  noncontiguous.bin  a transposed weight (stride [1, 3])
  complex.bin      a complex64 tensor (a dtype the reader refuses)
  legacy.bin       the same small state dict in the legacy (pre-1.6, non-zip) format
Nothing here is run when the files are read: they are data.
"""
import json
import os
import shutil
import sys
from collections import OrderedDict

import torch
from safetensors.torch import load_file
from transformers import BertConfig, BertForSequenceClassification

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(FIXTURES, "pytorch-bin")
    source = os.path.join(FIXTURES, "bert-tiny-cls")
    os.makedirs(out, exist_ok=True)

    # The model as transformers builds it, holding the fixture's weights exactly.
    config = BertConfig.from_pretrained(source)
    model = BertForSequenceClassification(config)
    weights = load_file(os.path.join(source, "model.safetensors"))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected, unexpected
    state = model.state_dict()
    for name, tensor in weights.items():
        assert torch.equal(state[name], tensor), name

    single = os.path.join(out, "single")
    os.makedirs(single, exist_ok=True)
    shutil.copy(os.path.join(source, "config.json"), single)
    torch.save(state, os.path.join(single, "pytorch_model.bin"))

    sharded = os.path.join(out, "sharded")
    os.makedirs(sharded, exist_ok=True)
    shutil.copy(os.path.join(source, "config.json"), sharded)
    names = list(state.keys())
    half = len(names) // 2
    weight_map = {}
    total = 0
    for k, part in enumerate([names[:half], names[half:]]):
        shard = f"pytorch_model-{k + 1:05d}-of-00002.bin"
        torch.save({n: state[n].contiguous() for n in part}, os.path.join(sharded, shard))
        for n in part:
            weight_map[n] = shard
            total += state[n].numel() * state[n].element_size()
    with open(os.path.join(sharded, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")

    base = torch.arange(12, dtype=torch.float32) * 0.25 - 1.0
    shared = torch.linspace(-2.0, 2.0, 6)
    small = OrderedDict()
    small["f32"] = torch.tensor([[1.5, -2.25, 3.0], [0.0, 1e-3, -7.0]])
    small["f64"] = torch.tensor([1.0 / 3.0, -2.5], dtype=torch.float64)
    small["f16"] = torch.tensor([0.5, -65504.0, 6.1e-5, 1.0], dtype=torch.float16)
    small["bf16"] = torch.tensor([1.0, -3.140625, 1e30], dtype=torch.bfloat16)
    small["i64"] = torch.tensor([-(2**40), 7, 2**62], dtype=torch.int64)
    small["i32"] = torch.tensor([-5, 2**31 - 1], dtype=torch.int32)
    small["i16"] = torch.tensor([-300, 300], dtype=torch.int16)
    small["i8"] = torch.tensor([-128, 127], dtype=torch.int8)
    small["u8"] = torch.tensor([0, 255], dtype=torch.uint8)
    small["bool"] = torch.tensor([True, False, True])
    small["scalar"] = torch.tensor(42.0)
    small["empty"] = torch.zeros(0, 4)
    small["view_head"] = base[:4]                # storage offset 0 of a 12-element storage
    small["view_tail"] = base[6:].view(2, 3)      # offset 6 of the same storage
    small["tied_a"] = shared
    small["tied_b"] = shared                      # the same tensor under a second name
    torch.save(small, os.path.join(out, "dtypes.bin"))
    values = {
        name: {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
               "values": t.to(torch.float64).flatten().tolist()}
        for name, t in small.items()
    }
    with open(os.path.join(out, "dtypes.json"), "w") as f:
        json.dump(values, f, indent=1)
        f.write("\n")

    torch.save(OrderedDict(a=torch.tensor([1.0, 2.0]), b=torch.ones(2, 2, dtype=torch.float16)),
               os.path.join(out, "protocol4.bin"), pickle_protocol=4)
    torch.save({"weight": torch.arange(12, dtype=torch.float32).view(4, 3).t()},
               os.path.join(out, "noncontiguous.bin"))
    torch.save({"weight": torch.ones(2, dtype=torch.complex64)}, os.path.join(out, "complex.bin"))
    torch.save(OrderedDict(a=torch.tensor([1.0, 2.0])), os.path.join(out, "legacy.bin"),
               _use_new_zipfile_serialization=False)
    print(f"torch {torch.__version__}: wrote {out}")


if __name__ == "__main__":
    main()
