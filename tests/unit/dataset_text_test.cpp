// The `text` data set and its token file: `tessera data prepare`'s one pass, the file's header and
// every refusal, windows of context + 1 tokens with next-token targets, and the real corpus.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/runtime/data_order.hpp"
#include "text/corpus.hpp"
#include "text/text_dataset.hpp"
#include "text/token_file.hpp"

namespace tessera::text {
namespace {

namespace fs = std::filesystem;

// 1001 bytes that cover every byte value (so a byte above 127 read as a negative char shows)
// and never repeat with a period of 7 (so a window off by one token shows).
std::string corpus_of_1001_bytes() {
  std::string bytes(1001, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>((i * 131 + i / 256) % 256);
  }
  return bytes;
}

std::string read_all(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << file;
}

void write_gz(const fs::path& file, const std::string& bytes) {
  gzFile f = gzopen(file.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

std::uint32_t crc_of(const std::string& bytes) {
  return crc32_of(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())));
}

class TextCorpus : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-text-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The 1001-byte corpus prepared with a validation fraction of 0.098: 98 validation tokens
  // (98.098 rounded down), split at 903. Both parts are multiples of 7, the edge where one
  // window more would take its last target from past its part.
  fs::path prepared_1001() {
    write_all(dir_ / "corpus.txt", corpus_of_1001_bytes());
    const auto tokens = dir_ / "corpus.tokens";
    (void)prepare_token_file(dir_ / "corpus.txt", tokens, 0.098);
    return tokens;
  }

  // Writes `bytes` as a token file and returns the refusal its loading throws.
  std::string refusal_of(const std::string& bytes) {
    const auto file = dir_ / "damaged.tokens";
    write_all(file, bytes);
    try {
      MappedTokenFile mapped(file);
    } catch (const DataError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file.string()), std::string::npos) << what;
      EXPECT_NE(what.find("tessera data prepare --output " + file.string()), std::string::npos)
          << what;
      return what;
    }
    ADD_FAILURE() << "loading accepted the damaged file";
    return {};
  }

  fs::path dir_;
};

TEST_F(TextCorpus, PrepareWritesHeaderAndEveryByteThenMapsThemBack) {
  const auto corpus = corpus_of_1001_bytes();
  write_all(dir_ / "corpus.txt", corpus);
  const auto prepared = prepare_token_file(dir_ / "corpus.txt", dir_ / "corpus.tokens", 0.1);
  EXPECT_EQ(prepared.documents, 1U);
  EXPECT_EQ(prepared.header.token_count, 1001U);
  EXPECT_EQ(prepared.header.split, 901U);
  EXPECT_EQ(prepared.header.token_crc, crc_of(corpus));

  const auto file = read_all(dir_ / "corpus.tokens");
  ASSERT_EQ(file.size(), kTokenFileHeaderBytes + 1001);
  EXPECT_EQ(file.substr(0, 8), "TSRTOKNS");
  EXPECT_EQ(file.substr(kTokenFileHeaderBytes), corpus);

  const MappedTokenFile mapped(dir_ / "corpus.tokens");
  EXPECT_EQ(mapped.header().token_count, 1001U);
  EXPECT_EQ(mapped.header().split, 901U);
  ASSERT_EQ(mapped.tokens().size(), 1001U);
  EXPECT_TRUE(std::equal(mapped.tokens().begin(), mapped.tokens().end(),
                         reinterpret_cast<const std::uint8_t*>(corpus.data())));
  // No temporary is left beside the output.
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 2U);
}

TEST_F(TextCorpus, ValidationTakesTheLastFloorOfTheFractionOfTokens) {
  EXPECT_EQ(validation_split(1001, 0.1), 901U);   // 100.1 validation tokens -> 100
  EXPECT_EQ(validation_split(1001, 0.25), 751U);  // 250.25 -> 250
  EXPECT_EQ(validation_split(1000, 0.5), 500U);
  EXPECT_EQ(validation_split(1001, 0.098), 903U);  // 98.098 -> 98
  EXPECT_EQ(validation_split(9, 0.1), 9U);         // 0.9 -> none
}

