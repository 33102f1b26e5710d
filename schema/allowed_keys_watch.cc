#include "schema/allowed_keys_watch.h"

#include <glog/logging.h>

#include "schema/curve.h"

namespace eps {
namespace {

StatusOr<std::set<std::string>> ReadSet(const AllowedKeysWatch::Options& options) {
  EPS_ASSIGN_OR_RETURN(std::vector<std::string> keys, ReadAllowedKeys(options.allowed_keys));
  std::set<std::string> out(keys.begin(), keys.end());
  out.insert(options.always_allowed.begin(), options.always_allowed.end());
  return out;
}

}  // namespace

StatusOr<AllowedKeysWatch> AllowedKeysWatch::Open(Options options, const Clock* clock) {
  EPS_ASSIGN_OR_RETURN(std::set<std::string> keys, ReadSet(options));
  return AllowedKeysWatch(std::move(options), clock, std::move(keys));
}

StatusOr<std::optional<AllowedKeysWatch>> AllowedKeysWatch::ForServer(
    const CurveOptions& curve, const std::string& allowed_keys, const Clock* clock) {
  if (!curve.enabled() || allowed_keys.empty()) return std::optional<AllowedKeysWatch>();
  Options options{allowed_keys, {curve.keys.public_key}, std::chrono::seconds(1)};
  auto watch = Open(options, clock);
  if (watch.ok()) return std::optional<AllowedKeysWatch>(std::move(watch).value());
  // The ZapHandler read them a moment ago: a file being written now (attach.sh adding a key).
  // Every client key is a miss until they read, and a miss reads them again.
  LOG(WARNING) << "cannot read the allowed keys yet (reading them again at the first message): "
               << watch.status().ToString();
  std::set<std::string> own(options.always_allowed.begin(), options.always_allowed.end());
  return std::optional<AllowedKeysWatch>(
      AllowedKeysWatch(std::move(options), clock, std::move(own)));
}

Status AllowedKeysWatch::Revoked() {
  return PermissionDenied(
      "this client's CURVE key was revoked: it is no longer among the job's allowed keys "
      "(--allowed_keys)");
}

AllowedKeysWatch::AllowedKeysWatch(Options options, const Clock* clock, std::set<std::string> keys)
    : options_(std::move(options)), clock_(clock), keys_(std::move(keys)), read_at_(clock->Now()) {}

void AllowedKeysWatch::Reload() {
  read_at_ = clock_->Now();
  auto keys = ReadSet(options_);
  if (!keys.ok()) {
    LOG_EVERY_N(WARNING, 60) << "cannot re-read the allowed keys (serving the last set read): "
                             << keys.status().ToString();
    return;
  }
  if (*keys != keys_) {
    LOG(INFO) << "the allowed keys changed: " << keys->size() << " keys (were " << keys_.size()
              << ")";
  }
  keys_ = std::move(keys).value();
  missed_.clear();
}

bool AllowedKeysWatch::Admits(const std::string& user_id) {
  if (user_id.empty()) return true;
  if (clock_->Now() - read_at_ >= options_.reload_every) Reload();
  if (keys_.count(user_id) > 0) return true;
  // A key the ZAP handler admitted but this set lacks was added since the last read, or
  // revoked: read again now, once per key until the next periodic read.
  if (missed_.insert(user_id).second) {
    Reload();
    if (keys_.count(user_id) > 0) return true;
  }
  ++refused_;
  return false;
}

}  // namespace eps
