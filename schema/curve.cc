#include "schema/curve.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/files.h"

namespace eps {
namespace {

constexpr size_t kZ85KeyChars = 40;

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

StatusOr<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Creates `path` with `text` and `mode`, failing if it exists.
Status CreateNew(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST) return AlreadyExists(path + " exists: a key pair is never overwritten");
    return Unavailable("cannot create " + path + ": " + std::strerror(errno));
  }
  const bool ok = ::fchmod(fd, mode) == 0 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok) return Unavailable("cannot write " + path + ": " + std::strerror(saved));
  return OkStatus();
}

}  // namespace

StatusOr<CurveKeyPair> GenerateCurveKeyPair() {
  char pub[kZ85KeyChars + 1], sec[kZ85KeyChars + 1];
  if (zmq_curve_keypair(pub, sec) != 0)
    return Internal(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
  return CurveKeyPair{pub, sec};
}

StatusOr<std::string> ParseCurveKey(const std::string& text) {
  const std::string key = Trim(text);
  uint8_t bytes[32];
  if (key.size() != kZ85KeyChars || zmq_z85_decode(bytes, key.c_str()) == nullptr)
    return InvalidArgument("not a CURVE key (40 characters of Z85)");
  return key;
}

Status WriteCurveKeyPair(const std::string& dir, const std::string& name,
                         const CurveKeyPair& keys) {
  if (name.empty() || name.find('/') != std::string::npos || name[0] == '.')
    return InvalidArgument("a key name is a plain file name, got '" + name + "'");
  std::error_code error;
  if (std::filesystem::create_directories(dir, error)) {
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, error);
  }
  if (error) return Unavailable("cannot create the folder " + dir + ": " + error.message());
  const std::string base = dir + "/" + name;
  struct stat st;
  if (::stat((base + ".pub").c_str(), &st) == 0)
    return AlreadyExists(base + ".pub exists: a key pair is never overwritten");
  EPS_RETURN_IF_ERROR(CreateNew(base + ".key", keys.secret_key + "\n", 0600));
  return CreateNew(base + ".pub", keys.public_key + "\n", 0644);
}

StatusOr<CurveKeyPair> ReadCurveSecretKey(const std::string& path) {
  EPS_ASSIGN_OR_RETURN(std::string text, ReadWhole(path));
  auto secret = ParseCurveKey(text);
  if (!secret.ok()) return secret.status().WithContext(path);
  char pub[kZ85KeyChars + 1];
  if (zmq_curve_public(pub, secret->c_str()) != 0)
    return InvalidArgument(path + ": " + zmq_strerror(zmq_errno()));
  return CurveKeyPair{pub, *secret};
}

StatusOr<std::string> ReadCurvePublicKey(const std::string& path) {
  if (EndsWith(path, ".key")) {
    EPS_ASSIGN_OR_RETURN(CurveKeyPair pair, ReadCurveSecretKey(path));
    return pair.public_key;
  }
  EPS_ASSIGN_OR_RETURN(std::string text, ReadWhole(path));
  auto key = ParseCurveKey(text);
  if (!key.ok()) return key.status().WithContext(path);
  return key;
}

StatusOr<std::vector<std::string>> ReadAllowedKeys(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return NotFound("allowed keys " + path + ": " + std::strerror(errno));
  std::vector<std::string> keys;
  if (S_ISDIR(st.st_mode)) {
    DIR* d = ::opendir(path.c_str());
    if (d == nullptr) return NotFound("cannot list " + path + ": " + std::strerror(errno));
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name[0] != '.' && EndsWith(name, ".pub")) names.push_back(name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      auto key = ReadCurvePublicKey(path + "/" + name);
      // A file removed between the listing and the read is a key revoked meanwhile.
      if (!key.ok() && key.status().code() == StatusCode::kNotFound) continue;
      if (!key.ok()) return key.status();
      keys.push_back(*key);
    }
    return keys;
  }
  EPS_ASSIGN_OR_RETURN(std::string text, ReadWhole(path));
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    line = Trim(line);
    if (line.empty() || line[0] == '#') continue;  // not at the end of a line: Z85 has '#'
    auto key = ParseCurveKey(line);
    if (!key.ok()) return key.status().WithContext(path + ":" + std::to_string(n));
    keys.push_back(*key);
  }
  return keys;
}

StatusOr<CurveOptions> LoadCurveOptions(const std::string& secret_key_file,
                                        const std::string& server_key_file) {
  CurveOptions o;
  if (secret_key_file.empty()) {
    if (!server_key_file.empty())
      return InvalidArgument("--curve_server_key needs --curve_secret_key (this process's key)");
    return o;
  }
  if (!zmq_has("curve")) return FailedPrecondition("this libzmq is built without CURVE");
  EPS_ASSIGN_OR_RETURN(o.keys, ReadCurveSecretKey(secret_key_file));
  if (server_key_file.empty()) {
    o.server_key = o.keys.public_key;
  } else {
    EPS_ASSIGN_OR_RETURN(o.server_key, ReadCurvePublicKey(server_key_file));
  }
  return o;
}

StatusOr<JobCredentials> LoadJobCredentials(const std::string& token_file,
                                            const std::string& secret_key_file,
                                            const std::string& server_key_file) {
  JobCredentials c;
  EPS_ASSIGN_OR_RETURN(c.token, ReadTokenFile(token_file));
  EPS_ASSIGN_OR_RETURN(c.curve, LoadCurveOptions(secret_key_file, server_key_file));
  return c;
}

}  // namespace eps
