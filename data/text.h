// Text data: TSV/JSONL tables of (text, label), the tokenizer, and the
// vocabulary built from a training split. libtorch-free and pure: the
// coordinator builds the vocabulary once (BuildVocabulary), every worker and
// the exporters tokenize with its serialized form (ParseVocabulary), so a
// sample has the same token ids on every machine and in every run.
// docs/text.md describes the rules; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"

namespace eps {

// The tokenizer's rules, versioned: a vocabulary records the version it was
// built with and a reader of another version refuses it.
constexpr int kTokenizerVersion = 1;
constexpr int64_t kPadId = 0;    // "<pad>": fills a sample after its words
constexpr int64_t kUnkId = 1;    // "<unk>": a word not in the vocabulary
constexpr int64_t kClsId = 2;    // "<cls>": the first token of every sample
constexpr int64_t kNumSpecials = 3;
constexpr size_t kMaxWordBytes = 32;  // a longer word is cut (at a code point) to this

// The words of `text`, in order, over its bytes (any bytes: never fails):
// UTF-8 is decoded, each invalid byte (or overlong form, surrogate, code
// point past U+10FFFF) counting as U+FFFD; a word is a maximal run of ASCII
// letters and digits and of non-ASCII code points other than U+FFFD;
// everything else (punctuation, spaces, controls, NUL, U+FFFD) separates
// words. ASCII letters are lowercased; non-ASCII code points are kept as
// their (valid) UTF-8 bytes. A word is cut to its first kMaxWordBytes bytes
// (whole code points); the rest of it is dropped. At most `max_words` words
// are returned (0: all), and *more (if given) tells whether any were left.
std::vector<std::string> TokenizeText(std::string_view text, size_t max_words = 0,
                                      bool* more = nullptr);

// True when `s` is well-formed UTF-8 (no overlong form, surrogate or code
// point past U+10FFFF).
bool IsValidUtf8(std::string_view s);

// A table of texts and their labels (as strings: an integer label is its
// decimal digits), with each row's line number in its file.
struct TextTable {
  std::vector<std::string> texts;
  std::vector<std::string> labels;
  std::vector<int64_t> lines;
};

// Reads `path` as "tsv" (a header row of tab-separated column names, then one
// row per sample; in a cell the escapes \t \n \r \\ stand for tab, newline,
// CR and backslash; CRLF endings; empty lines skipped) or "jsonl" (one JSON
// object per non-empty line: the text column a string, the label column a
// string or an integer; other members ignored). Keeps the first `limit` rows
// if limit > 0.
//   NotFound         the file does not exist.
//   InvalidArgument  an empty file, a header without the column, a ragged
//                    row, a line that is not a JSON object (or not UTF-8), a
//                    text that is not a string, a label that is neither a
//                    string nor an integer, a label that is not UTF-8 or is
//                    empty, no rows; each naming the file and line.
// An empty `label_column` reads the texts only (every label ""): what a
// prediction needs.
[[nodiscard]] StatusOr<TextTable> ReadTextTable(const std::string& path, const std::string& format,
                                                const std::string& text_column,
                                                const std::string& label_column, int64_t limit);

// A vocabulary: words by id (the specials first), the label set (class i is
// labels[i]) and the sample length. Immutable after Build/Parse.
class Vocabulary {
 public:
  // The (vocab_size - kNumSpecials) most frequent words of `train`'s texts
  // (counted over every word, ties broken by byte order), fewer if the texts
  // have fewer; the labels are the sorted distinct labels of `train`
  // (numerically when every one is an integer, else by bytes).
  // InvalidArgument: vocab_size <= kNumSpecials, seq_len < 2, no rows.
  // With `words` (--vocab_from: a pretrained model's vocabulary), its words
  // and ids instead of the most frequent ones, so that a model fine-tuned
  // from that one sees every word under the id it learned it by; the labels
  // are still `train`'s. InvalidArgument when `words` holds more than
  // vocab_size words or another seq_len.
  [[nodiscard]] static StatusOr<Vocabulary> Build(const TextTable& train, uint32_t vocab_size,
                                                  uint32_t seq_len,
                                                  const Vocabulary* words = nullptr);
  // Hashed features instead of words (--hash_buckets, docs/text.md): no words
  // are kept; a sample is <cls>, then each word's id and, with ngrams = 2,
  // after each word but the first the id of the bigram it ends, <pad> to the
  // end. An id is kNumSpecials + FNV-1a-64(token's bytes) % (buckets -
  // kNumSpecials), a bigram's token its two words joined by a space (no word
  // holds one). Buckets 0: 63-bit keys, rows of a table of unbounded keys
  // (buckets 2^63 - 1 in that formula: text_hashed with --hash_buckets=0).
  // The labels are `train`'s, as Build's. InvalidArgument: buckets in [1,
  // kNumSpecials], ngrams not 1 or 2, seq_len < 2, no rows.
  [[nodiscard]] static StatusOr<Vocabulary> BuildHashed(const TextTable& train, uint32_t buckets,
                                                        uint32_t ngrams, uint32_t seq_len);
  // The form Serialize writes; InvalidArgument naming what is wrong (not
  // JSON, another tokenizer version, missing or duplicate words or labels).
  [[nodiscard]] static StatusOr<Vocabulary> Parse(std::string_view json);
  // JSON: {"tokenizer": "eps-words", "version": 1, "seq_len": N,
  // "words": [id order, specials first], "labels": [class order]}, and when
  // hashed "hash_buckets": B (0: keys), "ngrams": 1 or 2 (words: the specials
  // only).
  std::string Serialize() const;

