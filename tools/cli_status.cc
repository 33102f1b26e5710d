// `elasticps status`: asks a job's coordinator for its status (a
// JobStatusRequest, token-checked like every message) and prints it.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/format.h"
#include "schema/channel.h"
#include "schema/curve.h"
#include "tools/cli.h"

namespace eps {
namespace {

using Json = nlohmann::json;

std::string Duration(double s) {
  if (s < 0) return "-";
  if (s < 60) return StrFormat("%.1fs", s);
  const long t = static_cast<long>(s);
  if (t < 3600) return std::to_string(t / 60) + "m" + StrFormat("%02.0fs", double(t % 60));
  return std::to_string(t / 3600) + "h" + StrFormat("%02.0fm", double(t / 60 % 60));
}

std::string Bytes(uint64_t b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  double v = double(b);
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  return StrFormat(u == 0 ? "%.0f" : "%.1f", v) + " " + units[u];
}

// Columns padded to their widest cell.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

// An events.jsonl line, or the line as text when it does not parse.
Json EventOf(const std::string& line) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : Json(line);
}

Json ToJson(const JobStatusReply& s) {
  Json j = {{"job_id", s.job_id},
            {"model", s.model},
            {"phase", s.phase},
            {"paused", s.paused},
            {"hold_from", s.hold_from},
            {"cpu_kernels", s.cpu_kernels},
            {"step", s.step},
            {"steps", s.steps},
            {"epoch", s.epoch},
            {"loss", s.has_loss ? Json(s.loss) : Json(nullptr)},
            {"lr", s.lr},
            {"samples_per_s", s.samples_per_s},
            {"eta_s", s.eta_s >= 0 ? Json(s.eta_s) : Json(nullptr)},
            {"elapsed_s", s.elapsed_s},
            {"virtual_workers", s.virtual_workers},
            {"batch_per_vw", s.batch_per_vw},
            {"assignment_epoch", s.assignment_epoch.value()},
            {"test_accuracy", s.evaluated ? Json(s.test_accuracy) : Json(nullptr)},
            {"rejected_messages", s.rejected_messages},
            {"map_generation", s.map_generation},
            {"resharding", s.resharding}};
  j["workers"] = Json::array();
  for (const WorkerStatus& w : s.workers) {
    j["workers"].push_back({{"worker", w.worker.value()},
                            {"host", w.host},
                            {"pid", w.pid},
                            {"device", w.device_kind},
                            {"cpu_kernels", w.cpu_kernels},
                            {"state", w.state},
                            {"vw_lo", w.vw_lo},
                            {"vw_hi", w.vw_hi},
                            {"seconds_per_vw", w.seconds_per_vw},
                            {"since_heartbeat_s", w.since_heartbeat_s},
                            {"steps_contributed", w.steps_contributed},
                            {"metrics_address", w.metrics_address}});
  }
  j["shards"] = Json::array();
  for (const ShardStatus& sh : s.shards) {
    j["shards"].push_back(
        {{"shard", sh.shard.value()},
         {"role", sh.role},
         {"address", sh.address},
         {"registered", sh.registered},
         {"version", sh.version.value()},
         {"durable_step", sh.durable_step.value()},
         {"since_checkpoint_s", sh.since_checkpoint_s >= 0 ? Json(sh.since_checkpoint_s)
                                                           : Json(nullptr)},
         {"bytes_in", sh.bytes_in},
         {"bytes_out", sh.bytes_out},
         {"metrics_address", sh.metrics_address}});
  }
  j["events"] = Json::array();
  for (const std::string& e : s.events) j["events"].push_back(EventOf(e));
  return j;
}

// The shards' table, headed by the shard map's generation.
void PrintShards(const JobStatusReply& s) {
  std::printf("shard map generation %llu%s\n", static_cast<unsigned long long>(s.map_generation),
              s.resharding ? ", a move in progress" : "");
  std::vector<std::vector<std::string>> rows = {{"SHARD", "ROLE", "VERSION", "DURABLE",
                                                 "CHECKPOINT", "BYTES IN", "BYTES OUT", "ADDRESS",
                                                 "METRICS"}};
  for (const ShardStatus& sh : s.shards) {
    rows.push_back({"s" + std::to_string(sh.shard.value()), sh.role,
                    sh.registered ? std::to_string(sh.version.value()) : "not registered",
                    sh.durable_step.value() >= 0 ? std::to_string(sh.durable_step.value()) : "-",
                    sh.since_checkpoint_s >= 0 ? Duration(sh.since_checkpoint_s) + " ago" : "-",
                    Bytes(sh.bytes_in), Bytes(sh.bytes_out), sh.address,
                    sh.metrics_address.empty() ? "-" : sh.metrics_address});
  }
  PrintTable(rows);
}

void PrintTables(const JobStatusReply& s) {
  std::string head = "job " + s.job_id + " (" + s.model + ")  " + s.phase +
                     (s.paused ? " (paused)" : "") +
                     (s.hold_from >= 0 && s.phase != "held"
                          ? " (hold from step " + std::to_string(s.hold_from) + ")"
                          : "") +
                     "  step " + std::to_string(s.step) + "/" + std::to_string(s.steps) +
                     "  epoch " + StrFormat("%.2f", s.epoch);
  if (s.has_loss) head += "  loss " + StrFormat("%.4f", s.loss);
  head += "  lr " + StrFormat("%.4g", s.lr) + "  samples/s " + StrFormat("%.0f", s.samples_per_s) +
          "  ETA " + Duration(s.eta_s) + "  elapsed " + Duration(s.elapsed_s);
  if (s.evaluated) head += "  test accuracy " + StrFormat("%.4f", s.test_accuracy);
  std::printf("%s\n%u VWs x %u samples, assignment epoch %llu, CPU kernels %s\n\n", head.c_str(),
              s.virtual_workers, s.batch_per_vw,
              static_cast<unsigned long long>(s.assignment_epoch.value()),
              s.cpu_kernels.empty() ? "-" : s.cpu_kernels.c_str());
  std::vector<std::vector<std::string>> rows = {
      {"WORKER", "STATE", "HOST", "PID", "DEVICE", "VWS", "S/VW", "HEARD", "STEPS", "METRICS"}};
  for (const WorkerStatus& w : s.workers) {
    const bool live = w.state == "ready" || w.state == "registered";
    rows.push_back({"w" + std::to_string(w.worker.value()), w.state, w.host,
                    std::to_string(w.pid),
                    w.device_kind == "cpu" && !w.cpu_kernels.empty() ? "cpu " + w.cpu_kernels
                                                                     : w.device_kind,
                    w.vw_hi > w.vw_lo ? "[" + std::to_string(w.vw_lo) + "," +
                                            std::to_string(w.vw_hi) + ")"
                                      : "-",
                    w.seconds_per_vw > 0 ? StrFormat("%.4f", w.seconds_per_vw) : "-",
                    live ? Duration(w.since_heartbeat_s) + " ago" : "-",
                    std::to_string(w.steps_contributed),
                    w.metrics_address.empty() ? "-" : w.metrics_address});
  }
  PrintTable(rows);
  std::printf("\n");
  PrintShards(s);
  if (s.events.empty()) return;
  std::printf("\nRECENT EVENTS\n");
  rows.clear();
  for (const std::string& line : s.events) {
    const Json e = EventOf(line);
    if (!e.is_object()) {
      rows.push_back({"", line});
      continue;
    }
    std::string when;
    if (e.contains("t") && e["t"].is_number()) {
      const std::time_t t = static_cast<std::time_t>(e["t"].get<double>());
      char buf[32];
      std::strftime(buf, sizeof(buf), "%H:%M:%S", std::localtime(&t));
      when = buf;
    }
    std::string rest;
    for (const auto& [k, v] : e.items()) {
      if (k == "event" || k == "t") continue;
      rest += (rest.empty() ? "" : " ") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
    }
    rows.push_back({when, e.value("event", std::string("?")), rest});
  }
  PrintTable(rows);
}

StatusOr<std::string> ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line) || line.empty())
    return NotFound(path + " is missing or empty");
  return line;
}

}  // namespace

