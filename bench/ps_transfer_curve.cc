// ps_transfer's --curve set-up: the key pairs (see ps_transfer.h).
#include <stdlib.h>

#include <filesystem>
#include <system_error>

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

}  // namespace ps_transfer
}  // namespace eps
