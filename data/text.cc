// The tokenizer and the vocabulary (data/text.h).
#include "data/text.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>

#include "common/layout.h"

namespace eps {
namespace {

constexpr uint32_t kReplacement = 0xFFFD;

// Decodes one code point at s[*i], advancing *i; an invalid sequence is one
// byte that decodes to U+FFFD.
uint32_t NextCodePoint(std::string_view s, size_t* i) {
  const auto b0 = static_cast<uint8_t>(s[*i]);
  if (b0 < 0x80) {
    ++*i;
    return b0;
  }
  int len = 0;
  uint32_t cp = 0, min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    ++*i;
    return kReplacement;
  }
  if (*i + len > s.size()) {
    ++*i;
    return kReplacement;
  }
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[*i + k]);
    if ((b & 0xC0) != 0x80) {
      ++*i;
      return kReplacement;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++*i;
    return kReplacement;
  }
  *i += len;
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsWordChar(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  return cp != kReplacement;
}

size_t Utf8Len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

bool IsInteger(const std::string& s) {
  const size_t start = (!s.empty() && s[0] == '-') ? 1 : 0;
  return s.size() > start && s.size() - start <= 18 &&
         s.find_first_not_of("0123456789", start) == std::string::npos;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    if (NextCodePoint(s, &i) == kReplacement && !(i - at == 3 && s.substr(at, 3) == "\xEF\xBF\xBD"))
      return false;
  }
  return true;
}

std::vector<std::string> TokenizeText(std::string_view text, size_t max_words, bool* more) {
  std::vector<std::string> words;
  std::string word;
  bool cut = false;  // the current word reached kMaxWordBytes: drop the rest of it
  bool in_word = false;
  if (more != nullptr) *more = false;
  size_t i = 0;
  while (i < text.size()) {
    const uint32_t cp = NextCodePoint(text, &i);
    if (IsWordChar(cp)) {
      in_word = true;
      if (cut) continue;
      if (word.size() + Utf8Len(cp) > kMaxWordBytes) {
        cut = true;
        continue;
      }
      AppendUtf8(cp >= 'A' && cp <= 'Z' ? cp + ('a' - 'A') : cp, &word);
      continue;
    }
    if (!in_word) continue;
    if (max_words > 0 && words.size() == max_words) {
      if (more != nullptr) *more = true;
      return words;
    }
    words.push_back(std::move(word));
    word.clear();
    in_word = cut = false;
  }
  if (in_word) {
    if (max_words > 0 && words.size() == max_words) {
      if (more != nullptr) *more = true;
    } else {
      words.push_back(std::move(word));
    }
  }
  return words;
}

bool IsTextFormat(const std::string& format) { return format == "tsv" || format == "jsonl"; }

StatusOr<Vocabulary> Vocabulary::Build(const TextTable& train, uint32_t vocab_size,
                                       uint32_t seq_len, const Vocabulary* words) {
  if (vocab_size <= kNumSpecials) {
    return InvalidArgument("--vocab_size " + std::to_string(vocab_size) + ": must exceed the " +
                           std::to_string(kNumSpecials) + " special tokens");
  }
  if (seq_len < 2) return InvalidArgument("--seq_len must be at least 2 (<cls> and one word)");
  if (train.texts.empty()) return InvalidArgument("the training text has no rows");
  Vocabulary v;
  v.seq_len_ = seq_len;
  if (words != nullptr) {
    if (words->words_.size() > vocab_size) {
      return InvalidArgument("--vocab_from holds " + std::to_string(words->words_.size()) +
                             " words, more than --vocab_size=" + std::to_string(vocab_size) +
                             " (the pretrained model's --vocab_size, so its embeddings load)");
    }
    if (words->seq_len_ != seq_len) {
      return InvalidArgument("--vocab_from is of seq_len " + std::to_string(words->seq_len_) +
                             ", the job's --seq_len is " + std::to_string(seq_len));
    }
    v.words_ = words->words_;
    v.SetLabels(train);
    return v;
  }
  std::unordered_map<std::string, int64_t> counts;
  for (const std::string& text : train.texts) {
    for (std::string& w : TokenizeText(text)) ++counts[std::move(w)];
  }
  std::vector<std::pair<std::string, int64_t>> ranked(counts.begin(), counts.end());
  const size_t keep = std::min<size_t>(ranked.size(), vocab_size - kNumSpecials);
  auto order = [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  };
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(keep),
                    ranked.end(), order);
  v.words_ = {"<pad>", "<unk>", "<cls>"};
  for (size_t i = 0; i < keep; ++i) v.words_.push_back(std::move(ranked[i].first));
  v.SetLabels(train);
  return v;
}

StatusOr<Vocabulary> Vocabulary::BuildHashed(const TextTable& train, uint32_t buckets,
                                             uint32_t ngrams, uint32_t seq_len) {
  if (buckets != 0 && buckets <= kNumSpecials) {
    return InvalidArgument("--hash_buckets " + std::to_string(buckets) + ": must exceed the " +
                           std::to_string(kNumSpecials) + " special tokens (or be 0: 63-bit keys)");
  }
  if (ngrams != 1 && ngrams != 2) return InvalidArgument("hashed text takes 1- or 2-grams");
  if (seq_len < 2) return InvalidArgument("--seq_len must be at least 2 (<cls> and one word)");
  if (train.texts.empty()) return InvalidArgument("the training text has no rows");
  Vocabulary v;
  v.seq_len_ = seq_len;
  v.hash_buckets_ = buckets;
  v.keys_ = buckets == 0;
  v.ngrams_ = ngrams;
  v.words_ = {"<pad>", "<unk>", "<cls>"};
  v.SetLabels(train);
  return v;
}

