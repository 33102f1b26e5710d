// The tokenizer, the vocabulary and the TSV/JSONL readers (data/text.h), on hostile text.
#include "data/text.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "data/job_data.h"
#include "data/model_input.h"
#include "tests/data_files.h"

namespace eps {
namespace {

using namespace testing_data;
using Words = std::vector<std::string>;

TEST(Tokenizer, LowercasesAsciiAndSplitsAtPunctuation) {
  EXPECT_EQ(TokenizeText("Hello, WORLD! x2 foo_bar"), (Words{"hello", "world", "x2", "foo", "bar"}));
  EXPECT_EQ(TokenizeText(""), Words{});
  EXPECT_EQ(TokenizeText(" \t\n.,;"), Words{});
}

TEST(Tokenizer, KeepsNonAsciiCodePointsInWords) {
  EXPECT_EQ(TokenizeText("Größe café"), (Words{"gr\xc3\xb6\xc3\x9f" "e", "caf\xc3\xa9"}));
}

TEST(Tokenizer, InvalidUtf8AndNulSeparateWordsWithoutChangingThem) {
  const std::string clean = "buy cheap pills now";
  const char dirty[] = "buy\xff" "cheap\0pills\xc3 now";  // a NUL inside: give the size
  EXPECT_EQ(TokenizeText(std::string(dirty, sizeof(dirty) - 1)), TokenizeText(clean));
  // Overlong, surrogate and truncated sequences: separators too.
  EXPECT_EQ(TokenizeText("a\xc0\xafz\xed\xa0\x80y\xe2\x82"), (Words{"a", "z", "y"}));
}

TEST(Tokenizer, CutsLongWordsAndStopsAtMaxWords) {
  const std::string longword(100, 'a');
  const Words w = TokenizeText(longword + " b");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], std::string(kMaxWordBytes, 'a'));
  bool more = false;
  EXPECT_EQ(TokenizeText("a b c", 2, &more), (Words{"a", "b"}));
  EXPECT_TRUE(more);
  EXPECT_EQ(TokenizeText("a b", 2, &more), (Words{"a", "b"}));
  EXPECT_FALSE(more);
}

TEST(Tokenizer, NeverCrashesOnRandomBytes) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string s(rng() % 300, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    for (const std::string& w : TokenizeText(s)) {
      EXPECT_FALSE(w.empty());
      EXPECT_LE(w.size(), kMaxWordBytes);
    }
  }
}

TextTable Table(Words texts, Words labels) {
  TextTable t;
  t.texts = std::move(texts);
  t.labels = std::move(labels);
  for (size_t i = 0; i < t.texts.size(); ++i) t.lines.push_back(static_cast<int64_t>(i) + 2);
  return t;
}

TEST(Vocabulary, TakesTheMostFrequentWordsWithTiesInByteOrder) {
  auto v = Vocabulary::Build(Table({"b a c", "c b", "c d"}, {"spam", "ham", "spam"}), 6, 4);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->words(), (Words{"<pad>", "<unk>", "<cls>", "c", "b", "a"}));
  EXPECT_EQ(v->labels(), (Words{"ham", "spam"}));
  int64_t ids[4];
  EXPECT_FALSE(v->Encode("C zz", ids));
  EXPECT_EQ(std::vector<int64_t>(ids, ids + 4), (std::vector<int64_t>{kClsId, 3, kUnkId, kPadId}));
  EXPECT_TRUE(v->Encode("a b c d", ids));  // <cls> + 3 words of 4
  EXPECT_EQ(std::vector<int64_t>(ids, ids + 4), (std::vector<int64_t>{kClsId, 5, 4, 3}));
  EXPECT_FALSE(v->Encode("", ids));  // empty text: <cls> and padding
  EXPECT_EQ(std::vector<int64_t>(ids, ids + 4), (std::vector<int64_t>{kClsId, 0, 0, 0}));
}

TEST(Vocabulary, FromAPretrainedOneKeepsItsWordsAndIdsAndTakesTheNewLabels) {
  auto pretrained = Vocabulary::Build(Table({"b a c", "c b"}, {"2002", "2003"}), 6, 4);
  ASSERT_TRUE(pretrained.ok());
  // Another training text with other frequencies and labels: the words stay the pretrained ones.
  const TextTable spam = Table({"d d d a", "zz"}, {"spam", "ham"});
  auto v = Vocabulary::Build(spam, 6, 4, &*pretrained);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->words(), pretrained->words());
  EXPECT_EQ(v->labels(), (Words{"ham", "spam"}));
  EXPECT_EQ(v->IdOf("a"), pretrained->IdOf("a"));
  EXPECT_EQ(v->IdOf("d"), kUnkId);
  // Its own build would have ranked d first.
  EXPECT_EQ(Vocabulary::Build(spam, 6, 4)->IdOf("d"), 3);
  // A pretrained vocabulary larger than --vocab_size, or of another seq_len, would not fit the model.
  EXPECT_EQ(Vocabulary::Build(spam, 5, 4, &*pretrained).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Vocabulary::Build(spam, 6, 8, &*pretrained).status().code(), StatusCode::kInvalidArgument);
}

