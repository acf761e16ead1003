#include "protocol.hpp"

#include "tessera/base/error.hpp"

namespace tessera::tcp {

namespace {

void put_be(std::string& out, std::uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::uint64_t get_be(std::string_view in) {
  std::uint64_t value = 0;
  for (char c : in) value = (value << 8) | static_cast<std::uint8_t>(c);
  return value;
}

}  // namespace

FrameWriter& FrameWriter::u8(std::uint8_t value) {
  bytes_.push_back(static_cast<char>(value));
  return *this;
}

FrameWriter& FrameWriter::i64(std::int64_t value) {
  put_be(bytes_, static_cast<std::uint64_t>(value), 8);
  return *this;
}

FrameWriter& FrameWriter::str(std::string_view value) {
  put_be(bytes_, value.size(), 4);
  bytes_.append(value);
  return *this;
}

std::string FrameWriter::take() {
  const auto payload = bytes_.size() - kFrameHeaderBytes;
  if (payload > kMaxFrameBytes)
    throw InvalidArgument("tcp store: a message of " + std::to_string(payload) +
                          " bytes exceeds the store's limit of " + std::to_string(kMaxFrameBytes) +
                          " bytes (key and value together); keep bulk data out of the store");
  std::string header;
  put_be(header, payload, 4);
  bytes_.replace(0, kFrameHeaderBytes, header);
  return std::move(bytes_);
}

std::string_view FrameReader::take(std::size_t n) {
  if (rest_.size() < n) throw Error("tcp store: truncated message");
  auto out = rest_.substr(0, n);
  rest_.remove_prefix(n);
  return out;
}

std::uint8_t FrameReader::u8() {
  return static_cast<std::uint8_t>(take(1)[0]);
}

std::int64_t FrameReader::i64() {
  return static_cast<std::int64_t>(get_be(take(8)));
}

std::string FrameReader::str() {
  const auto n = get_be(take(4));
  return std::string(take(n));
}

std::uint32_t frame_length(const char* header) noexcept {
  return static_cast<std::uint32_t>(get_be(std::string_view(header, kFrameHeaderBytes)));
}

}  // namespace tessera::tcp
