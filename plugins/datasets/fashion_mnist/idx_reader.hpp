#pragma once
// Reader of the IDX format (Yann LeCun's MNIST files), gzip-compressed or plain.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace tessera::fashion_mnist {

// An IDX file of unsigned bytes (type code 0x08): dims[0] items of dims[1] * dims[2] ... bytes.
struct IdxArray {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;
};

// Reads `file` (gzip or plain; zlib tells them apart) and checks that its magic number is
// 0x0000_08_NN with NN == expected_rank, and that it holds exactly the bytes its header
// promises. Throws DataError naming the file and what is wrong: missing, not gzip-readable,
// bad magic number, truncated, trailing bytes.
[[nodiscard]] IdxArray read_idx_ubyte(const std::filesystem::path& file, std::size_t expected_rank);

}  // namespace tessera::fashion_mnist
