// The shard service under test (server/shard.h): a real Shard on its own
// thread, driven by a fake coordinator and fake clients on loopback (ports
// picked by the kernel). Shared by the shard's service tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "schema/channel.h"
#include "server/shard.h"

namespace eps {

constexpr auto kWait = std::chrono::seconds(20);

class FakeCoordinator {
 public:
  explicit FakeCoordinator(zmq::context_t* context) {
    auto channel = Channel::Bind(context, "tcp://127.0.0.1:0");
    EXPECT_TRUE(channel.ok()) << channel.status().ToString();
    channel_ = std::move(channel).value();
  }
  const std::string& endpoint() const { return channel_->endpoint(); }

  // The next message of type M from the shard that satisfies `match`, skipping
  // others; nullopt when none comes in time.
  template <class M>
  std::optional<M> Next(const std::function<bool(const M&)>& match = [](const M&) {
    return true;
  }) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < deadline) {
      auto in = channel_->Receive(std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now()));
      if (!in.ok() || !in->envelope.ok()) continue;
      peer_ = in->peer;
      if (auto* m = std::get_if<M>(&in->envelope->body); m != nullptr && match(*m)) return *m;
    }
    ADD_FAILURE() << "no expected message from the shard";
    return std::nullopt;
  }
  void Send(Body body) { EXPECT_TRUE(channel_->SendTo(peer_, Envelope{"", std::move(body)}).ok()); }

 private:
  std::unique_ptr<Channel> channel_;
  std::string peer_;
};

// A Shard serving on its own thread until Shutdown.
class RunningShard {
 public:
  RunningShard(zmq::context_t* context, const ShardOptions& options) {
    auto shard = Shard::Open(options, context);
    open_status_ = shard.status();
    if (!shard.ok()) return;
    shard_ = std::move(shard).value();
    thread_ = std::thread([this] { run_status_ = shard_->Run(&stop_); });
  }
  // A test that failed half-way stops the shard as a signal would.
  ~RunningShard() {
    stop_ = true;
    (void)Join();
  }
  const Status& open_status() const { return open_status_; }
  Shard* shard() { return shard_.get(); }
  Status Join() {
    if (thread_.joinable()) thread_.join();
    return run_status_;
  }

 private:
  Status open_status_;
  Status run_status_;
  volatile bool stop_ = false;
  std::unique_ptr<Shard> shard_;
  std::thread thread_;
};

// A client of a shard's ROUTER (a worker, or another shard), on loopback.
class ShardClient {
 public:
  ShardClient(zmq::context_t* context, const std::string& shard) {
    auto channel = Channel::Connect(context, shard);
    EXPECT_TRUE(channel.ok());
    channel_ = std::move(channel).value();
  }
  StatusOr<Envelope> Send(Body body) {
    return Call(channel_.get(), Envelope{"", std::move(body)}, kWait);
  }
  // A request whose answer Await takes later.
  void Post(Body body) { ASSERT_TRUE(channel_->Send(Envelope{"", std::move(body)}).ok()); }
  StatusOr<Envelope> Await(std::chrono::milliseconds timeout) {
    EPS_ASSIGN_OR_RETURN(Channel::Incoming in, channel_->Receive(timeout));
    return std::move(in.envelope);
  }

 private:
  std::unique_ptr<Channel> channel_;
};

}  // namespace eps
