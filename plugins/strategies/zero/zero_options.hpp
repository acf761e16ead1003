#pragma once
// The option tables and capabilities of zero1 and zero2: the bucket geometry both use, and what
// zero2 alone has (zero1 keeps a full gradient buffer, so it has no staging windows to size).

#include "tessera/sdk/plugin.hpp"

namespace tessera::zero {

inline constexpr tessera_option_desc kBucketCap = {
    "bucket_cap", "size",
    "4MiB",       "bucket size (all buckets after the first), rounded up to world x 16 KiB",
    nullptr,      "1KiB",
    nullptr};
inline constexpr tessera_option_desc kFirstBucket = {
    "first_bucket",
    "size",
    "1MiB",
    "size of the first bucket, kept small so communication starts early in backward",
    nullptr,
    "1KiB",
    nullptr};

inline constexpr tessera_option_desc kZeroOneOptions[] = {kBucketCap, kFirstBucket};

// Both keep their state where [runtime] device says: host memory or the GPU.
inline constexpr tessera_plugin_capabilities kZeroCapabilities = {
    0U, TESSERA_DEVICE_CPU | TESSERA_DEVICE_CUDA};

inline constexpr tessera_option_desc kZeroTwoOptions[] = {
    kBucketCap,
    kFirstBucket,
    {"staging_windows", "int", "2",
     "gradient staging windows, each about one layer; 2 overlaps a layer's reduce-scatter with "
     "the next layer's backward, 1 saves that memory and waits",
     nullptr, "1", "2"},
};

}  // namespace tessera::zero
