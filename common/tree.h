// The canonical pairwise reduction tree over virtual-worker ids (docs/design.md,
// "The consistency contract", rule 5).
//
// For V virtual workers the tree is the balanced binary tree over P leaves, P the
// smallest power of two >= V. Leaves >= V are absent; a node whose right subtree
// is absent takes its left child's value unchanged; otherwise its value is
// left + right, in that order. A Block names one node: `size` leaves starting at
// `lo`, size a power of two and lo a multiple of size.
//
// Workers pre-sum the aligned blocks inside their VW range with a TreeReducer
// rooted at each block; shards reduce the pushed blocks with a TreeReducer rooted
// at the whole tree. Both go through the same code, so the result has the same
// bits however the range was cut. With a compressed wire dtype (wire.h) every
// node, leaves included, is rounded to it once formed, again on both sides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/vector_pool.h"
#include "common/wire.h"

namespace eps {

struct Block {
  uint32_t lo = 0;
  uint32_t size = 0;
  uint32_t hi() const { return lo + size; }
  friend bool operator==(const Block& a, const Block& b) {
    return a.lo == b.lo && a.size == b.size;
  }
  std::string ToString() const;
};

// Smallest power of two >= n (n >= 1).
uint32_t TreeWidth(uint32_t n);

// True when `b` is a node of the canonical tree over `num_leaves` leaves that
// holds at least one present leaf.
bool IsTreeNode(const Block& b, uint32_t num_leaves);

// Cuts [lo, hi) into the fewest aligned blocks, in increasing order of lo.
std::vector<Block> AlignedBlocks(uint32_t lo, uint32_t hi);

// acc[i] = acc[i] + right[i]: the one addition every tree node uses.
void AddRightInto(float* acc, const float* right, size_t n);

// One level of the climb from `node` towards the root: whether node is its
// parent's left child, its sibling and its parent.
struct Climb {
  bool is_left;
  Block sibling, parent;
};
inline Climb ClimbFrom(const Block& node) {
  const bool is_left = (node.lo / node.size) % 2 == 0;
  const Block sibling{is_left ? node.lo + node.size : node.lo - node.size, node.size};
  return {is_left, sibling, Block{is_left ? node.lo : sibling.lo, node.size * 2}};
}

// Nodes of a reducer in flight, by lo: (size, value).
template <typename Value>
using TreeNodes = std::map<uint32_t, std::pair<uint32_t, Value>>;

// Stores node `b`'s value in `nodes`, first climbing towards `root` while the
// sibling is known: an absent sibling (all its leaves >= num_leaves) leaves the
// value as it is, a stored one is taken out and combined, `combine(left, right)`
// returning the parent's value. Every reducer over the canonical tree climbs
// with this one function, so they all combine the same nodes in the same order.
template <typename Value, typename Combine>
void ClimbInsert(TreeNodes<Value>* nodes, const Block& root, uint32_t num_leaves, Block b,
                 Value value, Combine combine) {
  while (b.size < root.size) {
    const Climb c = ClimbFrom(b);
    if (c.sibling.lo < num_leaves) {
      auto it = nodes->find(c.sibling.lo);
      if (it == nodes->end() || it->second.first != c.sibling.size) break;
      Value other = std::move(it->second.second);
      nodes->erase(it);
      value = c.is_left ? combine(std::move(value), std::move(other))
                        : combine(std::move(other), std::move(value));
    }
    b = c.parent;
  }
  (*nodes)[b.lo] = {b.size, std::move(value)};
}

class TreeFinisher;

// A piece of a node's value: elements [at, at + n) are data[0, n).
struct TreePiece {
  size_t at = 0;
  const float* data = nullptr;
  size_t n = 0;
};

// Reduces the subtree of the canonical tree (over `num_leaves` leaves) rooted at
// `root`, from contributions for any of its nodes. Each leaf counts at most once:
// a contribution that overlaps leaves already counted is refused whole.
// Memory: at most one buffer per tree level in flight when leaves arrive in order.
// `rounding`: the wire dtype every node's value is rounded to (fp32: none).
// `pool` (optional): where AddWire takes its buffers and where a node merged into its left
// sibling gives its buffer back, so that a reducer built every step reuses warm pages.
// Not thread-safe.
class TreeReducer {
 public:
  TreeReducer(Block root, uint32_t num_leaves, size_t num_elements,
              WireDType rounding = WireDType::kFP32,
              std::shared_ptr<VectorPool<float>> pool = nullptr);

