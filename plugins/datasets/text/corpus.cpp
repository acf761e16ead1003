#include "text/corpus.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "tessera/base/error.hpp"
#include "text/token_file_writer.hpp"

namespace tessera::text {
namespace {

namespace fs = std::filesystem;

bool is_text_name(const std::string& name) {
  for (const char* suffix : {".rst", ".txt", ".rst.gz", ".txt.gz"}) {
    if (name.ends_with(suffix)) return true;
  }
  return false;
}

std::string no_corpus_hint() {
  return "install the package " + std::string(kDefaultCorpusPackage) +
         " (tools/dev/install-deps.sh does) or name another corpus file or folder";
}

struct GzCloser {
  void operator()(gzFile_s* f) const noexcept { gzclose(f); }
};

}  // namespace

std::vector<fs::path> corpus_documents(const fs::path& source) {
  std::error_code ec;
  const auto status = fs::status(source, ec);
  if (status.type() == fs::file_type::not_found) {
    throw DataError(source.string() + ": corpus not found; " + no_corpus_hint());
  }
  if (ec) throw DataError(source.string() + ": corpus cannot be read: " + ec.message());
  if (status.type() == fs::file_type::regular) return {source};
  if (status.type() != fs::file_type::directory) {
    throw DataError(source.string() + ": corpus is neither a file nor a folder");
  }

  std::vector<std::pair<std::string, fs::path>> found;  // (relative path, path)
  fs::recursive_directory_iterator it(source, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const auto& entry = *it;
    auto relative = entry.path().lexically_relative(source).generic_string();
    if (relative == "translations") {
      it.disable_recursion_pending();
      continue;
    }
    std::error_code entry_ec;  // an entry that vanished or cannot be read is no document
    if (!entry.is_regular_file(entry_ec) || entry.is_symlink(entry_ec)) continue;
    if (!is_text_name(entry.path().filename().string())) continue;
    found.emplace_back(std::move(relative), entry.path());
  }
  if (ec) throw DataError(source.string() + ": corpus folder cannot be listed: " + ec.message());
  if (found.empty()) {
    throw DataError(source.string() +
                    ": corpus folder holds no .rst, .txt, .rst.gz or .txt.gz file; " +
                    no_corpus_hint());
  }
  // std::string's < compares as unsigned bytes (char_traits<char>::lt), as LC_ALL=C sort does.
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<fs::path> documents;
  documents.reserve(found.size());
  for (auto& [relative, path] : found) documents.push_back(std::move(path));
  return documents;
}

void read_document(const fs::path& document,
                   const std::function<void(std::span<const std::byte>)>& sink) {
  errno = 0;
  std::unique_ptr<gzFile_s, GzCloser> in(gzopen(document.c_str(), "rb"));
  if (!in) {
    throw DataError(document.string() +
                    ": cannot open: " + (errno != 0 ? std::strerror(errno) : "out of memory"));
  }
  std::array<std::byte, std::size_t{1} << 16> buffer;
  while (true) {
    const int got = gzread(in.get(), buffer.data(), static_cast<unsigned>(buffer.size()));
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(in.get(), &code);
      throw DataError(document.string() + ": cannot decompress: " +
                      (code == Z_BUF_ERROR ? "the gzip stream ends early" : message));
    }
    if (got == 0) {
      // zlib ends a gzip stream cut short like a whole one; only its error state tells them apart.
      int code = 0;
      (void)gzerror(in.get(), &code);
      if (code == Z_BUF_ERROR) {
        throw DataError(document.string() + ": cannot decompress: the gzip stream ends early");
      }
      return;
    }
    sink(std::span<const std::byte>(buffer.data(), static_cast<std::size_t>(got)));
  }
}

std::uint64_t validation_split(std::uint64_t token_count, double validation_fraction) {
  const auto validation = static_cast<std::uint64_t>(std::floor(
      static_cast<long double>(token_count) * static_cast<long double>(validation_fraction)));
  return token_count - std::min(validation, token_count);
}

PreparedCorpus prepare_token_file(const fs::path& source, const fs::path& output,
                                  double validation_fraction) {
  if (!(validation_fraction > 0.0 && validation_fraction < 1.0)) {
    throw DataError("validation fraction " + std::to_string(validation_fraction) +
                    " is outside (0, 1): a run needs both a training and a validation part");
  }
  const auto documents = corpus_documents(source);
  TokenFileWriter writer(output);
  for (const auto& document : documents) {
    read_document(document, [&](std::span<const std::byte> bytes) { writer.append(bytes); });
  }
  if (writer.token_count() == 0) {
    throw DataError(source.string() + ": corpus holds no bytes; nothing to train on");
  }
  const auto split = validation_split(writer.token_count(), validation_fraction);
  if (split == writer.token_count()) {
    throw DataError(source.string() + ": " + std::to_string(split) + " tokens times " +
                    std::to_string(validation_fraction) +
                    " leaves no validation token; use a larger validation fraction");
  }
  return PreparedCorpus{documents.size(), writer.commit(split)};
}

}  // namespace tessera::text
