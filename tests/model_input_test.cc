#include "data/model_input.h"

#include <gtest/gtest.h>

namespace eps {
namespace {

Dataset Images(std::vector<int64_t> shape, std::vector<int64_t> labels = {0, 9}) {
  int64_t elems = 1;
  for (int64_t d : shape) elems *= d;
  StatusOr<Dataset> d = MakeDataset(std::move(shape), std::vector<float>(2 * elems), labels);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? *d : Dataset{};
}

TEST(ModelInput, BuiltinModelsTakeFloat28x28SamplesInThreeShapesAndTenClasses) {
  EXPECT_TRUE(CheckModelInput(Images({1, 28, 28})).ok());
  EXPECT_TRUE(CheckModelInput(Images({28, 28})).ok());
  EXPECT_TRUE(CheckModelInput(Images({784})).ok());
  for (const auto& shape : std::vector<std::vector<int64_t>>{{1, 14, 56}, {3, 28, 28}, {10}, {}}) {
    Status st = CheckModelInput(Images(shape));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("28x28"), std::string::npos) << st.ToString();
  }
  EXPECT_EQ(CheckModelInput(Images({784}, {0, 10})).code(), StatusCode::kInvalidArgument);
  Dataset bytes = Images({784});
  bytes.feature_dtype = DataType::kUInt8;
  EXPECT_EQ(CheckModelInput(bytes).code(), StatusCode::kInvalidArgument);
  Dataset targets = Images({784});
  targets.label_dtype = DataType::kFloat32;
  EXPECT_EQ(CheckModelInput(targets).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsBuiltinModel("cnn_bn"));
  EXPECT_FALSE(IsBuiltinModel("model.pt"));
}

TEST(ModelInput, MakeDatasetRefusesNegativeLabelsAndSizesThatDisagree) {
  EXPECT_EQ(MakeDataset({2}, {1, 2, 3, 4}, {0, -1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeDataset({2}, {1, 2, 3}, {0, 1}).status().code(), StatusCode::kInvalidArgument);
  auto d = MakeDataset({2}, {1, 2, 3, 4}, {0, 4});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->num_classes, 5);
}

TEST(ZooSizes, RoundTripThroughAnExportsMetadataAndRefuseBadNumbers) {
  ZooSizes sizes;
  sizes.dim = 16;
  sizes.depth = 8;
  sizes.seq_len = 48;
  auto back = ZooSizesFromMetadata(ZooSizesMetadata(sizes));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->dim, 16u);
  EXPECT_EQ(back->depth, 8u);
  EXPECT_EQ(back->seq_len, 48u);
  EXPECT_EQ(back->heads, ZooSizes().heads);
  auto defaults = ZooSizesFromMetadata({{"model", "cnn"}});  // an older export: the defaults
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->depth, ZooSizes().depth);
  for (const char* bad : {"", "-3", "0", "12x", "99999999999"}) {
    auto refused = ZooSizesFromMetadata({{"model_depth", bad}});
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  // A table of unbounded keys has 0 rows (dlrm's with --hash_buckets=0); no other size is 0.
  auto unbounded = ZooSizesFromMetadata({{"vocab_size", "0"}});
  ASSERT_TRUE(unbounded.ok()) << unbounded.status().ToString();
  EXPECT_EQ(unbounded->vocab_size, 0u);
}

}  // namespace
}  // namespace eps
