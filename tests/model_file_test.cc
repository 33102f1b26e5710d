// Tests for the coordinator's check of a TorchScript model file (torch-free).
#include "models/model_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "common/digest.h"
#include "tests/zip_files.h"

namespace eps {
namespace {

using testing_zip::Zip;

const std::string kScript = Zip({{"net/data.pkl", "x"},
                                 {"net/code/__torch__.py", "def forward"},
                                 {"net/constants.pkl", "c"},
                                 {"net/data/0", "0123"}});

TEST(ModelFile, AFileIsNamedByASlashOrThePtExtension) {
  EXPECT_TRUE(IsModelPath("model.pt"));
  EXPECT_TRUE(IsModelPath("models/net"));
  EXPECT_TRUE(IsModelPath("/abs/net.pt"));
  EXPECT_FALSE(IsModelPath("mlp"));
  EXPECT_FALSE(IsModelPath("cnn_bn"));
  EXPECT_FALSE(IsModelPath("model.pth"));
}

TEST(ModelFile, AcceptsATorchScriptArchive) {
  EXPECT_TRUE(CheckTorchScriptArchive(kScript, "m").ok());
  // constants.pkl alone (no code/) is enough, and a trailing zip comment is allowed.
  std::string commented = Zip({{"a/data.pkl", "x"}, {"a/constants.pkl", "c"}});
  commented[commented.size() - 2] = 3;
  commented += "hey";
  EXPECT_TRUE(CheckTorchScriptArchive(commented, "m").ok());
}

TEST(ModelFile, RefusesAStateDictARandomFileAndATruncatedZip) {
  const Status state_dict =
      CheckTorchScriptArchive(Zip({{"sd/data.pkl", "x"}, {"sd/data/0", "0123"}}), "sd.pt");
  EXPECT_EQ(state_dict.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(state_dict.message().find("torch.save"), std::string::npos) << state_dict.ToString();
  EXPECT_EQ(CheckTorchScriptArchive("random bytes, not a zip at all, long enough", "r").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckTorchScriptArchive("", "r").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckTorchScriptArchive(Zip({{"a/code/x", "y"}}), "r").code(),
            StatusCode::kInvalidArgument);
  // The central directory points past the end: a clear error, never a read out of bounds.
  std::string cut = kScript;
  cut.erase(cut.size() - 22 - 40, 40);
  EXPECT_EQ(CheckTorchScriptArchive(cut, "r").code(), StatusCode::kInvalidArgument);
  for (size_t n = 0; n < kScript.size(); n += 7) {
    (void)CheckTorchScriptArchive(kScript.substr(0, n), "prefix");  // no crash on any prefix
  }
}

TEST(ModelFile, ReadsHashesAndPinsTheFile) {
  char dir[] = "/tmp/eps-model-file-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/net.pt";
  std::ofstream(path, std::ios::binary) << kScript;
  Sha256 sha;
  sha.Update(kScript.data(), kScript.size());
  const std::string digest = sha.HexDigest();
  StatusOr<ModelFile> f = ReadModelFile(path, "");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->bytes, kScript);
  EXPECT_EQ(f->sha256, digest);
  std::string upper = digest;
  for (char& c : upper) c = static_cast<char>(toupper(c));
  EXPECT_TRUE(ReadModelFile(path, upper).ok());
  const Status pinned = ReadModelFile(path, std::string(64, '0')).status();
  EXPECT_EQ(pinned.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pinned.message().find("--model_sha256"), std::string::npos);
  EXPECT_EQ(ReadModelFile(std::string(dir) + "/missing.pt", "").status().code(),
            StatusCode::kNotFound);
  unlink(path.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace eps