TEST(Vocabulary, SortsIntegerLabelsNumerically) {
  auto v = Vocabulary::Build(Table({"a", "b", "c"}, {"10", "2", "-1"}), 8, 4);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->labels(), (Words{"-1", "2", "10"}));
}

TEST(Vocabulary, RoundTripsThroughItsSerializedFormAndRefusesBrokenOnes) {
  auto v = Vocabulary::Build(Table({"x y \xc3\xa9t\xc3\xa9", "y"}, {"a", "b"}), 100, 8);
  ASSERT_TRUE(v.ok());
  auto back = Vocabulary::Parse(v->Serialize());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->words(), v->words());
  EXPECT_EQ(back->labels(), v->labels());
  EXPECT_EQ(back->seq_len(), 8u);
  EXPECT_EQ(back->Serialize(), v->Serialize());
  for (const char* bad : {"", "{", "[]", R"({"tokenizer":"eps-words","version":2})",
                          R"({"tokenizer":"eps-words","version":1,"seq_len":8,"words":["<pad>"],"labels":["a"]})",
                          R"({"tokenizer":"eps-words","version":1,"seq_len":8,"words":["<pad>","<unk>","<cls>"],"labels":[]})",
                          R"({"tokenizer":"eps-words","version":1,"seq_len":8,"words":["<pad>","<unk>","<cls>","a","a"],"labels":["a"]})"}) {
    EXPECT_EQ(Vocabulary::Parse(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  // Texts without a single word (found by data_fuzz): the specials alone, and that parses back too.
  auto empty = Vocabulary::Build(Table({"", "..."}, {"x", "y"}), 100, 8);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->words().size(), 3u);
  EXPECT_TRUE(Vocabulary::Parse(empty->Serialize()).ok());
  EXPECT_FALSE(Vocabulary::Build(Table({"a"}, {"x"}), 3, 8).ok());
  EXPECT_FALSE(Vocabulary::Build(Table({}, {}), 100, 8).ok());
}

// FNV-1a 64 of `s` into the hashed ids' range, written again from its definition (docs/text.md).
int64_t Bucket(const std::string& s, uint64_t buckets) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return kNumSpecials + static_cast<int64_t>(h % (buckets - kNumSpecials));
}

