# Every dependency comes from a Debian 12 package (tools/dev/install-deps.sh installs them).

find_package(Threads REQUIRED)
find_package(Boost 1.74 REQUIRED COMPONENTS program_options filesystem)
find_package(TBB REQUIRED)
find_package(ZLIB REQUIRED)

if(TESSERA_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