TEST_F(TextCorpus, WindowsAreContextPlusOneTokensAndTargetsAreTheInputsShiftedByOne) {
  const auto corpus = corpus_of_1001_bytes();
  const TextDataset data(TextConfig{prepared_1001(), 7});
  // Training tokens [0, 903): windows start at 0, 7, ..., 889 and end at 896 (the next would
  // need token 903); validation tokens [903, 1001): 13 windows ending at 903 + 91 = 994.
  ASSERT_EQ(data.size(Split::train), 128U);
  ASSERT_EQ(data.size(Split::test), 13U);
  EXPECT_EQ(data.layout(), (SampleLayout{DType::i64, {7}, {7}, 256}));
  EXPECT_EQ(data.bytes_per_target(), 1.0);

  for (const Split split : {Split::train, Split::test}) {
    const std::size_t first = split == Split::train ? 0 : 903;
    std::vector<std::size_t> indices(data.size(split));
    std::iota(indices.rbegin(), indices.rend(), 0);  // backwards: order is the caller's
    const Batch batch = data.gather(split, indices);
    ASSERT_EQ(batch.inputs.dtype(), DType::i64);
    ASSERT_EQ(batch.targets.dtype(), DType::i64);
    ASSERT_EQ(batch.inputs.shape(), (Shape{indices.size(), 7}));
    ASSERT_EQ(batch.targets.shape(), (Shape{indices.size(), 7}));
    const auto inputs = batch.inputs.as<std::int64_t>();
    const auto targets = batch.targets.as<std::int64_t>();
    for (std::size_t r = 0; r < indices.size(); ++r) {
      for (std::size_t t = 0; t < 7; ++t) {
        const std::size_t at = first + indices[r] * 7 + t;
        ASSERT_EQ(inputs[r * 7 + t], static_cast<unsigned char>(corpus[at])) << r << "," << t;
        ASSERT_EQ(targets[r * 7 + t], static_cast<unsigned char>(corpus[at + 1])) << r << "," << t;
      }
    }
  }
  // Bytes above 127 arrive as token ids 128..255: token 1 is (131 + 0) % 256.
  const Batch first = data.gather(Split::train, std::vector<std::size_t>{0});
  EXPECT_EQ(first.inputs.as<std::int64_t>()[1], 131);
  // The last training window's last target is token 896; the first validation input is 903.
  const Batch last = data.gather(Split::train, std::vector<std::size_t>{127});
  EXPECT_EQ(last.targets.as<std::int64_t>()[6], static_cast<unsigned char>(corpus[896]));
  const Batch validation = data.gather(Split::test, std::vector<std::size_t>{0});
  EXPECT_EQ(validation.inputs.as<std::int64_t>()[0], static_cast<unsigned char>(corpus[903]));
}

TEST_F(TextCorpus, AnEpochDealtOverThreeRanksTargetsEveryTrainingTokenButTheFirstOnce) {
  const auto corpus = corpus_of_1001_bytes();
  const TextDataset data(TextConfig{prepared_1001(), 7});
  // How often each training token position is a target, over every rank's batches of one epoch
  // (128 windows over 3 ranks of batch 5: 9 global batches, a short last one).
  std::vector<int> targeted(903, 0);
  for (int rank = 0; rank < 3; ++rank) {
    const EpochShard shard({data.size(Split::train), 4, 1234, rank, 3, 5});
    for (std::size_t step = 0; step < shard.steps(); ++step) {
      const auto indices = shard.batch(step);
      const Batch batch = data.gather(Split::train, indices);
      const auto targets = batch.targets.as<std::int64_t>();
      for (std::size_t r = 0; r < indices.size(); ++r) {
        for (std::size_t t = 0; t < 7; ++t) {
          const std::size_t at = indices[r] * 7 + t + 1;
          ASSERT_EQ(targets[r * 7 + t], static_cast<unsigned char>(corpus[at]));
          ++targeted[at];
        }
      }
    }
  }
  // Tokens 1..896 once; token 0 (never a target) and 897..902 (the tail shorter than a window)
  // never.
  for (std::size_t at = 0; at < targeted.size(); ++at) {
    ASSERT_EQ(targeted[at], at >= 1 && at <= 896 ? 1 : 0) << "token " << at;
  }
}

