#pragma once
// Base64 (RFC 4648, with padding): etcd's JSON gateway carries keys and values, which are byte
// strings, in this form.

#include <optional>
#include <string>
#include <string_view>

namespace tessera::etcd {

[[nodiscard]] std::string base64_encode(std::string_view bytes);

// The bytes `text` encodes, or nullopt when it is not base64.
[[nodiscard]] std::optional<std::string> base64_decode(std::string_view text);

}  // namespace tessera::etcd
