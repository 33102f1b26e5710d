// CURVE keys (ZeroMQ's CurveZMQ: Curve25519 key pairs, Z85 text) and the files
// that hold them (docs/security.md).
//
// A key pair is two files: NAME.key holds the secret key (mode 0600) and
// NAME.pub the public key, each one Z85 line of 40 characters. An allowed-keys
// set is a file of public keys, one a line (a line starting with '#' is a
// comment), or a folder
// whose *.pub files hold one each. Plain functions of values and files: thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace eps {

struct CurveKeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

// The CURVE settings of a process's channels. Without a secret key: plain TCP,
// as before CURVE existed.
struct CurveOptions {
  // This process's key pair: the server's when it binds, the client's when it connects.
  CurveKeyPair keys;
  // Connect: the server's public key (Z85). Bind: unused.
  std::string server_key;
  // Bind: the ZAP domain the server's handshakes are checked under.
  std::string zap_domain = "elasticps";

  bool enabled() const { return !keys.secret_key.empty(); }
};

// A fresh key pair. Internal if libzmq was built without CURVE.
StatusOr<CurveKeyPair> GenerateCurveKeyPair();

// `text` (surrounding white space trimmed) if it is a Z85 key; InvalidArgument if not.
StatusOr<std::string> ParseCurveKey(const std::string& text);

// Writes DIR/NAME.key (0600) and DIR/NAME.pub, creating DIR (0700) when it is
// missing. AlreadyExists if either is there: a key pair is never overwritten.
Status WriteCurveKeyPair(const std::string& dir, const std::string& name, const CurveKeyPair& keys);

// The key pair of the secret key in `path` (the public key is derived from it).
StatusOr<CurveKeyPair> ReadCurveSecretKey(const std::string& path);

// The public key in `path` (a .pub file, or a .key file: its public key).
StatusOr<std::string> ReadCurvePublicKey(const std::string& path);

// The public keys a file (one a line) or a folder (*.pub) lists. InvalidArgument
// names the line or file that holds no key; NotFound if `path` is missing.
StatusOr<std::vector<std::string>> ReadAllowedKeys(const std::string& path);

// CurveOptions from the paths of a binary's flags: `secret_key_file` empty is
// CURVE off (then `server_key_file` must be empty too); `server_key_file` empty
// with a secret key: the server is this process's own key pair (the job's
// servers share one).
StatusOr<CurveOptions> LoadCurveOptions(const std::string& secret_key_file,
                                        const std::string& server_key_file);

// What a job's process proves itself with: the job's token (ReadTokenFile,
// common/files.h: empty file name, no token) and its CURVE settings
// (LoadCurveOptions), from the paths of its --token_file, --curve_secret_key
// and --curve_server_key flags. The first error names the file.
struct JobCredentials {
  std::string token;
  CurveOptions curve;
};
StatusOr<JobCredentials> LoadJobCredentials(const std::string& token_file,
                                            const std::string& secret_key_file,
                                            const std::string& server_key_file);

}  // namespace eps