TEST_F(TextCorpus, WindowCountLeavesNoTargetPastThePart) {
  EXPECT_EQ(window_count(901, 7), 128U);
  EXPECT_EQ(window_count(8, 7), 1U);  // exactly one window of 8 tokens
  EXPECT_EQ(window_count(7, 7), 0U);
  EXPECT_EQ(window_count(0, 7), 0U);
  EXPECT_EQ(window_count(15, 7), 2U);
  EXPECT_EQ(window_count(14, 7), 1U);
}

TEST_F(TextCorpus, AFolderIsItsEnglishTextFilesInByteOrderOfTheirPathsGzipDecompressed) {
  fs::create_directories(dir_ / "src" / "A");
  fs::create_directories(dir_ / "src" / "A-b");
  fs::create_directories(dir_ / "src" / "translations" / "it_IT");
  fs::create_directories(dir_ / "src" / "sub" / "translations");
  write_all(dir_ / "src" / "b.txt", "bee\n");
  write_gz(dir_ / "src" / "a.rst.gz", "ay\n");
  write_all(dir_ / "src" / "A" / "x.txt", "A/x\n");
  write_all(dir_ / "src" / "A-b" / "x.txt", "A-b/x\n");
  write_gz(dir_ / "src" / "sub" / "translations" / "kept.txt.gz", "deeper translations stay\n");
  write_all(dir_ / "src" / "translations" / "it_IT" / "index.rst", "tradotto\n");
  write_all(dir_ / "src" / "image.png", "not text");
  write_all(dir_ / "src" / "notes.rst.bak", "not text either");
  fs::create_symlink(dir_ / "src" / "b.txt", dir_ / "src" / "c.txt");

  const auto documents = corpus_documents(dir_ / "src");
  std::vector<std::string> relative;
  for (const auto& d : documents) relative.push_back(d.lexically_relative(dir_ / "src").string());
  // '-' (0x2D) sorts before '/' (0x2F), and capitals before small letters.
  EXPECT_EQ(relative, (std::vector<std::string>{"A-b/x.txt", "A/x.txt", "a.rst.gz", "b.txt",
                                                "sub/translations/kept.txt.gz"}));

  // Named with a trailing slash, the folder is the same corpus.
  EXPECT_EQ(corpus_documents(dir_.string() + "/src/").size(), documents.size());

  const auto prepared = prepare_token_file(dir_ / "src", dir_ / "out.tokens", 0.5);
  EXPECT_EQ(prepared.documents, 5U);
  const std::string expected = "A-b/x\nA/x\nay\nbee\ndeeper translations stay\n";
  EXPECT_EQ(read_all(dir_ / "out.tokens").substr(kTokenFileHeaderBytes), expected);
  EXPECT_EQ(prepared.header.split, expected.size() - expected.size() / 2);
}

TEST_F(TextCorpus, AFailedPrepareLeavesTheOldFileAndNoTemporary) {
  const auto tokens = prepared_1001();
  const auto before = read_all(tokens);
  fs::create_directories(dir_ / "src");
  write_all(dir_ / "src" / "a.txt", "fine\n");
  std::string gz;
  write_gz(dir_ / "whole.gz", std::string(5000, 'x'));
  gz = read_all(dir_ / "whole.gz");
  write_all(dir_ / "src" / "b.txt.gz", gz.substr(0, gz.size() / 2));  // the stream ends early
  try {
    (void)prepare_token_file(dir_ / "src", tokens, 0.1);
    FAIL() << "a cut gzip stream was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "src" / "b.txt.gz").string()), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(read_all(tokens), before);
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << entry.path();
  }
}