  const std::vector<std::string>& words() const { return words_; }
  const std::vector<std::string>& labels() const { return labels_; }
  uint32_t seq_len() const { return seq_len_; }
  bool hashed() const { return hash_buckets_ > 0 || keys_; }  // else words by the vocabulary
  uint32_t hash_buckets() const { return hash_buckets_; }     // 0: words, or keys
  bool keys() const { return keys_; }  // hashed into 63-bit keys (a table of unbounded keys)
  uint32_t ngrams() const { return ngrams_; }
  int64_t IdOf(const std::string& word) const;         // kUnkId when absent (hashed: its bucket)
  int64_t ClassOf(const std::string& label) const;     // -1 when not in the set
  // The seq_len ids of `text`: kClsId, its words' ids, kPadId to the end.
  // True when words were left out (the text was truncated).
  bool Encode(std::string_view text, int64_t* out) const;

 private:
  Vocabulary() = default;
  void SetLabels(const TextTable& train);  // train's sorted distinct labels, then Index()
  void Index();
  std::vector<std::string> words_;
  std::vector<std::string> labels_;
  uint32_t seq_len_ = 0;
  uint32_t hash_buckets_ = 0;
  bool keys_ = false;
  uint32_t ngrams_ = 1;
  std::unordered_map<std::string, int64_t> word_ids_;
  std::unordered_map<std::string, int64_t> label_ids_;
};

// A text file as a Dataset: int64 token ids [n, seq_len] and int64 classes
// (num_classes = the vocabulary's label count), tokenized with `vocab`;
// `truncated` counts the samples cut to seq_len. Errors: ReadTextTable's, and
// InvalidArgument naming file and line for a label not in the vocabulary's set.
// An empty `label_column`: no labels are read, every sample is of class 0.
struct TextDataset {
  Dataset data;
  int64_t truncated = 0;
};
[[nodiscard]] StatusOr<TextDataset> OpenTextDataset(const std::string& path,
                                                    const std::string& format,
                                                    const std::string& text_column,
                                                    const std::string& label_column,
                                                    const Vocabulary& vocab, int64_t limit = 0);

// True for the text formats ("tsv", "jsonl").
bool IsTextFormat(const std::string& format);

}  // namespace eps
