// printf-style formatting into a std::string (until C++20's std::format).
#pragma once

#include <string>

namespace eps {

// The text printf(format, ...) would print, whatever its length.
std::string StrFormat(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace eps