void Vocabulary::SetLabels(const TextTable& train) {
  std::set<std::string> distinct(train.labels.begin(), train.labels.end());
  labels_.assign(distinct.begin(), distinct.end());
  if (std::all_of(labels_.begin(), labels_.end(), IsInteger)) {
    std::sort(labels_.begin(), labels_.end(), [](const std::string& a, const std::string& b) {
      return std::stoll(a) < std::stoll(b);
    });
  }
  Index();
}

void Vocabulary::Index() {
  word_ids_.clear();
  label_ids_.clear();
  for (size_t i = 0; i < words_.size(); ++i) word_ids_.emplace(words_[i], static_cast<int64_t>(i));
  for (size_t i = 0; i < labels_.size(); ++i)
    label_ids_.emplace(labels_[i], static_cast<int64_t>(i));
}

std::string Vocabulary::Serialize() const {
  nlohmann::json j{{"tokenizer", "eps-words"},
                   {"version", kTokenizerVersion},
                   {"seq_len", seq_len_},
                   {"words", words_},
                   {"labels", labels_}};
  if (hashed()) {
    j["hash_buckets"] = hash_buckets_;  // 0: keys
    j["ngrams"] = ngrams_;
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // all UTF-8 already
}

StatusOr<Vocabulary> Vocabulary::Parse(std::string_view bytes) {
  const nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("vocabulary: not a JSON object");
  auto field = [&j](const char* name) -> const nlohmann::json* {
    auto it = j.find(name);
    return it == j.end() ? nullptr : &*it;
  };
  const nlohmann::json* tok = field("tokenizer");
  const nlohmann::json* version = field("version");
  if (tok == nullptr || !tok->is_string() || *tok != "eps-words" || version == nullptr ||
      !version->is_number_integer() || *version != kTokenizerVersion) {
    return InvalidArgument("vocabulary: not an eps-words tokenizer of version " +
                           std::to_string(kTokenizerVersion));
  }
  Vocabulary v;
  const nlohmann::json* seq = field("seq_len");
  if (seq == nullptr || !seq->is_number_unsigned() || *seq < 2 || *seq > (1u << 20))
    return InvalidArgument("vocabulary: 'seq_len' must be an integer in [2, 2^20]");
  v.seq_len_ = seq->get<uint32_t>();
  if (const nlohmann::json* buckets = field("hash_buckets")) {
    const nlohmann::json* ngrams = field("ngrams");
    if (!buckets->is_number_unsigned() || (*buckets != 0 && *buckets <= kNumSpecials) ||
        *buckets > UINT32_MAX || ngrams == nullptr || !ngrams->is_number_unsigned() ||
        (*ngrams != 1 && *ngrams != 2)) {
      return InvalidArgument(
          "vocabulary: 'hash_buckets' must be 0 or an integer in (3, 2^32) with 'ngrams' 1 or 2");
    }
    v.hash_buckets_ = buckets->get<uint32_t>();
    v.keys_ = v.hash_buckets_ == 0;
    v.ngrams_ = ngrams->get<uint32_t>();
  }
  for (const char* name : {"words", "labels"}) {
    const nlohmann::json* list = field(name);
    if (list == nullptr || !list->is_array())
      return InvalidArgument(std::string("vocabulary: '") + name + "' must be a list");
    std::vector<std::string>& out = name[0] == 'w' ? v.words_ : v.labels_;
    for (const auto& item : *list) {
      if (!item.is_string())
        return InvalidArgument(std::string("vocabulary: '") + name + "' holds a non-string");
      out.push_back(item.get<std::string>());
    }
  }
  // Texts without a word make a vocabulary of the specials alone: every word is <unk>.
  if (v.words_.size() < kNumSpecials || v.words_[0] != "<pad>" || v.words_[1] != "<unk>" ||
      v.words_[2] != "<cls>") {
    return InvalidArgument("vocabulary: 'words' must start with <pad>, <unk>, <cls>");
  }
  if (v.labels_.empty()) return InvalidArgument("vocabulary: no labels");
  v.Index();
  if (v.word_ids_.size() != v.words_.size()) return InvalidArgument("vocabulary: duplicate words");
  if (v.label_ids_.size() != v.labels_.size()) return InvalidArgument("vocabulary: duplicate labels");
  return v;
}

// FNV-1a, 64 bits: a fixed function of the bytes, the same on every machine.
static uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

int64_t Vocabulary::IdOf(const std::string& word) const {
  if (hashed()) {
    const uint64_t rows = keys_ ? uint64_t{kUnboundedRows} : hash_buckets_;
    return kNumSpecials + static_cast<int64_t>(Fnv1a64(word) % (rows - kNumSpecials));
  }
  auto it = word_ids_.find(word);
  return it == word_ids_.end() ? kUnkId : it->second;
}

int64_t Vocabulary::ClassOf(const std::string& label) const {
  auto it = label_ids_.find(label);
  return it == label_ids_.end() ? -1 : it->second;
}

bool Vocabulary::Encode(std::string_view text, int64_t* out) const {
  bool more = false;
  const std::vector<std::string> words = TokenizeText(text, seq_len_ - 1, &more);
  out[0] = kClsId;
  size_t i = 1;
  for (size_t w = 0; w < words.size(); ++w) {
    if (ngrams_ == 2 && w > 0) {
      if (i == seq_len_) return true;  // the bigram and the words after it are left out
      out[i++] = IdOf(words[w - 1] + " " + words[w]);
    }
    if (i == seq_len_) return true;
    out[i++] = IdOf(words[w]);
  }
  for (; i < seq_len_; ++i) out[i] = kPadId;
  return more;
}

}  // namespace eps
