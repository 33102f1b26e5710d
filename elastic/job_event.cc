#include "elastic/job_event.h"

#include "common/format.h"

#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace eps {
namespace {

using Json = nlohmann::ordered_json;  // "event", "t", "step" first, then the fields in order
using E = JobEvent;

template <typename... F>
struct Overload : F... {
  using F::operator()...;
};
template <typename... F>
Overload(F...) -> Overload<F...>;

Json Ranges(const std::vector<WorkerRange>& ranges) {
  Json out = Json::array();
  for (const WorkerRange& r : ranges)
    out.push_back({{"worker", r.worker.value()}, {"lo", r.lo}, {"hi", r.hi}});
  return out;
}

// "w0:[0,4) w2:[4,8)": the non-empty ranges, or "none".
std::string RangesText(const std::vector<WorkerRange>& ranges) {
  std::ostringstream os;
  bool first = true;
  for (const WorkerRange& r : ranges) {
    if (r.lo == r.hi) continue;
    os << (first ? "" : " ") << "w" << r.worker << ":[" << r.lo << "," << r.hi << ")";
    first = false;
  }
  return first ? "none" : os.str();
}

std::string MovedText(const std::vector<WorkerRange>& moved, std::optional<Step> step) {
  if (moved.empty()) return "it held no unfinished VWs";
  std::ostringstream os;
  os << "its VWs";
  for (const WorkerRange& r : moved) os << " [" << r.lo << "," << r.hi << ")";
  os << " of step " << step.value_or(Step(0)) << " move";
  return os.str();
}

const char* DeadCauseName(E::WorkerDead::Cause c) {
  switch (c) {
    case E::WorkerDead::Cause::kMissedHeartbeats:
      return "missed_heartbeats";
    case E::WorkerDead::Cause::kShardMoved:
      return "shard_moved";
    case E::WorkerDead::Cause::kResharded:
      break;
  }
  return "resharded";
}

Json ShardIds(const std::vector<ShardId>& shards) {
  Json out = Json::array();
  for (ShardId s : shards) out.push_back(s.value());
  return out;
}

std::string ShardList(const std::vector<ShardId>& shards) {
  std::string out = "{";
  for (size_t i = 0; i < shards.size(); ++i)
    out += (i ? "," : "") + std::to_string(shards[i].value());
  return out + "}";
}

long long StepOf(const JobEvent& e) {
  return static_cast<long long>(e.step.value_or(Step(0)).value());
}

}  // namespace

const char* EventKind(const JobEvent& event) {
  return std::visit(Overload{
                        [](const E::ShardRegistered&) { return "shard_registered"; },
                        [](const E::WorkerJoined&) { return "worker_joined"; },
                        [](const E::WorkerReregistered&) { return "worker_reregistered"; },
                        [](const E::WorkerRefused&) { return "worker_refused"; },
                        [](const E::WorkerReady&) { return "worker_ready"; },
                        [](const E::WorkerLeft&) { return "worker_left"; },
                        [](const E::WorkerDead&) { return "worker_dead"; },
                        [](const E::HostBackedOff&) { return "host_backed_off"; },
                        [](const E::ModelAccepted&) { return "model_accepted"; },
                        [](const E::Initializing&) { return "initializing"; },
                        [](const E::Assignment&) { return "assignment"; },
                        [](const E::Replan&) { return "replan"; },
                        [](const E::SpeedForgotten&) { return "speed_forgotten"; },
                        [](const E::SpeedRefused&) { return "speed_refused"; },
                        [](const E::RangeRecomputed&) { return "range_recomputed"; },
                        [](const E::RangeConfirmed&) { return "range_confirmed"; },
                        [](const E::StepCompleted&) { return "step_completed"; },
                        [](const E::Paused&) { return "paused"; },
                        [](const E::Resumed&) { return "resumed"; },
                        [](const E::Evaluated&) { return "evaluated"; },
                        [](const E::Progress&) { return "progress"; },
                        [](const E::CheckpointDurable&) { return "checkpoint_durable"; },
                        [](const E::CheckpointFailed&) { return "checkpoint_failed"; },
                        [](const E::RollingBack&) { return "rolling_back"; },
                        [](const E::StartingOver&) { return "starting_over"; },
                        [](const E::RolledBack&) { return "rolled_back"; },
                        [](const E::CoordinatorResuming&) { return "coordinator_resuming"; },
                        [](const E::CoordinatorResumed&) { return "coordinator_resumed"; },
                        [](const E::Resharding&) { return "resharding"; },
                        [](const E::Resharded&) { return "resharded"; },
                        [](const E::ReshardAbandoned&) { return "reshard_abandoned"; },
                        [](const E::JobFinished&) { return "job_finished"; },
                        [](const E::JobFailed&) { return "job_failed"; },
                    },
                    event.what);
}