TEST(Vocabulary, HashedWordsAndBigramsTakeFixedBucketsWithoutAVocabulary) {
  const TextTable train = Table({"b a", "c"}, {"spam", "ham"});
  auto uni = Vocabulary::BuildHashed(train, 1000, 1, 5);
  ASSERT_TRUE(uni.ok()) << uni.status().ToString();
  EXPECT_EQ(uni->words().size(), 3u);  // the specials alone
  EXPECT_EQ(uni->labels(), (Words{"ham", "spam"}));
  int64_t ids[5];
  EXPECT_FALSE(uni->Encode("Never SEEN", ids));  // any word has its bucket: no <unk>
  EXPECT_EQ(std::vector<int64_t>(ids, ids + 5),
            (std::vector<int64_t>{kClsId, Bucket("never", 1000), Bucket("seen", 1000), 0, 0}));
  auto bi = Vocabulary::BuildHashed(train, 1000, 2, 5);
  ASSERT_TRUE(bi.ok());
  EXPECT_TRUE(bi->Encode("x y z", ids));  // x, "x y", y, "y z": z is left out
  EXPECT_EQ(std::vector<int64_t>(ids, ids + 5),
            (std::vector<int64_t>{kClsId, Bucket("x", 1000), Bucket("x y", 1000), Bucket("y", 1000),
                                  Bucket("y z", 1000)}));
  EXPECT_FALSE(bi->Encode("x", ids));
  EXPECT_EQ(std::vector<int64_t>(ids, ids + 5),
            (std::vector<int64_t>{kClsId, Bucket("x", 1000), 0, 0, 0}));
  // The serialized form carries the hashing: a reader encodes the same ids.
  auto back = Vocabulary::Parse(bi->Serialize());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->hash_buckets(), 1000u);
  EXPECT_EQ(back->ngrams(), 2u);
  EXPECT_EQ(back->Serialize(), bi->Serialize());
  // Too few buckets, or n-grams other than 1 and 2, are refused; so is a broken hashed form.
  EXPECT_EQ(Vocabulary::BuildHashed(train, 3, 1, 5).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Vocabulary::BuildHashed(train, 100, 3, 5).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Vocabulary::Parse(
                R"({"tokenizer":"eps-words","version":1,"seq_len":8,"hash_buckets":2,"ngrams":1,)"
                R"("words":["<pad>","<unk>","<cls>"],"labels":["a"]})")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

// Buckets 0: each token keeps a 63-bit key (the formula with 2^63 - 1 buckets), a row of a
// table of unbounded keys; the serialized form says so with "hash_buckets": 0.
TEST(Vocabulary, HashedWithoutBucketsGivesTokensTheir63BitKeys) {
  const TextTable train = Table({"b a", "c"}, {"spam", "ham"});
  auto keys = Vocabulary::BuildHashed(train, 0, 2, 4);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_TRUE(keys->hashed() && keys->keys());
  int64_t ids[4];
  keys->Encode("x y", ids);
  const uint64_t rows = uint64_t{INT64_MAX};
  EXPECT_EQ(
      std::vector<int64_t>(ids, ids + 4),
      (std::vector<int64_t>{kClsId, Bucket("x", rows), Bucket("x y", rows), Bucket("y", rows)}));
  EXPECT_GT(std::max({ids[1], ids[2], ids[3]}), int64_t{1} << 40);  // keys, not rows of 2^32
  auto back = Vocabulary::Parse(keys->Serialize());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->keys());
  EXPECT_EQ(back->Serialize(), keys->Serialize());
  EXPECT_NE(keys->Serialize().find("\"hash_buckets\":0"), std::string::npos) << keys->Serialize();
  // A vocabulary of words is neither.
  auto words = Vocabulary::Build(train, 10, 4);
  ASSERT_TRUE(words.ok());
  EXPECT_FALSE(words->hashed() || words->keys());
}

TEST(TextReader, ReadsTsvWithEscapesAndJsonlWithIntegerLabels) {
  TempDir dir;
  const std::string tsv = dir.File("t.tsv");
  WriteBytes(tsv, "id\ttext\tlabel\r\n1\tline\\none\\ttab\tspam\n\n2\t\tham\n");
  auto t = ReadTextTable(tsv, "tsv", "text", "label", 0);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->texts, (Words{"line\none\ttab", ""}));
  EXPECT_EQ(t->labels, (Words{"spam", "ham"}));
  EXPECT_EQ(t->lines, (std::vector<int64_t>{2, 4}));
  const std::string jl = dir.File("t.jsonl");
  WriteBytes(jl, "{\"body\":\"hi\",\"y\":3,\"extra\":[1]}\n{\"body\":\"a\\u0000b\",\"y\":\"3\"}\n");
  t = ReadTextTable(jl, "jsonl", "body", "y", 1);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->labels, (Words{"3"}));
}

TEST(TextReader, WithoutALabelColumnReadsTheTextsOnly) {
  TempDir dir;
  const std::string tsv = dir.File("t.tsv");
  WriteBytes(tsv, "text\nfirst mail\nsecond\n");  // no label column at all
  auto t = ReadTextTable(tsv, "tsv", "text", "", 0);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->texts, (Words{"first mail", "second"}));
  EXPECT_EQ(t->labels, (Words{"", ""}));
  EXPECT_FALSE(ReadTextTable(tsv, "tsv", "text", "label", 0).ok());  // asked for, it must be there
  const std::string jl = dir.File("t.jsonl");
  WriteBytes(jl, "{\"text\":\"hi\"}\n{\"text\":\"there\",\"label\":[]}\n");
  t = ReadTextTable(jl, "jsonl", "text", "", 0);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->texts, (Words{"hi", "there"}));
}

void ExpectError(const std::string& format, const std::string& bytes, const std::string& says) {
  TempDir dir;
  const std::string p = dir.File("t." + format);
  WriteBytes(p, bytes);
  auto t = ReadTextTable(p, format, "text", "label", 0);
  ASSERT_FALSE(t.ok()) << bytes;
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find(says), std::string::npos) << t.status().message();
}

