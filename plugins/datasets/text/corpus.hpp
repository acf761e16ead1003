#pragma once
// A text corpus and the one pass that turns it into a token file (`tessera data prepare`).
// Tokens are bytes: a document's bytes are its tokens, no vocabulary to build or download.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <vector>

#include "text/token_file.hpp"

namespace tessera::text {

// The English half of the Linux kernel's documentation, as Debian 12's linux-doc-6.1 installs it
// (tools/dev/install-deps.sh installs that package).
inline constexpr const char* kDefaultCorpus = "/usr/share/doc/linux-doc-6.1/Documentation";
inline constexpr const char* kDefaultCorpusPackage = "linux-doc-6.1";
inline constexpr const char* kDefaultTokenFile = "linux-doc-6.1.tokens";
inline constexpr double kDefaultValidationFraction = 0.1;

// The documents of `source`, in the order their bytes are concatenated. A file is its own one
// document. In a folder: every regular file below it (symbolic links are not followed, so no
// document counts twice) whose name ends in .rst, .txt, .rst.gz or .txt.gz, except those under
// `source/translations` (the kernel's translations out of English), sorted by their path
// relative to `source` compared byte by byte, as `LC_ALL=C sort` orders them. Throws DataError
// naming `source` when it is missing, unreadable or holds no such file.
[[nodiscard]] std::vector<std::filesystem::path> corpus_documents(
    const std::filesystem::path& source);

// Passes the bytes of `document` to `sink` in order, in pieces: decompressed when it is gzip
// (zlib tells by its first bytes), else as stored. Throws DataError naming the document.
void read_document(const std::filesystem::path& document,
                   const std::function<void(std::span<const std::byte>)>& sink);

// The first validation token of a corpus of `token_count` tokens: the last
// floor(token_count * validation_fraction) tokens are the validation part.
[[nodiscard]] std::uint64_t validation_split(std::uint64_t token_count, double validation_fraction);

struct PreparedCorpus {
  std::size_t documents = 0;
  TokenFileHeader header;
};

// One pass over the documents of `source` into the token file `output`, written atomically
// (token_file_writer.hpp): an existing `output` is replaced only by a whole new file. Throws
// DataError naming the file at fault (the corpus, a document, the output), and for a fraction
// outside (0, 1).
PreparedCorpus prepare_token_file(const std::filesystem::path& source,
                                  const std::filesystem::path& output, double validation_fraction);

}  // namespace tessera::text