TEST_F(TextCorpus, PrepareRefusesAMissingOrEmptyCorpusAndAnEmptyValidationPart) {
  const auto expect_refusal = [&](const fs::path& source, double fraction,
                                  const std::string& says) {
    try {
      (void)prepare_token_file(source, dir_ / "out.tokens", fraction);
      ADD_FAILURE() << "accepted " << source;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir_ / "out.tokens"));
  };
  expect_refusal(
      dir_ / "absent", 0.1,
      (dir_ / "absent").string() + ": corpus not found; install the package linux-doc-6.1");
  fs::create_directories(dir_ / "empty");
  expect_refusal(dir_ / "empty", 0.1, "holds no .rst, .txt, .rst.gz or .txt.gz file");
  write_all(dir_ / "nine.txt", "123456789");
  expect_refusal(dir_ / "nine.txt", 0.1, "leaves no validation token");
  expect_refusal(dir_ / "nine.txt", 1.0, "outside (0, 1)");
  write_all(dir_ / "none.txt", "");
  expect_refusal(dir_ / "none.txt", 0.1, "corpus holds no bytes");
}

TEST_F(TextCorpus, AMissingTokenFileIsRefusedSayingHowToWriteIt) {
  const auto file = dir_ / "absent.tokens";
  try {
    const TextDataset data(TextConfig{file, 7});
    FAIL() << "a missing file was accepted";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), file.string() +
                                         ": file not found; write it with `tessera data prepare "
                                         "--output " +
                                         file.string() + "`");
  }
}

TEST_F(TextCorpus, EveryDamageToTheFileIsRefusedNamingIt) {
  const auto good = read_all(prepared_1001());
  // Changes one header field and reseals the header's checksum, so that the field's own check
  // (not the checksum) must catch it.
  const auto with_field = [&](std::size_t offset, std::uint64_t value, std::size_t bytes) {
    std::string changed = good;
    for (std::size_t i = 0; i < bytes; ++i)
      changed[offset + i] = static_cast<char>(value >> (8 * i));
    const auto crc = crc_of(changed.substr(0, 44));
    for (std::size_t i = 0; i < 4; ++i) changed[44 + i] = static_cast<char>(crc >> (8 * i));
    return changed;
  };
  EXPECT_NE(
      refusal_of(good.substr(0, 47)).find("truncated: 47 bytes, shorter than the 48-byte header"),
      std::string::npos);
  EXPECT_NE(refusal_of(good.substr(0, good.size() - 1))
                .find("truncated: the header counts 1001 tokens, the file holds 1000"),
            std::string::npos);
  EXPECT_NE(refusal_of(good + "x")
                .find("trailing bytes: the header counts 1001 tokens, the file holds 1002"),
            std::string::npos);
  std::string magic = good;
  magic[0] = 'X';
  EXPECT_NE(refusal_of(magic).find("not a tessera token file"), std::string::npos);
  EXPECT_NE(refusal_of(with_field(8, 2, 4)).find("format version 2, this tessera reads 1"),
            std::string::npos);
  std::string header = good;
  header[30] = static_cast<char>(header[30] ^ 1);  // inside the token count, not resealed
  EXPECT_NE(refusal_of(header).find("header checksum mismatch"), std::string::npos);
  std::string tokens = good;
  tokens[kTokenFileHeaderBytes + 500] = static_cast<char>(tokens[kTokenFileHeaderBytes + 500] ^ 4);
  EXPECT_NE(refusal_of(tokens).find("token checksum mismatch"), std::string::npos);
  EXPECT_NE(refusal_of(with_field(12, 50257, 4)).find("vocabulary of 50257 tokens of 1 byte(s)"),
            std::string::npos);
  EXPECT_NE(refusal_of(with_field(16, 2, 4)).find("vocabulary of 256 tokens of 2 byte(s)"),
            std::string::npos);
  EXPECT_NE(refusal_of(with_field(20, 1, 4)).find("reserved header field is not 0"),
            std::string::npos);
  EXPECT_NE(refusal_of(with_field(32, 1002, 8)).find("split point 1002 lies past the 1001 tokens"),
            std::string::npos);
}

