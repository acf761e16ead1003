#pragma once
// The build id a plugin must share with libtessera: objects cross the plugin boundary as C++
// classes, so both sides need the same compiler family, C++ library ABI and tessera major.

#include "tessera/base/version.hpp"

#define TESSERA_DETAIL_STR2(x) #x
#define TESSERA_DETAIL_STR(x) TESSERA_DETAIL_STR2(x)

#if defined(__clang__)
#define TESSERA_DETAIL_COMPILER "clang-" TESSERA_DETAIL_STR(__clang_major__)
#elif defined(__GNUC__)
#define TESSERA_DETAIL_COMPILER "gcc-" TESSERA_DETAIL_STR(__GNUC__)
#else
#define TESSERA_DETAIL_COMPILER "unknown"
#endif

#if defined(_GLIBCXX_USE_CXX11_ABI)
#define TESSERA_DETAIL_STDLIB "libstdc++-cxx11abi" TESSERA_DETAIL_STR(_GLIBCXX_USE_CXX11_ABI)
#elif defined(_LIBCPP_VERSION)
#define TESSERA_DETAIL_STDLIB "libc++-abi" TESSERA_DETAIL_STR(_LIBCPP_ABI_VERSION)
#else
#define TESSERA_DETAIL_STDLIB "unknown-stdlib"
#endif

// e.g. "gcc-12;libstdc++-cxx11abi1;tessera-0"
#define TESSERA_BUILD_ID                            \
  TESSERA_DETAIL_COMPILER ";" TESSERA_DETAIL_STDLIB \
                          ";tessera-" TESSERA_DETAIL_STR(TESSERA_VERSION_MAJOR)
