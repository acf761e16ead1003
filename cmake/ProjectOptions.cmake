# Build options and the output layout every target shares.

option(TESSERA_BUILD_TESTS "Build the GoogleTest suites" ${PROJECT_IS_TOP_LEVEL})
option(TESSERA_WERROR "Treat compiler warnings as errors" OFF)
option(TESSERA_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(TESSERA_FUZZ "Build tests/fuzz as libFuzzer targets (clang; the `fuzz` preset)" OFF)

set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)

include(GNUInstallDirs)

# build/<preset>/bin/tessera, build/<preset>/lib/libtessera.so, build/<preset>/lib/tessera/plugins/
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/bin")
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/lib")
set(CMAKE_ARCHIVE_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/lib")
set(TESSERA_PLUGIN_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/lib/tessera/plugins")
set(TESSERA_INSTALL_PLUGINDIR "${CMAKE_INSTALL_LIBDIR}/tessera/plugins")

# Installed binaries find libtessera through a relative rpath, so a prefix can be moved.
set(CMAKE_INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR};$ORIGIN/../..")

add_library(tessera_warnings INTERFACE)
target_compile_options(tessera_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow
  -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Woverloaded-virtual
  $<$<BOOL:${TESSERA_WERROR}>:-Werror>)

if(TESSERA_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# libFuzzer coverage in every object; only the fuzz targets link the fuzzer's main().
if(TESSERA_FUZZ)
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
