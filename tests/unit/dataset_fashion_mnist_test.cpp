#include <gtest/gtest.h>
#include <sys/resource.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "fashion_mnist/fashion_mnist.hpp"
#include "fashion_mnist/idx_reader.hpp"
#include "tessera/base/error.hpp"

namespace tessera::fashion_mnist {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> idx_bytes(std::uint32_t magic, const std::vector<std::uint32_t>& dims,
                                    std::size_t data_bytes, std::uint8_t fill = 7) {
  std::vector<std::uint8_t> out;
  auto put = [&](std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<std::uint8_t>(v >> shift));
  };
  put(magic);
  for (const auto d : dims) put(d);
  out.insert(out.end(), data_bytes, fill);
  return out;
}

void write_gz(const fs::path& file, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(file.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera_idx_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A complete, valid set of four files: `train` and `test` 4x3 images.
  void write_set(std::uint32_t train, std::uint32_t test) {
    write_gz(dir_ / "train-images-idx3-ubyte.gz", idx_bytes(0x803, {train, 4, 3}, train * 12, 255));
    write_gz(dir_ / "train-labels-idx1-ubyte.gz", idx_bytes(0x801, {train}, train, 3));
    write_gz(dir_ / "t10k-images-idx3-ubyte.gz", idx_bytes(0x803, {test, 4, 3}, test * 12, 0));
    write_gz(dir_ / "t10k-labels-idx1-ubyte.gz", idx_bytes(0x801, {test}, test, 9));
  }

  // The DataError message of reading the set, or "" when it loads.
  std::string load_error() {
    try {
      const FashionMnist data(FashionMnistConfig{dir_, true});
      return "";
    } catch (const DataError& e) {
      return e.what();
    }
  }

  fs::path dir_;
};

TEST_F(IdxFiles, ReadsAWellFormedSet) {
  write_set(5, 2);
  const FashionMnist data(FashionMnistConfig{dir_, false});
  EXPECT_EQ(data.size(Split::train), 5U);
  EXPECT_EQ(data.size(Split::test), 2U);
  EXPECT_EQ(data.layout().input_shape, Shape{12});
  const std::vector<std::size_t> indices{4, 0};
  const Batch b = data.gather(Split::train, indices);
  EXPECT_EQ(b.inputs.shape(), (Shape{2, 12}));
  EXPECT_EQ(b.inputs.as<float>()[0], 1.0F);  // 255 scaled to [0, 1]
  EXPECT_EQ(b.targets.as<std::int64_t>()[1], 3);
}

TEST_F(IdxFiles, NormalisesWithTheFashionMnistStatistics) {
  write_set(1, 1);
  const FashionMnist data(FashionMnistConfig{dir_, true});
  const std::vector<std::size_t> first{0};
  EXPECT_NEAR(data.gather(Split::train, first).inputs.as<float>()[0], (1.0F - kMean) / kStd, 1e-6);
  EXPECT_NEAR(data.gather(Split::test, first).inputs.as<float>()[0], -kMean / kStd, 1e-6);
}

TEST_F(IdxFiles, RejectsABadMagicNumberNamingTheFile) {
  write_set(3, 2);
  write_gz(dir_ / "train-labels-idx1-ubyte.gz", idx_bytes(0x803, {3}, 3));
  const std::string error = load_error();
  EXPECT_NE(error.find("train-labels-idx1-ubyte.gz"), std::string::npos) << error;
  EXPECT_NE(error.find("bad magic number 0x00000803"), std::string::npos) << error;
}

TEST_F(IdxFiles, RejectsATruncatedFile) {
  write_set(3, 2);
  write_gz(dir_ / "t10k-images-idx3-ubyte.gz", idx_bytes(0x803, {2, 4, 3}, 20));
  const std::string error = load_error();
  EXPECT_NE(error.find("t10k-images-idx3-ubyte.gz"), std::string::npos) << error;
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
}

// Found by tests/fuzz (idx): a 28-byte file whose header promised 6 GB was given 6 GB at once.
TEST_F(IdxFiles, AHeaderPromisingGigabytesCostsNoMoreMemoryThanTheFileHolds) {
  const fs::path file = dir_ / "huge.idx";
  write_gz(file, idx_bytes(0x803, {60000, 65536, 4}, 100));  // 15 GiB promised, 100 B held
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  try {
    (void)read_idx_ubyte(file, 3);
    FAIL() << "a truncated file was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "KiB of peak memory";
}

// (2^22 x 2^21 x 2^21 wraps a 64-bit size to 0: the reader returned four million empty images.)
TEST_F(IdxFiles, DimensionsWhoseProductOverflowsAreRefused) {
  const fs::path file = dir_ / "wrapped.idx";
  write_gz(file, idx_bytes(0x803, {1u << 22, 1u << 21, 1u << 21}, 0));
  try {
    (void)read_idx_ubyte(file, 3);
    FAIL() << "dimensions whose product wraps to 0 were accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("more than any IDX data set"), std::string::npos)
        << e.what();
  }
}

TEST_F(IdxFiles, RejectsACutGzipStream) {
  write_set(3, 2);
  const fs::path file = dir_ / "train-images-idx3-ubyte.gz";
  fs::resize_file(file, fs::file_size(file) - 12);
  const std::string error = load_error();
  EXPECT_NE(error.find("train-images-idx3-ubyte.gz"), std::string::npos) << error;
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
}

TEST_F(IdxFiles, RejectsImageAndLabelCountsThatDisagree) {
  write_set(3, 2);
  write_gz(dir_ / "train-labels-idx1-ubyte.gz", idx_bytes(0x801, {4}, 4));
  const std::string error = load_error();
  EXPECT_NE(error.find("3 images"), std::string::npos) << error;
  EXPECT_NE(error.find("4 labels"), std::string::npos) << error;
}

TEST_F(IdxFiles, RejectsAMissingFile) {
  write_set(3, 2);
  fs::remove(dir_ / "t10k-labels-idx1-ubyte.gz");
  const std::string error = load_error();
  EXPECT_NE(error.find("t10k-labels-idx1-ubyte.gz: file not found"), std::string::npos) << error;
}

TEST_F(IdxFiles, RejectsAFileWithNoImagesNamingIt) {
  // Used to load, and failed later in the trainer with a C++ source path and no file name.
  write_set(0, 2);
  const std::string error = load_error();
  EXPECT_NE(error.find("train-images-idx3-ubyte.gz: holds no images"), std::string::npos) << error;
  write_set(3, 0);
  EXPECT_NE(load_error().find("t10k-images-idx3-ubyte.gz: holds no images"), std::string::npos);
}

TEST_F(IdxFiles, SaysAFolderIsAFolderNotAMissingFile) {
  write_set(3, 2);
  fs::remove(dir_ / "train-labels-idx1-ubyte.gz");
  fs::create_directory(dir_ / "train-labels-idx1-ubyte.gz");
  const std::string error = load_error();
  EXPECT_NE(error.find("train-labels-idx1-ubyte.gz: is a folder"), std::string::npos) << error;
}

TEST_F(IdxFiles, SaysASymlinkLoopIsALoop) {
  write_set(3, 2);
  const fs::path file = dir_ / "t10k-images-idx3-ubyte.gz";
  fs::remove(file);
  fs::create_symlink(dir_ / "loop-b", dir_ / "loop-a");
  fs::create_symlink(dir_ / "loop-a", dir_ / "loop-b");
  fs::create_symlink(dir_ / "loop-a", file);
  const std::string error = load_error();
  EXPECT_NE(error.find("t10k-images-idx3-ubyte.gz: cannot be read: a symbolic link loop"),
            std::string::npos)
      << error;
}

TEST_F(IdxFiles, SaysWhereADanglingSymlinkPoints) {
  write_set(3, 2);
  const fs::path file = dir_ / "t10k-images-idx3-ubyte.gz";
  fs::remove(file);
  fs::create_symlink(dir_ / "gone.gz", file);
  const std::string error = load_error();
  EXPECT_NE(error.find("t10k-images-idx3-ubyte.gz: a symbolic link to " +
                       (dir_ / "gone.gz").string() + ", which does not exist"),
            std::string::npos)
      << error;
}

TEST_F(IdxFiles, RejectsALabelOutsideTheTenClasses) {
  write_set(3, 2);
  write_gz(dir_ / "t10k-labels-idx1-ubyte.gz", idx_bytes(0x801, {2}, 2, 10));
  EXPECT_NE(load_error().find("not a class"), std::string::npos);
}

TEST(FashionMnistInstalled, HasSixtyThousandTrainingAndTenThousandTestImages) {
  const fs::path path = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(path / "train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << path << " is missing: install Debian's dataset-fashion-mnist";
  }
  const FashionMnist data(FashionMnistConfig{path, true});
  EXPECT_EQ(data.size(Split::train), 60000U);
  EXPECT_EQ(data.size(Split::test), 10000U);
  EXPECT_EQ(data.layout(), (SampleLayout{DType::f32, {784}, {}, 10}));
  // The normalised training pixels have mean about 0 and deviation about 1.
  std::vector<std::size_t> indices(2000);
  for (std::size_t i = 0; i < indices.size(); ++i) indices[i] = i * 30;
  const Batch b = data.gather(Split::train, indices);
  double sum = 0.0;
  double square = 0.0;
  for (const float v : b.inputs.as<float>()) {
    sum += v;
    square += double{v} * v;
  }
  const double n = static_cast<double>(b.inputs.count());
  EXPECT_NEAR(sum / n, 0.0, 0.05);
  EXPECT_NEAR(std::sqrt(square / n - (sum / n) * (sum / n)), 1.0, 0.05);
}

}  // namespace
}  // namespace tessera::fashion_mnist
