// JobState's side of elastic shards (docs/design.md, "Elastic shards"):
// which shards the job wants, the move at a step boundary, its commit and
// its abandonment. The class and its contract are in job_state.h.
#include <algorithm>
#include <iterator>

#include "elastic/job_state.h"

namespace eps {
namespace {

std::vector<ShardId> Ids(const std::vector<uint32_t>& shards) {
  std::vector<ShardId> out;
  for (uint32_t s : shards) out.push_back(ShardId(s));
  return out;
}

}  // namespace

ShardConfig JobState::Config() const {
  ShardConfig config{spec_, tensors_, timeline_};
  if (!tensors_.empty()) config.map = layout_.map;
  return config;
}

std::string JobState::ShardRole(uint32_t s) const {
  if (leaving_.count(s)) return "leaving";
  return IsMember(s) ? "member" : "spare";
}

std::vector<uint32_t> JobState::WantedMembers() const {
  std::vector<uint32_t> want;
  for (uint32_t s : members_) {
    if (!leaving_.count(s)) want.push_back(s);
  }
  for (uint32_t s = 0; s < shard_bound_; ++s) {
    if (shard_registered_[s] && !IsMember(s) && !removed_.count(s) && !leaving_.count(s))
      want.push_back(s);
  }
  std::sort(want.begin(), want.end());
  return want;
}

Status JobState::RemoveShard(ShardId shard) {
  if (phase_ >= Phase::kFinalizing) return FailedPrecondition("the job is over");
  const uint32_t s = shard.value();
  if (s >= kMaxShardId || !IsMember(s) || leaving_.count(s)) {
    return NotFound("shard " + std::to_string(s) + " is not a member of the job's shard map");
  }
  std::vector<uint32_t> stay = WantedMembers();
  stay.erase(std::remove(stay.begin(), stay.end(), s), stay.end());
  if (stay.empty()) return FailedPrecondition("shard " + std::to_string(s) + " is the last one");
  leaving_.insert(s);
  if (phase_ == Phase::kHeld && !resumed_step_held_) MaybeStartReshard(step_);
  return OkStatus();
}

bool JobState::MaybeStartReshard(Step t) {
  if (move_ || tensors_.empty()) return false;
  const std::vector<uint32_t> want = WantedMembers();
  if (want == members_ || want.empty() || want == refused_) return false;
  for (uint32_t s : members_) {
    if (!shard_registered_[s]) return false;  // a rollback or a resume comes first
  }
  const std::vector<uint64_t> sizes = layout_.ChunkSizes();
  StatusOr<ShardMap> next = Rebalance(layout_.map, sizes, Ids(want));
  if (!next.ok()) {
    refused_ = want;
    Emit(JobEvent::ReshardAbandoned{layout_.map.generation + 1, next.status().ToString(), false},
         t);
    return false;
  }
  Move move;
  move.map = std::move(next).value();
  // Each attempt a generation of its own: an answer to an abandoned one is stale.
  move.map.generation = last_generation_ = std::max(last_generation_, layout_.map.generation) + 1;
  move.wanted = want;
  std::set_union(members_.begin(), members_.end(), want.begin(), want.end(),
                 std::back_inserter(move.involved));
  move.started = clock_->Now();
  const ShardMoves moves = MovesBetween(layout_.map, move.map, sizes);
  Emit(JobEvent::Resharding{move.map.generation, Ids(members_), Ids(want), moves.chunks.size(),
                            moves.partitions.size(), moves.chunk_bytes},
       t);
  Reshard reshard{move.map, t, std::vector<std::string>(move.involved.back() + 1)};
  for (uint32_t s : move.involved) reshard.addresses[s] = shard_addresses_[s];
  for (uint32_t s : move.involved) out_.push_back({Outgoing::To::kShard, s, reshard});
  move_ = std::move(move);
  step_ = t;
  work_.clear();
  phase_ = Phase::kResharding;
  Progress();
  return true;
}

Status JobState::OnReshardReady(const ReshardReady& r) {
  const uint32_t s = r.shard.value();
  if (s >= kMaxShardId || !shard_registered_[s])
    return NotFound("reshard report from an unknown shard");
  if (!move_ || r.generation != move_->map.generation ||
      !std::binary_search(move_->involved.begin(), move_->involved.end(), s))
    return OkStatus();  // stale
  if (r.code != StatusCode::kOk) {
    const Status st = r.ToStatus().WithContext("shard " + std::to_string(s));
    // After the commit the map is the job's: a shard that cannot adopt it fails the job.
    if (move_->committing) {
      Fail(st.WithContext("adopting shard map " + std::to_string(r.generation)));
    } else {
      GiveUpReshard(st.ToString(), /*retry=*/false);  // on the old map
    }
    return OkStatus();
  }
  Progress();
  if (r.committed != move_->committing) return OkStatus();  // a repeat, or out of turn
  if (!r.committed) {
    if (move_->ready.insert(s).second) move_->bytes_in += r.bytes_in;
    if (move_->ready.size() == move_->involved.size()) CommitReshard();
    return OkStatus();
  }
  move_->committed.insert(s);
  // It checkpointed step() under the new map before it answered.
  shard_durable_[s] = std::max(shard_durable_[s], step_);
  if (move_->committed.size() == members_.size()) {
    EndCommittedMove();
    StartStep(step_);
  }
  return OkStatus();
}

void JobState::CommitReshard() {
  if (Status st = layout_.SetShardMap(move_->map); !st.ok())
    return Fail(st.WithContext("the new shard map"));
  members_ = move_->wanted;
  move_->committing = true;
  for (uint32_t s : members_) shard_done_[s] = Step(step_.value() - 1);  // it serves step()
  // The shell persists the layout's map and removed_shards() before these
  // leave: the commit point. A shard leaving is done: its state is staged. A
  // spare that registered meanwhile learns the map it will move from.
  const ShardConfig config = Config();
  for (uint32_t s = 0; s < shard_bound_; ++s) {
    if (!shard_registered_[s]) continue;
    const bool involved = std::binary_search(move_->involved.begin(), move_->involved.end(), s);
    if (IsMember(s) || !involved) {
      out_.push_back({Outgoing::To::kShard, s, config});
      continue;
    }
    out_.push_back({Outgoing::To::kShard, s, Shutdown{"removed from the job: its state moved"}});
    shard_registered_[s] = false;
    shard_addresses_[s].clear();
    leaving_.erase(s);
    removed_.insert(s);
  }
}

void JobState::EndCommittedMove() {
  const Move move = std::move(*move_);
  move_.reset();
  refused_.clear();
  std::vector<uint32_t> removed;
  std::set_difference(move.involved.begin(), move.involved.end(), members_.begin(), members_.end(),
                      std::back_inserter(removed));
  Emit(JobEvent::Resharded{move.map.generation, Ids(members_), Ids(removed), move.bytes_in,
                           std::chrono::duration<double>(clock_->Now() - move.started).count()},
       step_);
  // Workers learn the map when they register: each registers again, at once
  // if it waits for a plan (the error tells it to).
  for (auto& [id, w] : workers_) {
    if (!w.alive) continue;
    if (w.pending)
      Send(id, ErrorReply{StatusCode::kAborted, "the shard map changed: register again"});
    JobEvent::WorkerDead dead{id, JobEvent::WorkerDead::Cause::kResharded, 0, ShardId(0), {}};
    dead.moved = DeclareDead(id);
    Emit(std::move(dead), step_);
  }
}

void JobState::ForgetSilentSpares() {
  const auto now = clock_->Now();
  for (uint32_t s = 0; s < shard_bound_; ++s) {
    if (!shard_registered_[s] || IsMember(s) || now - shard_seen_[s] <= options_.spare_timeout)
      continue;
    const bool in_move =
        move_ && std::binary_search(move_->involved.begin(), move_->involved.end(), s);
    shard_registered_[s] = false;  // a beacon registers it again
    shard_addresses_[s].clear();
    if (in_move) GiveUpReshard("spare shard " + std::to_string(s) + " went silent", /*retry=*/true);
  }
}

void JobState::GiveUpReshard(const std::string& reason, bool retry) {
  if (!move_ || move_->committing) return;
  AbandonReshard(reason, retry);
  StartStep(step_);
}

void JobState::AbandonReshard(const std::string& reason, bool retry) {
  if (!move_ || move_->committing) return;
  Emit(JobEvent::ReshardAbandoned{move_->map.generation, reason, retry}, step_);
  if (!retry) refused_ = move_->wanted;
  const ShardConfig config = Config();
  for (uint32_t s : move_->involved) {
    if (shard_registered_[s]) out_.push_back({Outgoing::To::kShard, s, config});
  }
  move_.reset();
}

}  // namespace eps