TEST(TextReader, RefusesMalformedFilesNamingTheLine) {
  ExpectError("tsv", "text\tlabel\nabc\tspam\nragged\n", "t.tsv:3");
  ExpectError("tsv", "body\tlabel\nabc\tspam\n", "text_column");
  ExpectError("tsv", "text\tlabel\nabc\t\n", "empty label");
  ExpectError("tsv", "text\tlabel\n", "no rows");
  ExpectError("tsv", "text\tlabel\nabc\tsp\xc0\x83" "am\n", "not UTF-8");  // overlong (found by data_fuzz)
  ExpectError("tsv", "", "empty file");
  ExpectError("jsonl", "{\"text\":\"a\",\"label\":\"x\"}\n{\"text\":\"a\",\n", "t.jsonl:2");
  ExpectError("jsonl", "{\"text\":\"a\xff\",\"label\":\"x\"}\n", "t.jsonl:1");
  ExpectError("jsonl", "{\"text\":1,\"label\":\"x\"}\n", "text_column");
  ExpectError("jsonl", "{\"text\":\"a\",\"label\":1.5}\n", "label_column");
  ExpectError("jsonl", "[1]\n", "not a JSON object");
}

TEST(TextDataset, TokenizesWithTheVocabularyCountsTruncationAndRefusesUnknownLabels) {
  TempDir dir;
  const std::string train = dir.File("train.tsv");
  const std::string big(1 << 20, 'w');  // a 1 MB mail: one word, cut
  std::string mails = "text\tlabel\nwin money now\tspam\nhello bob\tham\n";
  std::string huge;
  for (int i = 0; i < (1 << 18); ++i) huge += "ab ";  // 768 KiB of words
  mails += huge + "\tspam\n" + big + "\tham\n" + std::string("nul\\n\0x\xfe", 9) + "\tham\n";
  WriteBytes(train, mails);
  auto table = ReadTextTable(train, "tsv", "text", "label", 0);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  auto vocab = Vocabulary::Build(*table, 50, 6);
  ASSERT_TRUE(vocab.ok());
  auto ds = OpenTextDataset(train, "tsv", "text", "label", *vocab);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->data.size, 5);
  EXPECT_EQ(ds->data.sample_shape, (std::vector<int64_t>{6}));
  EXPECT_EQ(ds->data.feature_dtype, DataType::kInt64);
  EXPECT_EQ(ds->data.num_classes, 2);
  EXPECT_EQ(ds->truncated, 1);  // the 768 KiB one
  EXPECT_EQ(ds->data.ClassOf(0), 1);  // ham < spam
  const auto* ids = static_cast<const int64_t*>(ds->data.features);
  EXPECT_EQ(ids[3 * 6 + 0], kClsId);
  EXPECT_EQ(ids[3 * 6 + 2], kPadId);
  ZooSizes sizes;
  sizes.seq_len = 6;
  sizes.vocab_size = 50;
  sizes.num_classes = 2;
  EXPECT_TRUE(CheckModelInputFor("text_transformer", sizes, ds->data).ok());
  EXPECT_FALSE(CheckModelInputFor("mlp", sizes, ds->data).ok());
  sizes.seq_len = 7;
  EXPECT_FALSE(CheckModelInputFor("text_transformer", sizes, ds->data).ok());

  const std::string test = dir.File("test.tsv");
  WriteBytes(test, "text\tlabel\nok\tham\nnew\tphish\n");
  auto bad = OpenTextDataset(test, "tsv", "text", "label", *vocab);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("test.tsv:3"), std::string::npos);
  EXPECT_NE(bad.status().message().find("phish"), std::string::npos);
}

TEST(TextDataset, AJobOpensItsTextWithTheBuiltVocabularyAndNeedsOne) {
  TempDir dir;
  const std::string train = dir.File("train.jsonl");
  WriteBytes(train, "{\"text\":\"a b\",\"label\":\"x\"}\n{\"text\":\"b c\",\"label\":\"y\"}\n");
  JobSpec spec;
  spec.model = "text_transformer";
  spec.train_data = train;
  spec.test_limit = -1;
  spec.seq_len = 4;
  spec.vocab_size = 10;
  EXPECT_EQ(OpenJobData(spec).status().code(), StatusCode::kFailedPrecondition);
  auto bytes = BuildJobVocabulary(spec);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto vocab = Vocabulary::Parse(*bytes);
  ASSERT_TRUE(vocab.ok());
  EXPECT_EQ(vocab->words()[3], "b");
  auto data = OpenJobData(spec, std::make_shared<Vocabulary>(*vocab));
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(data->train.size, 2);
  EXPECT_NE(data->fingerprint.find("train_data"), std::string::npos);
}

}  // namespace
}  // namespace eps
