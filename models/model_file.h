// A user's TorchScript model file, as the coordinator takes it (docs/models.md).
//
// `--model` names a built-in network (mlp, cnn, cnn_bn) or a file: a name that
// contains '/' or ends in ".pt" is a path (IsModelPath). The coordinator reads
// the file once at start, checks that it is a TorchScript archive (without
// libtorch: the coordinator stays torch-free), bounds its size, hashes it and
// hands its bytes to every worker that registers; the worker checks the hash
// and loads it with torch::jit::load.
//
// Pure functions over bytes and one file read; thread-compatible.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"
#include "schema/messages.h"  // kMaxModelBytes

namespace eps {

// True when `--model` names a file rather than a built-in model: it contains
// a '/' or ends in ".pt".
bool IsModelPath(const std::string& model);

// OK when `bytes` is a TorchScript archive as torch.jit.save writes it: a zip
// whose entries include "<dir>/data.pkl" and "<dir>/code/..." or
// "<dir>/constants.pkl". InvalidArgument otherwise, naming what is wrong:
// not a zip, or a zip of another kind (torch.save of a state dict holds
// data.pkl but neither code/ nor constants.pkl). `what` names the file.
[[nodiscard]] Status CheckTorchScriptArchive(const std::string& bytes, const std::string& what);

// A model file read and checked.
struct ModelFile {
  std::string bytes;
  std::string sha256;  // hex
};

// Reads `path` (at most kMaxModelBytes, schema/messages.h), checks it with CheckTorchScriptArchive
// and, when `expected_sha256` is not empty, that its SHA-256 is that (hex,
// either case). NotFound for a missing file; InvalidArgument for the rest,
// each message naming the file as `flag` PATH and, for a mismatch, `pin`.
[[nodiscard]] StatusOr<ModelFile> ReadModelFile(const std::string& path,
                                                const std::string& expected_sha256,
                                                const std::string& flag = "--model",
                                                const std::string& pin = "--model_sha256");

// What an --init_from file is (docs/models.md, "Transfer learning").
enum class InitFileKind {
  kSafetensors,  // model.safetensors: parsed here, torch-free
  kStateDict,    // model.pt: a torch.save zip of a dict name -> tensor, parsed by the workers
  kTorchScript,  // model.script.pt: its named parameters and buffers, loaded by the workers
};

// The kind of `bytes`; InvalidArgument naming `what` for anything else, and for
// a malformed or empty safetensors file.
[[nodiscard]] StatusOr<InitFileKind> CheckInitFile(const std::string& bytes,
                                                   const std::string& what);

// Reads an --init_from file as ReadModelFile reads a model (the same size
// bound, --init_sha256 pinning it) and checks it with CheckInitFile.
[[nodiscard]] StatusOr<ModelFile> ReadInitFile(const std::string& path,
                                               const std::string& expected_sha256);

}  // namespace eps
