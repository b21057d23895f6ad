// torch_checkpoint.h: a state dict saved by torch.save (pytorch_model.bin),
// read without Python and without running anything the file names.
//
// torch.save (PyTorch >= 1.6) writes a zip archive (zip_archive.h) whose
// entries share one folder name: <a>/data.pkl, the pickled state dict;
// <a>/data/<key>, the raw bytes of each storage; <a>/byteorder ("little");
// <a>/version and others this reader does not need. In data.pkl each tensor is
// torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride,
// requires_grad, backward_hooks[, metadata]), where the storage is a
// persistent id ('storage', torch.FloatStorage, key, location, numel).
//
// data.pkl is read by a restricted unpickler, not by Python's: it knows only
// the opcodes a state dict's pickle uses (protocols 2 to 5) and only these
// globals, each of which it interprets itself:
//   collections.OrderedDict;
//   torch._utils._rebuild_tensor_v2, _rebuild_tensor, _rebuild_parameter,
//     _rebuild_parameter_with_state;
//   the storage classes torch.FloatStorage, DoubleStorage, HalfStorage,
//     BFloat16Storage, LongStorage, IntStorage, ShortStorage, CharStorage,
//     ByteStorage and BoolStorage.
// Any other global (os.system, builtins.eval, a model class) is refused with
// an error that names the file and the global; nothing is ever called.
#pragma once

#include <string>

#include "anatomy/io/safetensors.h"

namespace anatomy::io {

// Reads `path` and returns its tensors as a safetensors-like view (name ->
// dtype, shape, bytes within the file): the readers of SafetensorsFile then
// work unchanged. Tensors must be dense, little-endian and contiguous (a
// tensor that shares a storage with others at an offset is fine). Errors name
// the file and the entry, tensor or global at fault; a legacy (pre-1.6,
// non-zip) torch.save file is refused with how to convert it.
SafetensorsFile open_torch_checkpoint(const std::string& path);

}  // namespace anatomy::io
