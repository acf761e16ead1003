#pragma once
// The option table zero1 and zero2 share.

#include "tessera/sdk/plugin.hpp"

namespace tessera::zero {

inline constexpr tessera_option_desc kOptions[] = {
    {"bucket_cap", "size", "4MiB",
     "bucket size (all buckets after the first), rounded up to world x 16 KiB", nullptr},
    {"first_bucket", "size", "1MiB",
     "size of the first bucket, kept small so communication starts early in backward", nullptr},
};

}  // namespace tessera::zero
