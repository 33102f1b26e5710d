// Process-wide memory settings for the binaries, and buffers of megabytes on huge pages.
#pragma once

#include <cstddef>
#include <vector>

namespace eps {

// Tensor chunks and ZeroMQ frames of megabytes are allocated and freed every
// step. glibc serves such sizes with fresh mmap()s and gives freed memory back
// to the kernel, so every step pays a page fault per 4 KiB touched (measured
// here: 12-17 us per page, the parameter server's largest cost). This serves
// every block from the heap (no mmap), stops trimming it, and uses one arena
// (a frame freed by ZeroMQ's I/O thread is reused by the main thread), so freed
// pages are reused: a 10 M-parameter step's parameter-server share fell from
// 94 % to 58 %. The heap is never trimmed: with a threshold of 1 GiB, the 108 M
// model's worker gave back the gigabytes a step frees at the heap's top and
// faulted them in again, about 100,000 page faults a step. Call once at the
// start of main().
void KeepFreedMemory();

// Asks the kernel to back the 2 MiB pages inside [data, data + bytes) with
// transparent huge pages, where its setting allows it ("madvise", the default
// of Debian and Ubuntu, or "always"). Memory touched for the first time then
// costs a fault per 2 MiB instead of one per 4 KiB: 400 MB of fresh pages took
// 2.1-2.5 s here and 40-300 ms advised. Ranges under 2 MiB are left alone.
void AdviseHugePages(const void* data, size_t bytes);

// A zeroed vector of `n` elements whose pages are advised huge before they are
// touched: for buffers of megabytes that are written once (a chunk's value, an
// optimizer's moments, a restored checkpoint).
template <class T>
std::vector<T> HugeVector(size_t n) {
  std::vector<T> v;
  v.reserve(n);
  AdviseHugePages(v.data(), n * sizeof(T));
  v.resize(n);
  return v;
}

}  // namespace eps