std::string EventJson(const JobEvent& event, double wall_seconds) {
  Json j;
  j["event"] = EventKind(event);
  j["t"] = wall_seconds;
  if (event.step) j["step"] = event.step->value();
  std::visit(Overload{
                 [&](const E::ShardRegistered& e) {
                   j["shard"] = e.shard.value();
                   j["address"] = e.address;
                   j["durable_step"] = e.durable_step.value();
                   j["restarted"] = e.restarted;
                 },
                 [&](const E::WorkerJoined& e) {
                   j["worker"] = e.worker.value();
                   j["host"] = e.host;
                   j["pid"] = e.pid;
                   j["device_kind"] = e.device_kind;
                 },
                 [&](const E::WorkerReregistered& e) {
                   j["worker"] = e.worker.value();
                   j["host"] = e.host;
                 },
                 [&](const E::WorkerRefused& e) {
                   j["worker"] = e.worker.value();
                   j["host"] = e.host;
                   j["device_kind"] = e.device_kind;
                   j["error"] = e.error;
                   using Cause = E::WorkerRefused::Cause;
                   j["cause"] = e.cause == Cause::kDeviceKind      ? "device_kind"
                                : e.cause == Cause::kDataFingerprint ? "data_fingerprint"
                                : e.cause == Cause::kTooManyWorkers  ? "too_many_workers"
                                : e.cause == Cause::kCpuKernels      ? "cpu_kernels"
                                                                     : "host_backed_off";
                 },
                 [&](const E::WorkerReady& e) { j["worker"] = e.worker.value(); },
                 [&](const E::WorkerLeft& e) {
                   j["worker"] = e.worker.value();
                   j["reason"] = e.reason;
                   j["moved"] = Ranges(e.moved);
                   j["host_fault"] = e.host_fault;
                 },
                 [&](const E::HostBackedOff& e) {
                   j["host"] = e.host;
                   j["failures"] = e.failures;
                   j["backoff_s"] = e.backoff_s;
                   j["reason"] = e.reason;
                 },
                 [&](const E::WorkerDead& e) {
                   j["worker"] = e.worker.value();
                   j["cause"] = DeadCauseName(e.cause);
                   if (e.cause == E::WorkerDead::Cause::kMissedHeartbeats) {
                     j["silent_ms"] = e.silent_ms;
                   } else if (e.cause == E::WorkerDead::Cause::kShardMoved) {
                     j["shard"] = e.shard.value();
                   }
                   j["moved"] = Ranges(e.moved);
                 },
                 [&](const E::ModelAccepted& e) {
                   j["parameters"] = e.parameters;
                   j["chunks"] = e.chunks;
                   j["steps"] = e.steps;
                   j["train_samples"] = e.train_samples;
                   j["test_samples"] = e.test_samples;
                 },
                 [&](const E::Initializing& e) { j["worker"] = e.worker.value(); },
                 [&](const E::Assignment& e) {
                   j["epoch"] = e.epoch.value();
                   j["ranges"] = Ranges(e.ranges);
                 },
                 [&](const E::Replan& e) {
                   Json speeds = Json::object();
                   for (const auto& [id, s] : e.seconds_per_vw) {
                     speeds[std::to_string(id.value())] = s ? Json(*s) : Json(nullptr);
                   }
                   j["seconds_per_vw"] = std::move(speeds);
                   j["trigger"] = ReplanTriggerName(e.trigger);
                   if (e.trigger_worker) j["trigger_worker"] = e.trigger_worker->value();
                   j["steps_since_assignment"] = e.steps_since_assignment;
                   j["reason"] = e.reason;
                 },
                 [&](const E::SpeedForgotten& e) {
                   j["worker"] = e.worker.value();
                   j["idle_steps"] = e.idle_steps;
                 },
                 [&](const E::SpeedRefused& e) {
                   j["worker"] = e.worker.value();
                   j["error"] = e.error;
                 },
                 [&](const E::RangeRecomputed& e) {
                   j["worker"] = e.worker.value();
                   j["lo"] = e.lo;
                   j["hi"] = e.hi;
                 },
                 [&](const E::RangeConfirmed& e) {
                   j["worker"] = e.worker.value();
                   j["lo"] = e.lo;
                   j["hi"] = e.hi;
                 },
                 [&](const E::StepCompleted& e) {
                   if (e.has_loss) j["loss"] = e.loss;
                   j["lr"] = e.lr;
                   j["epoch"] = e.epoch;
                   j["ranges"] = Ranges(e.ranges);
                 },
                 [&](const E::Paused& e) {
                   j["cause"] = e.cause == E::Paused::Cause::kNoWorker   ? "no_worker"
                                : e.cause == E::Paused::Cause::kCapacity ? "capacity"
                                                                         : "hold";
                   j["detail"] = e.detail;
                 },
                 [&](const E::Resumed&) {},
                 [&](const E::Evaluated& e) {
                   j["accuracy"] = e.accuracy;
                   j["loss"] = e.loss;
                 },
                 [&](const E::Progress& e) {
                   j["steps"] = e.steps;
                   j["epoch"] = e.epoch;
                   j["loss"] = e.loss;
                   j["samples_per_s"] = e.samples_per_s;
                   j["workers"] = e.workers;
                   j["paused"] = e.paused;
                   j["ranges"] = Ranges(e.ranges);
                 },
                 [&](const E::CheckpointDurable& e) {
                   j["shard"] = e.shard.value();
                   if (e.write_ms > 0) {
                     j["blocking_ms"] = e.blocking_ms;
                     j["write_ms"] = e.write_ms;
                   }
                 },
                 [&](const E::CheckpointFailed& e) {
                   j["shard"] = e.shard.value();
                   j["error"] = e.error;
                 },
                 [&](const E::RollingBack& e) {
                   j["shard"] = e.shard.value();
                   j["shard_checkpoint"] = e.shard_checkpoint.value();
                 },
                 [&](const E::StartingOver& e) {
                   j["shard"] = e.shard ? Json(e.shard->value()) : Json(nullptr);
                   j["shard_had_state"] = e.shard_had_state;
                 },
                 [&](const E::RolledBack&) {},
                 [&](const E::CoordinatorResuming& e) {
                   j["job_id"] = e.job_id;
                   j["steps"] = e.steps;
                   j["epoch"] = e.epoch.value();
                 },
                 [&](const E::CoordinatorResumed&) {},
                 [&](const E::Resharding& e) {
                   j["generation"] = e.generation;
                   j["from"] = ShardIds(e.from);
                   j["to"] = ShardIds(e.to);
                   j["chunks"] = e.chunks;
                   j["partitions"] = e.partitions;
                   j["bytes"] = e.bytes;
                 },
                 [&](const E::Resharded& e) {
                   j["generation"] = e.generation;
                   j["shards"] = ShardIds(e.shards);
                   j["removed"] = ShardIds(e.removed);
                   j["bytes_in"] = e.bytes_in;
                   j["seconds"] = e.seconds;
                 },
                 [&](const E::ReshardAbandoned& e) {
                   j["generation"] = e.generation;
                   j["reason"] = e.reason;
                   j["retry"] = e.retry;
                 },
                 [&](const E::JobFinished& e) {
                   j["final_loss"] = e.final_loss;
                   if (e.evaluated) {
                     j["test_accuracy"] = e.test_accuracy;
                     j["test_loss"] = e.test_loss;
                   }
                   j["params_sha256"] = e.params_sha256;
                 },
                 [&](const E::JobFailed& e) {
                   j["code"] = StatusCodeName(e.code);
                   j["error"] = e.error;
                 },
             },
             event.what);
  // Strings from the network may hold bytes that are not UTF-8: replaced, never a throw.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

EventLine EventText(const JobEvent& event) {
  using Sink = EventLine::Sink;
  const long long step = StepOf(event);
  return std::visit(
      Overload{
          [&](const E::ShardRegistered& e) -> EventLine {
            std::ostringstream os;
            os << "shard " << e.shard << (e.restarted ? " restarted" : " registered") << " at "
               << e.address << " (newest checkpoint: step " << e.durable_step << ")";
            return {Sink::kInfo, os.str()};
          },
          [&](const E::WorkerJoined& e) -> EventLine {
            return {Sink::kInfo,
                    "worker " + std::to_string(e.worker.value()) + " registered from " + e.host};
          },
          [&](const E::WorkerReregistered& e) -> EventLine {
            return {Sink::kVerbose, "worker " + std::to_string(e.worker.value()) + " from " +
                                        e.host + " registered again"};
          },
          [&](const E::WorkerRefused& e) -> EventLine {
            return {Sink::kWarning, "refused worker " + std::to_string(e.worker.value()) +
                                        " from " + e.host + ": " + e.error};
          },
          [&](const E::WorkerReady& e) -> EventLine {
            return {Sink::kInfo, "worker " + std::to_string(e.worker.value()) + " is ready"};
          },
          [&](const E::WorkerLeft& e) -> EventLine {
            return {Sink::kWarning,
                    "worker " + std::to_string(e.worker.value()) +
                        (e.host_fault ? " cannot run on its host and left (" : " left (") +
                        e.reason + "); " + MovedText(e.moved, event.step)};
          },
          [&](const E::HostBackedOff& e) -> EventLine {
            return {Sink::kWarning,
                    "host " + e.host + " backed off for " +
                        StrFormat("%.0f s after %u failures in a row", e.backoff_s, e.failures) +
                        " (last: " + e.reason + ")"};
          },
          [&](const E::WorkerDead& e) -> EventLine {
            std::string why;
            switch (e.cause) {
              case E::WorkerDead::Cause::kMissedHeartbeats:
                why = "missed heartbeats for " + std::to_string(e.silent_ms) + " ms";
                break;
              case E::WorkerDead::Cause::kShardMoved:
                why = "must register again: shard " + std::to_string(e.shard.value()) + " moved";
                break;
              case E::WorkerDead::Cause::kResharded:
                return {Sink::kInfo, "worker " + std::to_string(e.worker.value()) +
                                         " registers again to learn the new shard map"};
            }
            return {Sink::kWarning, "worker " + std::to_string(e.worker.value()) + " " + why +
                                        "; " + MovedText(e.moved, event.step)};
          },
          [&](const E::ModelAccepted& e) -> EventLine {
            std::ostringstream os;
            os << "model: " << e.parameters << " parameters in " << e.chunks << " chunks; "
               << e.steps << " steps; " << e.train_samples << " training and " << e.test_samples
               << " test samples";
            return {Sink::kInfo, os.str()};
          },
          [&](const E::Initializing& e) -> EventLine {
            return {Sink::kInfo,
                    "worker " + std::to_string(e.worker.value()) + " initializes the parameters"};
          },
          [&](const E::Assignment& e) -> EventLine {
            return {Sink::kInfo, "assignment epoch " + std::to_string(e.epoch.value()) +
                                     " from step " + std::to_string(step) + ": " +
                                     RangesText(e.ranges)};
          },
          [&](const E::Replan& e) -> EventLine {
            std::ostringstream est;
            for (const auto& [id, s] : e.seconds_per_vw)
              est << " w" << id << "=" << (s ? std::to_string(*s * 1000).substr(0, 6) + "ms" : "?");
            return {Sink::kInfo, "re-planning VWs by measured speed (seconds per VW:" + est.str() +
                                     "): " + e.reason};
          },
          [&](const E::SpeedForgotten& e) -> EventLine {
            return {Sink::kInfo, "worker " + std::to_string(e.worker.value()) + " held no VW for " +
                                     std::to_string(e.idle_steps) +
                                     " steps: its speed is measured again"};
          },
          [&](const E::SpeedRefused& e) -> EventLine {
            return {Sink::kWarning, "worker " + std::to_string(e.worker.value()) + ": " + e.error};
          },
          [&](const E::RangeRecomputed& e) -> EventLine {
            return {Sink::kInfo, StrFormat("worker %u recomputes [%u,%u) of step %lld",
                                        e.worker.value(), e.lo, e.hi, step)};
          },
          [&](const E::RangeConfirmed& e) -> EventLine {
            return {Sink::kVerbose, StrFormat("worker %u confirmed [%u,%u) of step %lld",
                                           e.worker.value(), e.lo, e.hi, step)};
          },
          [&](const E::StepCompleted&) -> EventLine {
            return {Sink::kVerbose, StrFormat("step %lld complete", step)};
          },
          [&](const E::Paused& e) -> EventLine {
            return {Sink::kStdout, StrFormat("paused at step %lld: ", step) + e.detail};
          },
          [&](const E::Resumed&) -> EventLine {
            return {Sink::kStdout, StrFormat("resumed at step %lld", step)};
          },
          [&](const E::Evaluated& e) -> EventLine {
            return {Sink::kStdout, StrFormat("eval  step %lld: test accuracy %.4f, test loss %.4f",
                                          step, e.accuracy, e.loss)};
          },
          [&](const E::Progress& e) -> EventLine {
            return {Sink::kStdout,
                    StrFormat("step %lld/%lld  epoch %.2f  loss %.4f  samples/s %.0f  workers %zu  ",
                           step, (long long)e.steps, e.epoch, e.loss, e.samples_per_s, e.workers) +
                        (e.paused ? "paused" : RangesText(e.ranges))};
          },
          [&](const E::CheckpointDurable& e) -> EventLine {
            return {Sink::kVerbose,
                    StrFormat("shard %u holds step %lld durably", e.shard.value(), step)};
          },
          [&](const E::CheckpointFailed& e) -> EventLine {
            return {Sink::kWarning, "shard " + std::to_string(e.shard.value()) +
                                        " could not write a checkpoint: " + e.error};
          },
          [&](const E::RollingBack& e) -> EventLine {
            return {Sink::kStdout,
                    StrFormat("rolling back to step %lld: shard %u restarted from its checkpoint of "
                           "step %lld",
                           step, e.shard.value(), (long long)e.shard_checkpoint.value())};
          },
          [&](const E::StartingOver& e) -> EventLine {
            if (!e.shard) return {Sink::kInfo, "no shard holds the initial values: starting over"};
            return {Sink::kStdout,
                    StrFormat("starting over from the initial values: shard %u restarted %s, and no "
                           "checkpoint is held by every shard",
                           e.shard->value(),
                           e.shard_had_state ? "from its checkpoint" : "without state")};
          },
          [&](const E::RolledBack&) -> EventLine {
            if (step < 0)
              return {Sink::kInfo, "every shard is empty: initializing the parameters again"};
            return {Sink::kInfo,
                    StrFormat("every shard serves version %lld: replaying from there", step)};
          },
          [&](const E::CoordinatorResuming& e) -> EventLine {
            return {Sink::kInfo, "resuming job '" + e.job_id + "' (" + std::to_string(e.steps) +
                                     " steps, assignment epoch " + std::to_string(e.epoch.value()) +
                                     "): waiting for every shard to report its version"};
          },
          [&](const E::CoordinatorResumed&) -> EventLine {
            return {Sink::kStdout,
                    StrFormat("resumed at step %lld after a coordinator restart", step)};
          },
          [&](const E::Resharding& e) -> EventLine {
            return {
                Sink::kStdout,
                StrFormat("resharding at step %lld: shards %s -> %s (map %llu): %zu chunks "
                          "(%.1f MB) and %zu row partitions move",
                          step, ShardList(e.from).c_str(), ShardList(e.to).c_str(),
                          (unsigned long long)e.generation, e.chunks, e.bytes / 1e6, e.partitions)};
          },
          [&](const E::Resharded& e) -> EventLine {
            return {Sink::kStdout,
                    StrFormat("resharded at step %lld: shards %s (map %llu), %.1f MB moved in "
                              "%.2f s",
                              step, ShardList(e.shards).c_str(), (unsigned long long)e.generation,
                              e.bytes_in / 1e6, e.seconds)};
          },
          [&](const E::ReshardAbandoned& e) -> EventLine {
            return {Sink::kWarning,
                    StrFormat("reshard to map %llu abandoned%s: ", (unsigned long long)e.generation,
                              e.retry ? " (tried again at the next step)" : "") +
                        e.reason};
          },
          [&](const E::JobFinished& e) -> EventLine {
            return {
                Sink::kStdout,
                StrFormat("result: steps %lld  final loss %.4f  test accuracy %s  params_sha256 %s",
                       step, e.final_loss,
                       e.evaluated ? std::to_string(e.test_accuracy).c_str() : "n/a",
                       e.params_sha256.c_str())};
          },
          [&](const E::JobFailed& e) -> EventLine {
            return {Sink::kError, "job failed: " + Status(e.code, e.error).ToString()};
          },
      },
      event.what);
}

}  // namespace eps
