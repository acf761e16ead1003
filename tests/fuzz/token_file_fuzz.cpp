// Fuzz target: a prepared token file as the `text` data set maps it. A DataError is the right
// answer to a bad file; any other exception, a crash, a sanitizer report, or an accepted file
// whose header disagrees with its bytes is a finding.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "fuzz_support.hpp"
#include "tessera/base/error.hpp"
#include "text/token_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const tessera::fuzz::ScratchFolder scratch("token_file");
  const auto bytes = std::as_bytes(std::span<const std::uint8_t>(data, size));
  try {
    const auto header = tessera::text::parse_token_file_header(bytes, size, "input");
    if (header.split > header.token_count ||
        header.token_count != size - tessera::text::kTokenFileHeaderBytes) {
      std::abort();
    }
  } catch (const tessera::DataError&) {
  }
  // The same bytes through the file and its mapping, which also checks the tokens' checksum.
  const auto file = scratch.write("input.tokens", tessera::fuzz::as_text(data, size));
  try {
    const tessera::text::MappedTokenFile mapped(file);
    if (mapped.tokens().size() != size - tessera::text::kTokenFileHeaderBytes ||
        tessera::text::crc32_of(bytes.subspan(tessera::text::kTokenFileHeaderBytes)) !=
            mapped.header().token_crc) {
      std::abort();
    }
  } catch (const tessera::DataError&) {
  }
  return 0;
}