int RunStatusCommand(const StatusCommandOptions& o) {
  std::string name = "elasticps status";
  if (o.hold) name = *o.hold ? "elasticps hold" : "elasticps release";
  if (o.shards) name = "elasticps shards";
  zmq::context_t context(1);
  zmq::context_t* ctx = &context;
  std::string endpoint = o.coordinator, token_file = o.token_file;
  std::string secret_key = o.curve_secret_key, server_key = o.curve_server_key;
  if (!o.run_dir.empty() && secret_key.empty() &&
      ReadFirstLine(o.run_dir + "/keys/status.key").ok()) {  // local.sh --secure
    secret_key = o.run_dir + "/keys/status.key";
    if (server_key.empty()) server_key = o.run_dir + "/keys/server.pub";
  }
  if (!o.run_dir.empty()) {
    auto addr = ReadFirstLine(o.run_dir + "/coordinator.addr");
    if (!addr.ok()) {
      std::fprintf(stderr, "%s: %s: is a job running in %s?\n", name.c_str(),
                   addr.status().message().c_str(), o.run_dir.c_str());
      return 1;
    }
    if (endpoint.empty()) endpoint = *addr;
    if (token_file.empty()) token_file = o.run_dir + "/token";
  }
  if (endpoint.empty()) {
    std::fprintf(stderr, "%s: --run-dir or --coordinator is required\n%s\n", name.c_str(),
                 o.shards ? kShardsUsage : o.hold ? kHoldUsage : kStatusUsage);
    return 2;
  }
  if (!secret_key.empty() && server_key.empty()) {
    std::fprintf(stderr, "%s: --curve-secret-key needs --curve-server-key\n", name.c_str());
    return 2;
  }
  auto credentials = LoadJobCredentials(token_file, secret_key, server_key);
  if (!credentials.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), credentials.status().ToString().c_str());
    return 2;
  }
  Channel::Options options;
  options.curve = credentials->curve;
  auto channel = Channel::Connect(ctx, endpoint, options);
  if (!channel.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), channel.status().ToString().c_str());
    return 2;
  }
  Body request = JobStatusRequest{o.events};
  if (o.hold) request = JobControl{*o.hold, o.from_step};
  if (o.remove_shard) request = JobControl{false, 0, ShardId(*o.remove_shard)};
  auto reply = Call(channel->get(), Envelope{credentials->token, std::move(request)},
                    std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000)));
  if (!reply.ok()) {
    std::string why = reply.status().ToString();
    if (reply.status().code() == StatusCode::kDeadlineExceeded) {
      why = "no answer from " + endpoint + " within " + StrFormat("%g", o.timeout_s) +
            " s: is the job running?";
      if (!o.run_dir.empty() && ReadFirstLine(o.run_dir + "/result.json").ok())
        why += " (" + o.run_dir + "/result.json is there: the job has finished)";
    }
    std::fprintf(stderr, "%s: %s\n", name.c_str(), why.c_str());
    return 1;
  }
  if (auto* error = std::get_if<ErrorReply>(&reply->body)) {
    std::fprintf(stderr, "%s: refused: %s\n", name.c_str(), error->ToStatus().ToString().c_str());
    return 1;
  }
  auto* status = std::get_if<JobStatusReply>(&reply->body);
  if (status == nullptr) {
    std::fprintf(stderr, "%s: %s answered with a %s message\n", name.c_str(), endpoint.c_str(),
                 BodyName(reply->body));
    return 1;
  }
  if (o.json) {
    std::printf("%s\n", ToJson(*status).dump(2).c_str());
  } else if (o.shards) {
    PrintShards(*status);
  } else {
    PrintTables(*status);
  }
  return 0;
}


}  // namespace eps
