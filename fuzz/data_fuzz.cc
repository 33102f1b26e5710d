// The data readers (data/dataset.h) on any bytes: the input's first byte picks
// the reader (even: NPY, the rest of the input as both the features and the
// labels file; odd: CSV, or TSV / JSONL text when its bits 1-2 are 01 / 10,
// tokenized with a vocabulary built from it (hashed when bit 3 is set), or
// Criteo click logs when they are 11), the rest is the file. Any outcome but a crash, a
// leak or undefined behaviour is fine; a data set that opens is read whole.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/criteo.h"
#include "data/dataset.h"
#include "data/text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int fd = memfd_create("data_fuzz", 0);
  if (fd < 0) return 0;
  if (size > 1 && write(fd, data + 1, size - 1) != static_cast<ssize_t>(size - 1)) {
    close(fd);
    return 0;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const int text = (data[0] & 1) == 1 ? (data[0] >> 1) & 3 : 0;
  if (text == 1 || text == 2) {
    const std::string format = text == 1 ? "tsv" : "jsonl";
    eps::StatusOr<eps::TextTable> table = eps::ReadTextTable(path, format, "text", "label", 0);
    if (table.ok()) {
      eps::StatusOr<eps::Vocabulary> vocab = (data[0] & 8) != 0
                                                 ? eps::Vocabulary::BuildHashed(*table, 64, 2, 16)
                                                 : eps::Vocabulary::Build(*table, 64, 16);
      if (vocab.ok()) {
        auto back = eps::Vocabulary::Parse(vocab->Serialize());
        if (!back.ok()) __builtin_trap();  // what Serialize writes must parse
        (void)eps::OpenTextDataset(path, format, "text", "label", *back);
      }
    }
    close(fd);
    return 0;
  }
  eps::StatusOr<eps::Dataset> ds = (data[0] & 1) == 0 ? eps::ReadNpyDataset(path, path, 0)
                                   : text == 3        ? eps::ReadCriteoDataset(path, 1000, 0)
                                                      : eps::ReadCsvDataset(path, "label", 0);
  if (ds.ok()) {
    // Touch every byte the data set claims, as a worker would.
    uint64_t sum = 0;
    const auto* f = static_cast<const uint8_t*>(ds->features);
    const int64_t fb = ds->size * ds->SampleElems() * static_cast<int64_t>(eps::DataTypeSize(ds->feature_dtype));
    for (int64_t i = 0; i < fb; ++i) sum += f[i];
    const auto* l = static_cast<const uint8_t*>(ds->labels);
    const int64_t lb = ds->size * ds->LabelElems() * static_cast<int64_t>(eps::DataTypeSize(ds->label_dtype));
    for (int64_t i = 0; i < lb; ++i) sum += l[i];
    if (sum == 1) (void)ds->CheckUnchanged();
  }
  close(fd);
  return 0;
}