  // Adds the value of node `b`. InvalidArgument: not a node under root, or wrong
  // size. AlreadyExists: overlaps leaves already counted (nothing is changed).
  Status Add(const Block& b, std::vector<float> value);
  // As Add, copying from `data`.
  Status Add(const Block& b, const float* data, size_t n);
  // As Add, for a value that lies in `pieces` (a VW's gradients, tensor by
  // tensor), which must cover every element once (InvalidArgument otherwise).
  // A right child whose left sibling is held is added into the sibling from
  // where the pieces lie: no copy of it is made.
  Status Add(const Block& b, std::vector<TreePiece> pieces);
  // As Add, decoding `n` values of the reducer's wire dtype from `data` (a
  // pushed partial): they are exact, so no rounding pass.
  Status AddWire(const Block& b, const void* data, size_t n);

  bool complete() const;
  // Present leaves under root not yet counted, as aligned blocks.
  std::vector<Block> Missing() const;
  // Number of present leaves counted so far.
  uint32_t counted() const { return counted_; }
  // The root's value; only when complete(). Leaves the reducer empty.
  std::vector<float> TakeResult();

  // For a last node whose value comes a range of elements at a time (a VW's
  // gradients, parameter by parameter, as backward produces them): takes the
  // reducer's nodes into a TreeFinisher, which gives the root's value over each
  // range as soon as `b`'s value over it is known. `b` must hold exactly the
  // present leaves the root still misses (FailedPrecondition otherwise), and
  // passes Add's checks. Leaves the reducer empty.
  [[nodiscard]] StatusOr<TreeFinisher> Finish(const Block& b);

  const Block& root() const { return root_; }
  size_t num_elements() const { return n_; }

 private:
  Status Check(const Block& b, size_t n) const;
  // Adds a value already representable in the wire dtype; Check() passed.
  void Insert(const Block& b, std::vector<float> value);
  // Stores node `b`'s value (its leaves counted), climbing while siblings are held.
  void Store(const Block& b, std::vector<float> value);
  bool Overlaps(const Block& b) const;
  uint32_t PresentLeaves(const Block& b) const;

  const Block root_;
  const uint32_t num_leaves_;
  const size_t n_;
  const WireDType rounding_;
  const std::shared_ptr<VectorPool<float>> pool_;
  uint32_t counted_ = 0;
  TreeNodes<std::vector<float>> nodes_;
};

// The root of a TreeReducer's subtree, one range of elements at a time, once
// only its last node is missing (TreeReducer::Finish). The bits are those the
// reducer would give with the whole last node added. Immutable: ranges may come
// in any order, and a range given twice gives the same values twice.
class TreeFinisher {
 public:
  TreeFinisher(TreeFinisher&&) = default;
  TreeFinisher& operator=(TreeFinisher&&) = default;
  ~TreeFinisher();  // the siblings' buffers go back to the reducer's pool, if it had one

  // Writes the root's value over elements [first, first + n) to out[0, n),
  // given the last node's value over them in value[0, n) (rounded here, as Add
  // rounds a leaf). first + n <= num_elements(); `value` and `out` may be the same.
  void Add(size_t first, size_t n, const float* value, float* out) const;
  size_t num_elements() const { return n_; }

 private:
  friend class TreeReducer;
  TreeFinisher(size_t n, WireDType rounding, std::shared_ptr<VectorPool<float>> pool)
      : n_(n), rounding_(rounding), pool_(std::move(pool)) {}
  // The sibling met at each level on the way from the last node up to the root.
  struct Sibling {
    std::vector<float> value;
    bool is_left;  // the sibling is the left operand of the addition
  };
  size_t n_;
  WireDType rounding_;
  std::shared_ptr<VectorPool<float>> pool_;
  std::vector<Sibling> path_;
};

}  // namespace eps