TEST_F(TextCorpus, AContextTooLongForAPartIsRefusedNamingTheFile) {
  const auto file = prepared_1001();
  // 98 validation tokens hold one window of context 97, none of context 98.
  EXPECT_EQ(TextDataset(TextConfig{file, 97}).size(Split::test), 1U);
  try {
    const TextDataset data(TextConfig{file, 98});
    FAIL() << "a context longer than the validation part was accepted";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              file.string() +
                  ": its validation part holds 98 tokens, too few for one window of "
                  "context + 1 = 99; use a smaller context or prepare a larger corpus");
  }
}

// The sum of the sizes each gzip member records in its trailer (ISIZE, the size mod 2^32):
// how many bytes zlib must produce, learnt without decompressing.
std::uint64_t gzip_trailer_sizes(const std::vector<fs::path>& documents) {
  std::uint64_t total = 0;
  for (const auto& document : documents) {
    const auto bytes = read_all(document);
    if (bytes.size() < 2 || static_cast<unsigned char>(bytes[0]) != 0x1f ||
        static_cast<unsigned char>(bytes[1]) != 0x8b) {
      total += bytes.size();
      continue;
    }
    std::uint32_t size = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      size |= std::uint32_t{static_cast<unsigned char>(bytes[bytes.size() - 4 + i])} << (8 * i);
    }
    total += size;
  }
  return total;
}

TEST_F(TextCorpus, TheInstalledLinuxDocCorpusPreparesIntoMostlyAsciiWindows) {
  if (!fs::is_directory(kDefaultCorpus)) {
    GTEST_SKIP() << kDefaultCorpus << " is absent: install the Debian package "
                 << kDefaultCorpusPackage << " (tools/dev/install-deps.sh does)";
  }
  const auto documents = corpus_documents(kDefaultCorpus);
  EXPECT_GT(documents.size(), 3000U);
  for (const auto& d : documents) {
    ASSERT_FALSE(d.lexically_relative(kDefaultCorpus).string().starts_with("translations/")) << d;
  }
  const auto prepared = prepare_token_file(kDefaultCorpus, dir_ / "linux-doc.tokens", 0.1);
  const auto& header = prepared.header;
  EXPECT_EQ(header.token_count, gzip_trailer_sizes(documents));
  EXPECT_GT(header.token_count, 20'000'000U);  // about 25 MB of documentation
  EXPECT_EQ(header.split, validation_split(header.token_count, 0.1));

  const TextDataset data(TextConfig{dir_ / "linux-doc.tokens", 256});
  EXPECT_EQ(data.size(Split::train), (header.split - 1) / 256);
  EXPECT_EQ(data.size(Split::test), (header.token_count - header.split - 1) / 256);
  const auto tokens = data.part(Split::train);
  const auto non_ascii =
      std::count_if(tokens.begin(), tokens.end(), [](std::uint8_t b) { return b >= 128; });
  EXPECT_LT(static_cast<double>(non_ascii), 0.001 * static_cast<double>(tokens.size()));
  // The first document (Documentation/PCI/..., capitals first) begins the training part.
  std::string first;
  read_document(documents.front(), [&](std::span<const std::byte> bytes) {
    if (first.size() < 256) first.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  });
  ASSERT_GE(first.size(), 256U);
  const Batch batch = data.gather(Split::train, std::vector<std::size_t>{0});
  for (std::size_t t = 0; t < 256; ++t) {
    ASSERT_EQ(batch.inputs.as<std::int64_t>()[t], static_cast<unsigned char>(first[t])) << t;
  }
}

}  // namespace
}  // namespace tessera::text
