// Sparse rows through a shared-memory region (schema/shm_rows.h): placed all or none, at
// 64-byte boundaries from the offset given, and found by the receiver only inside its room.
#include "schema/shm_rows.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

namespace eps {
namespace {

SparseRowBytes Rows(uint32_t table, std::vector<uint64_t> ids, std::vector<float> values) {
  auto i = std::make_shared<std::vector<uint64_t>>(std::move(ids));
  auto v = std::make_shared<std::vector<float>>(std::move(values));
  SparseRowBytes r;
  r.table = table;
  r.rows = static_cast<uint32_t>(i->size());
  r.ids = {ChunkId(0), i->data(), i->size() * sizeof(uint64_t), i};
  r.values = {ChunkId(0), v->data(), v->size() * sizeof(float), v};
  return r;
}

// A region's memory as its owner sees it (PlaceRows and PointRows need no mapping of their own).
struct Region {
  explicit Region(size_t size) : bytes(size), ref{1, 3, 42, size} {}
  std::vector<uint8_t> bytes;
  ShmRegionRef ref;
};

TEST(ShmRows, RowsArePlacedFromTheOffsetAndFoundThereByTheReceiver) {
  Region region(4096);
  std::vector<SparseRowBytes> rows = {Rows(0, {3, 9}, {1, 2, 3, 4}), Rows(1, {}, {}),
                                      Rows(2, {1ull << 40}, {5, 6})};
  std::weak_ptr<const void> owner = rows[0].values.owner;
  uint64_t at = 200;
  ASSERT_TRUE(PlaceRows(region.bytes.data(), region.ref, &at, &rows));
  EXPECT_TRUE(owner.expired());  // the message's bytes are no longer held
  EXPECT_TRUE(AnyInShm(rows));
  EXPECT_EQ(rows[0].ids_offset, 256u);  // 64-byte boundaries, from 200 on
  EXPECT_EQ(rows[0].values_offset, 320u);
  EXPECT_GT(at, rows[2].values_offset);
  // What the receiver decodes: the offsets and sizes, no data.
  std::vector<SparseRowBytes> got = rows;
  for (SparseRowBytes& r : got) r.ids.data = r.values.data = nullptr;
  ASSERT_TRUE(PointRows(region.bytes.data(), region.ref, 200, &got).ok());
  const uint64_t want_ids[] = {3, 9};
  const float want_values[] = {1, 2, 3, 4};
  EXPECT_EQ(std::memcmp(got[0].ids.data, want_ids, sizeof want_ids), 0);
  EXPECT_EQ(std::memcmp(got[0].values.data, want_values, sizeof want_values), 0);
  EXPECT_EQ(got[1].rows, 0u);
  EXPECT_EQ(*static_cast<const uint64_t*>(got[2].ids.data), 1ull << 40);
  // Rows before the receiver's room, past the region's end, or in its header: refused.
  for (int bad = 0; bad < 3; ++bad) {
    std::vector<SparseRowBytes> wrong = got;
    if (bad == 0) wrong[0].ids_offset = 128;
    if (bad == 1) wrong[2].values_offset = region.ref.size - 4;
    if (bad == 2) wrong[0].values_offset = 8;
    EXPECT_EQ(PointRows(region.bytes.data(), region.ref, 200, &wrong).code(),
              StatusCode::kInvalidArgument)
        << bad;
  }
  // Rows in the message are left as they are.
  std::vector<SparseRowBytes> in_message = {Rows(0, {1}, {7, 8})};
  const void* data = in_message[0].values.data;
  ASSERT_TRUE(PointRows(region.bytes.data(), region.ref, 200, &in_message).ok());
  EXPECT_EQ(in_message[0].values.data, data);
  EXPECT_FALSE(AnyInShm(in_message));
}

TEST(ShmRows, RowsThatDoNotAllFitStayInTheMessageUntouched) {
  Region region(ShmRegion::kHeaderBytes + 256);
  std::vector<SparseRowBytes> rows = {
      Rows(0, {1, 2}, {1, 2, 3, 4}), Rows(1, std::vector<uint64_t>(32, 0), std::vector<float>(64))};
  const std::vector<uint8_t> before = region.bytes;
  uint64_t at = ShmRegion::kHeaderBytes;
  EXPECT_FALSE(PlaceRows(region.bytes.data(), region.ref, &at, &rows));
  EXPECT_EQ(at, ShmRegion::kHeaderBytes);
  EXPECT_FALSE(AnyInShm(rows));
  EXPECT_NE(rows[0].ids.owner, nullptr);
  EXPECT_EQ(region.bytes, before);
  // The first table alone fits; an offset of 0 starts after the header.
  rows.pop_back();
  at = 0;
  ASSERT_TRUE(PlaceRows(region.bytes.data(), region.ref, &at, &rows));
  EXPECT_EQ(rows[0].ids_offset, ShmRegion::kHeaderBytes);
}

}  // namespace
}  // namespace eps
