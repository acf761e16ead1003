#pragma once
// What the ABI tests share: where the deliberately broken plugins were built.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace tessera::abi_test {

inline std::filesystem::path plugin_file(const std::string& stem) {
  return std::filesystem::path(TESSERA_ABI_PLUGIN_DIR) / ("lib" + stem + ".so");
}

inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

}  // namespace tessera::abi_test
