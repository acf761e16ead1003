#pragma once
// The option table zero1 and zero2 share.

#include "tessera/sdk/plugin.hpp"

namespace tessera::zero {

inline constexpr tessera_option_desc kOptions[] = {
    {"bucket_cap", "size", "4MiB",
     "bucket size (all buckets after the first), rounded up to world x 16 KiB", nullptr, "1KiB",
     nullptr},
    {"first_bucket", "size", "1MiB",
     "size of the first bucket, kept small so communication starts early in backward", nullptr,
     "1KiB", nullptr},
    {"staging_windows", "int", "2",
     "zero2: gradient staging windows, each about one layer; 2 overlaps a layer's "
     "reduce-scatter with the next layer's backward, 1 saves that memory and waits",
     nullptr, "1", "2"},
};

}  // namespace tessera::zero
