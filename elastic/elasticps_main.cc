// elasticps: the command line for people operating a job.
//
//   elasticps status --run-dir DIR [--json] [--events N]
//   elasticps status --coordinator tcp://HOST:PORT --token-file FILE [--json] [--events N]
//                    [--curve-secret-key FILE --curve-server-key FILE]
//   elasticps keygen --out DIR [--name NAME]
//
// `status` asks the job's coordinator (a JobStatusRequest, token-checked like
// every message) and prints the job, its workers, its shards and the newest
// events as tables, or the reply as one JSON object (--json). Flags may be
// spelled with dashes or underscores. Exit codes: 0 answered, 1 no answer or
// refused, 2 bad flags. With --run-dir of a job started with `local.sh
// --secure`, status uses the run dir's keys (keys/status.key, keys/server.pub).
//
// `keygen` writes a CURVE key pair (docs/security.md): DIR/NAME.key, the
// secret key (mode 0600), and DIR/NAME.pub, the public key, one Z85 line each;
// it never overwrites a key (exit 1). NAME defaults to "key".
#include <gflags/gflags.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/files.h"
#include "common/format.h"
#include "schema/channel.h"
#include "schema/curve.h"

DEFINE_string(run_dir, "", "A job's run folder (its coordinator.addr and token)");
DEFINE_string(coordinator, "", "The coordinator's endpoint, instead of --run_dir");
DEFINE_string(token_file, "", "The job's token (with --coordinator)");
DEFINE_bool(json, false, "Print the reply as one JSON object");
DEFINE_uint32(events, 10, "How many of the newest events to show");
DEFINE_double(timeout_s, 5, "How long to wait for the coordinator's answer");
DEFINE_string(curve_secret_key, "", "status: this client's CURVE secret key file (a CURVE job)");
DEFINE_string(curve_server_key, "", "status: the job's servers' CURVE public key file");
DEFINE_string(out, "", "keygen: the folder to write the key pair to");
DEFINE_string(name, "key", "keygen: the key pair's name (NAME.key, NAME.pub)");

