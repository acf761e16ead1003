#pragma once
// Forging checkpoint manifests for tests of the consistency checks: the body is edited and the
// CRC line recomputed, so the manifest still verifies its own checksum.

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "tessera/runtime/checkpoint.hpp"

namespace tessera::testing {

inline std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void forge_manifest(const std::filesystem::path& folder,
                           const std::function<std::string(std::string)>& edit) {
  const auto file = folder / "manifest";
  std::string body = read_text(file);
  body.erase(body.rfind("manifest-crc32 "));
  body = edit(body);
  char crc[9];
  std::snprintf(crc, sizeof crc, "%08x",
                crc32(std::as_bytes(std::span<const char>(body.data(), body.size()))));
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      << body << "manifest-crc32 " << crc << "\n";
}

// `text` with the first `from` replaced by `to`; a test failure if there is none.
inline std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' not in:\n" << text;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

}  // namespace tessera::testing
