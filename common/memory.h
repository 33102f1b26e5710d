// Process-wide memory settings for the binaries.
#pragma once

namespace eps {

// Tensor chunks and ZeroMQ frames of megabytes are allocated and freed every
// step. glibc serves such sizes with fresh mmap()s and gives freed memory back
// to the kernel, so every step pays a page fault per 4 KiB touched (measured
// here: 12-17 us per page, the parameter server's largest cost). This serves
// every block from the heap (no mmap), stops trimming it, and uses one arena
// (a frame freed by ZeroMQ's I/O thread is reused by the main thread), so freed
// pages are reused: a 10 M-parameter step's parameter-server share fell from
// 94 % to 58 %. Call once at the start of main().
void KeepFreedMemory();

}  // namespace eps
