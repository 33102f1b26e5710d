// ps_transfer's --curve set-up: the key pairs, and the cipher's own rate (see ps_transfer.h).
#include <sodium.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

#include "bench/ps_transfer.h"

namespace eps {
namespace ps_transfer {

StatusOr<BenchCurve> MakeBenchCurve() {
  BenchCurve out;
  char tmpl[] = "/tmp/eps-bench-curve-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Internal("mkdtemp failed");
  out.dir = tmpl;
  Status st = [&]() -> Status {
    EPS_ASSIGN_OR_RETURN(CurveKeyPair server, GenerateCurveKeyPair());
    EPS_ASSIGN_OR_RETURN(CurveKeyPair clients, GenerateCurveKeyPair());
    EPS_RETURN_IF_ERROR(WriteCurveKeyPair(out.dir, "server", server));
    EPS_RETURN_IF_ERROR(WriteCurveKeyPair(out.dir, "client", clients));
    out.server.keys = server;
    out.client.keys = clients;
    out.client.server_key = server.public_key;
    return OkStatus();
  }();
  if (!st.ok()) {
    std::error_code ignored;
    std::filesystem::remove_all(out.dir, ignored);
    return st;
  }
  return out;
}

void ReportCipherCost(size_t bytes, size_t frame_bytes) {
  if (sodium_init() < 0 || bytes == 0 || frame_bytes == 0) return;
  unsigned char pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES];
  unsigned char key[crypto_box_BEFORENMBYTES], nonce[crypto_box_NONCEBYTES] = {};
  crypto_box_keypair(pk, sk);
  if (crypto_box_beforenm(key, pk, sk) != 0) return;
  const size_t frames = (bytes + frame_bytes - 1) / frame_bytes;
  std::vector<unsigned char> plain(frame_bytes, 1), sealed(frame_bytes + crypto_box_MACBYTES);
  double seal_ms = 1e30, open_ms = 1e30;
  bool opened = true;
  for (int round = 0; round < 3; ++round) {
    double seal = 0, open = 0;
    for (size_t f = 0; f < frames; ++f) {
      const size_t n = std::min(frame_bytes, bytes - f * frame_bytes);
      auto t0 = Clock::now();
      crypto_box_easy_afternm(sealed.data(), plain.data(), n, nonce, key);
      seal += MsSince(t0);
      t0 = Clock::now();
      opened &= crypto_box_open_easy_afternm(plain.data(), sealed.data(), n + crypto_box_MACBYTES,
                                             nonce, key) == 0;
      open += MsSince(t0);
    }
    seal_ms = std::min(seal_ms, seal);
    open_ms = std::min(open_ms, open);
  }
  if (!opened) {
    std::fprintf(stderr, "cipher: a sealed frame did not open\n");
    return;
  }
  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf(
      "cipher: XSalsa20-Poly1305 (libsodium crypto_box_afternm, CURVE's) on one core, %.1f MB in "
      "%zu-byte frames: seal %.0f MB/s, open %.0f MB/s; a push + pull seals and opens %.1f MB each "
      "way: %.1f ms of cipher CPU\n",
      mb, frame_bytes, mb / seal_ms * 1e3, mb / open_ms * 1e3, mb, 2 * (seal_ms + open_ms));
  std::printf(
      "{\"mode\":\"cipher\",\"bytes\":%zu,\"frame_bytes\":%zu,\"seal_ms\":%.2f,\"open_ms\":%.2f,"
      "\"push_pull_cipher_ms\":%.2f}\n",
      bytes, frame_bytes, seal_ms, open_ms, 2 * (seal_ms + open_ms));
}

}  // namespace ps_transfer
}  // namespace eps
