// Zip archives for tests: stored (uncompressed) entries, enough for the
// model files' checks (models/model_file.h), which read the central directory
// only. Header-only, for tests.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace eps {
namespace testing_zip {

inline void Put(std::string* out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A zip of stored (uncompressed) entries with the given names and contents.
inline std::string Zip(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out, central;
  for (const auto& [name, data] : entries) {
    const uint64_t offset = out.size();
    Put(&out, 0x04034b50, 4);
    Put(&out, 20, 2);  // version
    Put(&out, 0, 2);   // flags
    Put(&out, 0, 2);   // stored
    Put(&out, 0, 4);   // time, date
    Put(&out, 0, 4);   // crc (not checked)
    Put(&out, data.size(), 4);
    Put(&out, data.size(), 4);
    Put(&out, name.size(), 2);
    Put(&out, 0, 2);
    out += name + data;
    Put(&central, 0x02014b50, 4);
    Put(&central, 20, 2);
    Put(&central, 20, 2);
    Put(&central, 0, 2);
    Put(&central, 0, 2);
    Put(&central, 0, 4);
    Put(&central, 0, 4);
    Put(&central, data.size(), 4);
    Put(&central, data.size(), 4);
    Put(&central, name.size(), 2);
    Put(&central, 0, 2);  // extra
    Put(&central, 0, 2);  // comment
    Put(&central, 0, 2);  // disk
    Put(&central, 0, 2);  // internal attributes
    Put(&central, 0, 4);  // external attributes
    Put(&central, offset, 4);
    central += name;
  }
  const uint64_t cd = out.size();
  out += central;
  Put(&out, 0x06054b50, 4);
  Put(&out, 0, 4);
  Put(&out, entries.size(), 2);
  Put(&out, entries.size(), 2);
  Put(&out, central.size(), 4);
  Put(&out, cd, 4);
  Put(&out, 0, 2);
  return out;
}

// A zip that passes CheckTorchScriptArchive: data.pkl, code/ and a data entry
// of `payload` bytes (which makes the file as large as a test needs).
inline std::string FakeTorchScript(const std::string& payload) {
  return Zip({{"net/data.pkl", "x"},
              {"net/code/__torch__.py", "def forward"},
              {"net/constants.pkl", "c"},
              {"net/data/0", payload}});
}

}  // namespace testing_zip
}  // namespace eps
