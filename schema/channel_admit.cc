// AdmitIncoming (schema/channel.h). A file of its own: it logs through glog,
// which a program that links Channel but never admits messages (bench/ps_transfer,
// whose --log_dir would clash with glog's) must not pull in.
#include <glog/logging.h>

#include "schema/allowed_keys_watch.h"
#include "schema/channel.h"

namespace eps {

Status AdmitIncoming(const Channel::Incoming& in, AllowedKeysWatch* keys, Rejections* rejections,
                     const char* from) {
  // Rejections are counted; their log lines are rate-limited (common/rejections.h).
  if (keys != nullptr && !keys->Admits(in.user_id)) {
    if (rejections->Record(in.peer, RejectReason::kRevoked))
      LOG(WARNING) << "refused a message from a revoked CURVE key " << in.user_id;
    return AllowedKeysWatch::Revoked();
  }
  if (in.envelope.ok()) return OkStatus();
  const Status& st = in.envelope.status();
  if (st.code() == StatusCode::kUnauthenticated) {  // the channel's token check (Decode)
    if (rejections->Record(in.peer, RejectReason::kWrongToken))
      LOG(WARNING) << "refused a message with a wrong job token" << from;
  } else if (rejections->Record(in.peer, RejectReason::kBadEnvelope)) {
    LOG(WARNING) << "bad message" << from << ": " << st.ToString();
  }
  return st;
}

}  // namespace eps
