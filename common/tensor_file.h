// Named tensors as files hold them, and the safetensors format read from bytes
// (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then
// the tensors' bytes. Torch-free, so the coordinator checks an --init_from file
// at start and the worker, export_model and eps_predict read the same way.
// Pure functions; thread-compatible.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/layout.h"
#include "common/status.h"

namespace eps {

// One tensor of an exported model: its spec and its bytes (numel * DTypeSize,
// little-endian, row-major).
struct ExportedTensor {
  TensorSpec spec;
  std::string bytes;
};

// True when `bytes` begins as a safetensors file does: a header length that
// fits, then '{'.
bool LooksLikeSafetensors(const std::string& bytes);

// Parses a safetensors file's bytes (F32 and I64 tensors, in file order, each
// of kind kParameter: the file does not say which are buffers); `metadata`
// (if not null) gets its __metadata__. DataLoss, naming `what` and what is
// wrong: a header length past the bytes or over 100 MB, a header that is not a
// JSON object, a __metadata__ that is not an object of strings, a tensor
// without dtype / shape / data_offsets, another dtype, a shape whose size
// overflows or exceeds the bytes, data_offsets out of the bytes or not of the
// shape's size. Never reads out of `bytes`.
StatusOr<std::vector<ExportedTensor>> ParseSafetensors(const std::string& bytes,
                                                       const std::string& what,
                                                       std::map<std::string, std::string>* metadata);

}  // namespace eps