namespace eps {
namespace {

using Json = nlohmann::json;

constexpr const char* kUsage =
    "elasticps status (--run-dir DIR | --coordinator ADDR --token-file FILE) [--json] "
    "[--events N] [--timeout-s S] [--curve-secret-key FILE --curve-server-key FILE]\n"
    "       elasticps keygen --out DIR [--name NAME]";

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
            {"rejected_messages", s.rejected_messages}};
  j["workers"] = Json::array();
  for (const WorkerStatus& w : s.workers) {
    j["workers"].push_back({{"worker", w.worker.value()},
                            {"host", w.host},
                            {"pid", w.pid},
                            {"device", w.device_kind},
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

void PrintTables(const JobStatusReply& s) {
  std::string head = "job " + s.job_id + " (" + s.model + ")  " + s.phase +
                     (s.paused ? " (paused)" : "") + "  step " + std::to_string(s.step) + "/" +
                     std::to_string(s.steps) + "  epoch " + StrFormat("%.2f", s.epoch);
  if (s.has_loss) head += "  loss " + StrFormat("%.4f", s.loss);
  head += "  lr " + StrFormat("%.4g", s.lr) + "  samples/s " + StrFormat("%.0f", s.samples_per_s) +
          "  ETA " + Duration(s.eta_s) + "  elapsed " + Duration(s.elapsed_s);
  if (s.evaluated) head += "  test accuracy " + StrFormat("%.4f", s.test_accuracy);
  std::printf("%s\n%u VWs x %u samples, assignment epoch %llu\n\n", head.c_str(),
              s.virtual_workers, s.batch_per_vw,
              static_cast<unsigned long long>(s.assignment_epoch.value()));
  std::vector<std::vector<std::string>> rows = {
      {"WORKER", "STATE", "HOST", "PID", "DEVICE", "VWS", "S/VW", "HEARD", "STEPS", "METRICS"}};
  for (const WorkerStatus& w : s.workers) {
    const bool live = w.state == "ready" || w.state == "registered";
    rows.push_back({"w" + std::to_string(w.worker.value()), w.state, w.host,
                    std::to_string(w.pid), w.device_kind,
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
  rows = {{"SHARD", "VERSION", "DURABLE", "CHECKPOINT", "BYTES IN", "BYTES OUT", "ADDRESS",
           "METRICS"}};
  for (const ShardStatus& sh : s.shards) {
    rows.push_back({"s" + std::to_string(sh.shard.value()),
                    sh.registered ? std::to_string(sh.version.value()) : "not registered",
                    sh.durable_step.value() >= 0 ? std::to_string(sh.durable_step.value()) : "-",
                    sh.since_checkpoint_s >= 0 ? Duration(sh.since_checkpoint_s) + " ago" : "-",
                    Bytes(sh.bytes_in), Bytes(sh.bytes_out), sh.address,
                    sh.metrics_address.empty() ? "-" : sh.metrics_address});
  }
  PrintTable(rows);
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

int RunStatus(zmq::context_t* context) {
  std::string endpoint = FLAGS_coordinator, token_file = FLAGS_token_file;
  std::string secret_key = FLAGS_curve_secret_key, server_key = FLAGS_curve_server_key;
  if (!FLAGS_run_dir.empty() && secret_key.empty() &&
      ReadFirstLine(FLAGS_run_dir + "/keys/status.key").ok()) {  // local.sh --secure
    secret_key = FLAGS_run_dir + "/keys/status.key";
    if (server_key.empty()) server_key = FLAGS_run_dir + "/keys/server.pub";
  }
  if (!FLAGS_run_dir.empty()) {
    auto addr = ReadFirstLine(FLAGS_run_dir + "/coordinator.addr");
    if (!addr.ok()) {
      std::fprintf(stderr, "elasticps status: %s: is a job running in %s?\n",
                   addr.status().message().c_str(), FLAGS_run_dir.c_str());
      return 1;
    }
    if (endpoint.empty()) endpoint = *addr;
    if (token_file.empty()) token_file = FLAGS_run_dir + "/token";
  }
  if (endpoint.empty()) {
    std::fprintf(stderr, "elasticps status: --run-dir or --coordinator is required\n%s\n", kUsage);
    return 2;
  }
  auto token = ReadTokenFile(token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "elasticps status: %s\n", token.status().ToString().c_str());
    return 2;
  }
  if (!secret_key.empty() && server_key.empty()) {
    std::fprintf(stderr, "elasticps status: --curve-secret-key needs --curve-server-key\n");
    return 2;
  }
  auto curve = LoadCurveOptions(secret_key, server_key);
  if (!curve.ok()) {
    std::fprintf(stderr, "elasticps status: %s\n", curve.status().ToString().c_str());
    return 2;
  }
  Channel::Options options;
  options.curve = *curve;
  auto channel = Channel::Connect(context, endpoint, options);
  if (!channel.ok()) {
    std::fprintf(stderr, "elasticps status: %s\n", channel.status().ToString().c_str());
    return 2;
  }
  auto reply = Call(channel->get(), Envelope{*token, JobStatusRequest{FLAGS_events}},
                    std::chrono::milliseconds(static_cast<int64_t>(FLAGS_timeout_s * 1000)));
  if (!reply.ok()) {
    std::string why = reply.status().ToString();
    if (reply.status().code() == StatusCode::kDeadlineExceeded) {
      why = "no answer from " + endpoint + " within " + StrFormat("%g", FLAGS_timeout_s) +
            " s: is the job running?";
      if (!FLAGS_run_dir.empty() && ReadFirstLine(FLAGS_run_dir + "/result.json").ok())
        why += " (" + FLAGS_run_dir + "/result.json is there: the job has finished)";
    }
    std::fprintf(stderr, "elasticps status: %s\n", why.c_str());
    return 1;
  }
  auto* status = std::get_if<JobStatusReply>(&reply->body);
  if (status == nullptr) {
    std::fprintf(stderr, "elasticps status: %s answered with a %s message\n", endpoint.c_str(),
                 BodyName(reply->body));
    return 1;
  }
  if (FLAGS_json) {
    std::printf("%s\n", ToJson(*status).dump(2).c_str());
  } else {
    PrintTables(*status);
  }
  return 0;
}

int RunKeygen() {
  if (FLAGS_out.empty()) {
    std::fprintf(stderr, "elasticps keygen: --out is required\n%s\n", kUsage);
    return 2;
  }
  auto keys = GenerateCurveKeyPair();
  if (!keys.ok()) {
    std::fprintf(stderr, "elasticps keygen: %s\n", keys.status().ToString().c_str());
    return 1;
  }
  Status st = WriteCurveKeyPair(FLAGS_out, FLAGS_name, *keys);
  if (!st.ok()) {
    std::fprintf(stderr, "elasticps keygen: %s\n", st.ToString().c_str());
    return st.code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::printf("%s/%s.key (secret) %s/%s.pub %s\n", FLAGS_out.c_str(), FLAGS_name.c_str(),
              FLAGS_out.c_str(), FLAGS_name.c_str(), keys->public_key.c_str());
  return 0;
}

}  // namespace
}  // namespace eps

int main(int argc, char** argv) {
  gflags::SetUsageMessage(eps::kUsage);
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::printf("usage: %s\n", eps::kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  // The command's flags, with dashes in their names read as underscores (--run-dir).
  std::vector<std::string> args = {std::string(argv[0]) + " " + command};
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) == 0 && a.size() > 2) {
      const size_t end = std::min(a.find('='), a.size());
      for (size_t k = 2; k < end; ++k)
        if (a[k] == '-') a[k] = '_';
      std::string name = a.substr(2, end - 2);
      gflags::CommandLineFlagInfo info;
      if (!gflags::GetCommandLineFlagInfo(name.c_str(), &info) &&
          !(name.rfind("no", 0) == 0 && gflags::GetCommandLineFlagInfo(name.c_str() + 2, &info))) {
        std::fprintf(stderr, "elasticps %s: unknown flag --%s\nusage: %s\n", command.c_str(),
                     name.c_str(), eps::kUsage);
        return 2;
      }
    }
    args.push_back(std::move(a));
  }
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  int n = static_cast<int>(ptrs.size());
  char** p = ptrs.data();
  gflags::ParseCommandLineFlags(&n, &p, true);
  if (n > 1) {
    std::fprintf(stderr, "elasticps %s: unexpected argument '%s'\n", command.c_str(), p[1]);
    return 2;
  }
  if (command == "keygen") return eps::RunKeygen();
  zmq::context_t context(1);
  if (command == "status") return eps::RunStatus(&context);
  std::fprintf(stderr, "elasticps: unknown command '%s'\nusage: %s\n", command.c_str(),
               eps::kUsage);
  return 2;
}
