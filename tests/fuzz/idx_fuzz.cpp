// Fuzz target: an IDX file (plain or gzip) as the fashion_mnist data set reads its images
// (rank 3) and labels (rank 1). A DataError is the right answer to a bad file; any other
// exception, a crash, a sanitizer report or an allocation far beyond the file is a finding.

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fashion_mnist/idx_reader.hpp"
#include "fuzz_support.hpp"
#include "tessera/base/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const tessera::fuzz::ScratchFolder scratch("idx");
  const auto file = scratch.write("input.idx", tessera::fuzz::as_text(data, size));
  for (const std::size_t rank : {1, 3}) {
    try {
      const auto array = tessera::fashion_mnist::read_idx_ubyte(file, rank);
      // The data holds exactly the product of the dimensions, computed without wrapping.
      std::size_t expected = 1;
      for (const std::size_t d : array.dims)
        if (__builtin_mul_overflow(expected, d, &expected)) std::abort();
      if (array.dims.size() != rank || array.data.size() != expected) std::abort();
    } catch (const tessera::DataError&) {
    }
  }
  return 0;
}
