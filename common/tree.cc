#include "common/tree.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace eps {

std::string Block::ToString() const {
  return "[" + std::to_string(lo) + "," + std::to_string(hi()) + ")";
}

uint32_t TreeWidth(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

static bool IsPowerOfTwo(uint32_t x) { return x != 0 && (x & (x - 1)) == 0; }

bool IsTreeNode(const Block& b, uint32_t num_leaves) {
  if (num_leaves == 0 || !IsPowerOfTwo(b.size) || b.lo % b.size != 0) return false;
  if (b.lo >= num_leaves) return false;
  return uint64_t{b.lo} + b.size <= TreeWidth(num_leaves);
}

std::vector<Block> AlignedBlocks(uint32_t lo, uint32_t hi) {
  std::vector<Block> out;
  while (lo < hi) {
    uint32_t size = lo == 0 ? TreeWidth(hi) : (lo & -lo);  // largest alignment of lo
    while (size > hi - lo) size >>= 1;
    out.push_back({lo, size});
    lo += size;
  }
  return out;
}

void AddRightInto(float* acc, const float* right, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + right[i];
}

TreeReducer::TreeReducer(Block root, uint32_t num_leaves, size_t num_elements, WireDType rounding,
                         std::shared_ptr<VectorPool<float>> pool)
    : root_(root),
      num_leaves_(num_leaves),
      n_(num_elements),
      rounding_(rounding),
      pool_(std::move(pool)) {}

uint32_t TreeReducer::PresentLeaves(const Block& b) const {
  if (b.lo >= num_leaves_) return 0;
  return std::min(b.hi(), num_leaves_) - b.lo;
}

bool TreeReducer::Overlaps(const Block& b) const {
  auto it = nodes_.upper_bound(b.lo);  // first node starting after b.lo
  if (it != nodes_.end() && it->first < b.hi()) return true;
  if (it == nodes_.begin()) return false;
  --it;  // last node starting at or before b.lo
  return it->first + it->second.first > b.lo;
}

Status TreeReducer::Check(const Block& b, size_t n) const {
  if (!IsTreeNode(b, num_leaves_) || b.lo < root_.lo || b.hi() > root_.hi()) {
    return InvalidArgument("block " + b.ToString() + " is not a tree node under " +
                           root_.ToString());
  }
  if (n != n_) {
    return InvalidArgument("block " + b.ToString() + " has " + std::to_string(n) +
                           " elements, expected " + std::to_string(n_));
  }
  if (Overlaps(b))
    return AlreadyExists("block " + b.ToString() + " overlaps leaves already counted");
  return OkStatus();
}

Status TreeReducer::Add(const Block& b, const float* data, size_t n) {
  return Add(b, std::vector<float>(data, data + n));
}

Status TreeReducer::Add(const Block& b, std::vector<float> value) {
  EPS_RETURN_IF_ERROR(Check(b, value.size()));
  RoundToWire(rounding_, value.data(),
              n_);  // a leaf's first rounding; a no-op on a node already rounded
  Insert(b, std::move(value));
  return OkStatus();
}

Status TreeReducer::AddWire(const Block& b, const void* data, size_t n) {
  EPS_RETURN_IF_ERROR(Check(b, n));
  std::vector<float> value;
  if (pool_) {
    value = pool_->Take(n);
    DecodeWire(rounding_, data, n, value.data());
  } else if (rounding_ == WireDType::kFP32) {
    const auto* floats = static_cast<const float*>(data);
    value.assign(floats, floats + n);  // one pass: no zeroing first
  } else {
    value.resize(n);
    DecodeWire(rounding_, data, n, value.data());
  }
  Insert(b, std::move(value));
  return OkStatus();
}

// acc = round(acc + right), in cache-sized slices so the rounding reads what the addition just
// wrote.
static void CombineInto(float* acc, const float* right, size_t n, WireDType rounding) {
  constexpr size_t kSlice = 4096;
  if (rounding == WireDType::kFP32) return AddRightInto(acc, right, n);
  for (size_t at = 0; at < n; at += kSlice) {
    const size_t len = std::min(kSlice, n - at);
    AddRightInto(acc + at, right + at, len);
    RoundToWire(rounding, acc + at, len);
  }
}

Status TreeReducer::Add(const Block& b, std::vector<TreePiece> pieces) {
  std::sort(pieces.begin(), pieces.end(),
            [](const TreePiece& x, const TreePiece& y) { return x.at < y.at; });
  size_t covered = 0;
  for (const TreePiece& p : pieces) {
    if (p.at != covered) {
      return InvalidArgument("the pieces of block " + b.ToString() +
                             " leave a gap or overlap at element " + std::to_string(covered));
    }
    covered += p.n;
  }
  EPS_RETURN_IF_ERROR(Check(b, covered));
  const Climb c = ClimbFrom(b);
  auto sibling = nodes_.find(c.sibling.lo);
  if (b.size < root_.size && !c.is_left && sibling != nodes_.end() &&
      sibling->second.first == c.sibling.size) {
    std::vector<float> left = std::move(sibling->second.second);
    nodes_.erase(sibling);
    for (const TreePiece& p : pieces) {  // left + round(right), in slices the rounding reads warm
      constexpr size_t kSlice = 2048;
      float right[kSlice];
      for (size_t at = 0; at < p.n; at += kSlice) {
        const size_t len = std::min(kSlice, p.n - at);
        const float* from = p.data + at;
        if (rounding_ != WireDType::kFP32) {
          std::memcpy(right, from, len * sizeof(float));
          RoundToWire(rounding_, right, len);
          from = right;
        }
        CombineInto(left.data() + p.at + at, from, len, rounding_);
      }
    }
    counted_ += PresentLeaves(b);
    Store(c.parent, std::move(left));
    return OkStatus();
  }
  std::vector<float> value = pool_ ? pool_->Take(n_) : std::vector<float>(n_);
  for (const TreePiece& p : pieces) std::memcpy(value.data() + p.at, p.data, p.n * sizeof(float));
  RoundToWire(rounding_, value.data(), n_);
  Insert(b, std::move(value));
  return OkStatus();
}

void TreeReducer::Insert(const Block& b, std::vector<float> value) {
  counted_ += PresentLeaves(b);
  Store(b, std::move(value));
}

void TreeReducer::Store(const Block& b, std::vector<float> value) {
  ClimbInsert(&nodes_, root_, num_leaves_, b, std::move(value),
              [this](std::vector<float> left, std::vector<float> right) {
                CombineInto(left.data(), right.data(), n_, rounding_);
                if (pool_) pool_->Give(std::move(right));
                return left;
              });
}

StatusOr<TreeFinisher> TreeReducer::Finish(const Block& b) {
  EPS_RETURN_IF_ERROR(Check(b, n_));
  if (counted_ + PresentLeaves(b) != PresentLeaves(root_)) {
    return FailedPrecondition("block " + b.ToString() + " is not all the root " + root_.ToString() +
                              " misses");
  }
  TreeFinisher finisher(n_, rounding_, pool_);
  Block node = b;
  while (node.size < root_.size) {
    const auto [is_left, sibling, parent] = ClimbFrom(node);
    node = parent;
    if (sibling.lo >= num_leaves_) continue;  // absent right subtree: parent = left
    // Every other present leaf is counted, so Insert merged each sibling into one node.
    auto it = nodes_.find(sibling.lo);
    if (it == nodes_.end() || it->second.first != sibling.size) {
      return Internal("tree reducer lost node " + sibling.ToString());
    }
    finisher.path_.push_back({std::move(it->second.second), !is_left});
    nodes_.erase(it);
  }
  nodes_.clear();
  counted_ = 0;
  return finisher;
}

TreeFinisher::~TreeFinisher() {
  if (pool_ == nullptr) return;
  for (Sibling& s : path_) pool_->Give(std::move(s.value));
}

void TreeFinisher::Add(size_t first, size_t n, const float* value, float* out) const {
  assert(first + n <= n_);
  if (path_.empty()) {
    if (out != value) std::memcpy(out, value, n * sizeof(float));
    RoundToWire(rounding_, out, n);
    return;
  }
  // A cache-sized slice climbs the whole path before the next one starts.
  constexpr size_t kSlice = 2048;
  float acc[kSlice];
  for (size_t at = 0; at < n; at += kSlice) {
    const size_t len = std::min(kSlice, n - at);
    std::memcpy(acc, value + at, len * sizeof(float));
    RoundToWire(rounding_, acc, len);
    for (size_t level = 0; level < path_.size(); ++level) {
      const Sibling& s = path_[level];
      const float* other = s.value.data() + first + at;
      float* to = level + 1 == path_.size() ? out + at : acc;
      if (s.is_left) {
        for (size_t i = 0; i < len; ++i) to[i] = other[i] + acc[i];
      } else {
        for (size_t i = 0; i < len; ++i) to[i] = acc[i] + other[i];
      }
      RoundToWire(rounding_, to, len);
    }
  }
}

bool TreeReducer::complete() const { return counted_ == PresentLeaves(root_); }

std::vector<Block> TreeReducer::Missing() const {
  std::vector<Block> out;
  uint32_t cursor = root_.lo;
  const uint32_t end = std::min(root_.hi(), num_leaves_);
  for (const auto& [lo, node] : nodes_) {
    if (lo > cursor) {
      for (const Block& b : AlignedBlocks(cursor, std::min(lo, end))) out.push_back(b);
    }
    cursor = std::max(cursor, lo + node.first);
  }
  if (cursor < end) {
    for (const Block& b : AlignedBlocks(cursor, end)) out.push_back(b);
  }
  return out;
}

std::vector<float> TreeReducer::TakeResult() {
  assert(complete());
  std::vector<float> out = std::move(nodes_.begin()->second.second);
  nodes_.clear();
  counted_ = 0;
  return out;
}

}  // namespace eps
