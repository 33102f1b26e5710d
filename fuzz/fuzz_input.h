// How a fuzz target's input becomes ZeroMQ frames, and the seed corpus back
// into inputs. Frames: a 4-byte little-endian length and that many bytes, over
// and over; the last frame may be short (it takes what is left). Each frame is
// copied into a buffer of its own of exactly its size, as a ZeroMQ frame is,
// so that AddressSanitizer sees every read past its end. Header-only.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "schema/codec.h"

namespace eps {
namespace fuzz {

// Reads an input front to back; past its end every read is empty (0).
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t Byte() { return empty() ? 0 : data_[pos_++]; }
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{Byte()} << (8 * i);
    return v;
  }
  // One frame: its length, then its bytes (fewer when the input ends first).
  Frame NextFrame() {
    const size_t want = U32();
    const size_t n = std::min(want, size_ - std::min(pos_, size_));
    auto block = std::shared_ptr<uint8_t[]>(new uint8_t[n > 0 ? n : 1]);
    if (n > 0) std::memcpy(block.get(), data_ + pos_, n);
    pos_ += n;
    return Frame{block.get(), n, std::shared_ptr<const void>(block, block.get())};
  }
  // Frames until the input ends, at most `max`.
  std::vector<Frame> Frames(size_t max = 64) {
    std::vector<Frame> out;
    while (!empty() && out.size() < max) out.push_back(NextFrame());
    return out;
  }

 private:
  const uint8_t* const data_;
  const size_t size_;
  size_t pos_ = 0;
};

// The inverse of Input::Frames: `frames` as one input.
inline void AppendFrames(const std::vector<Frame>& frames, std::string* out) {
  for (const Frame& f : frames) {
    const uint32_t n = static_cast<uint32_t>(f.size);
    for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(n >> (8 * i)));
    out->append(static_cast<const char*>(f.data), f.size);
  }
}

}  // namespace fuzz
}  // namespace eps
