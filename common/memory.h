// Process-wide memory settings for the binaries.
#pragma once

namespace eps {

// Tensor chunks and ZeroMQ frames of megabytes are allocated and freed every
// step. glibc serves such sizes with fresh mmap()s and gives freed memory back
// to the kernel, so every step pays a page fault per 4 KiB touched (measured
// here: 12-17 us per page, the parameter server's largest cost). This keeps
// blocks up to 32 MiB (glibc's maximum threshold) on the heap and stops trimming
// it, so freed pages are reused. Call once at the start of main().
void KeepFreedMemory();

}  // namespace eps
