#include "common/files.h"

#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace eps {

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out.good()) return Unavailable("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return Unavailable("cannot rename " + tmp + " to " + path);
  return OkStatus();
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  if (path.empty()) return std::string();
  std::ifstream in(path);
  if (!in) return NotFound("cannot read the token file " + path);
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) return InvalidArgument("the token file " + path + " is empty");
  return token;
}

StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Internal("cannot read " + path);
  return bytes;
}

StatusOr<TempFolder> TempFolder::Create(const std::string& base, const std::string& prefix) {
  std::string tmpl = base + "/" + prefix + ".XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr)
    return Internal("cannot make a folder " + tmpl + ": " + std::strerror(errno));
  return TempFolder(std::move(tmpl));
}

TempFolder::~TempFolder() {
  if (path_.empty()) return;
  std::error_code ec;  // nothing better to do than leave it
  std::filesystem::remove_all(path_, ec);
}

}  // namespace eps
