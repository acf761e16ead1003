# Every dependency comes from a Debian 12 package (tools/dev/install-deps.sh installs them).

find_package(Threads REQUIRED)
find_package(Boost 1.74 REQUIRED COMPONENTS program_options filesystem)
find_package(TBB REQUIRED)
find_package(ZLIB REQUIRED)
# Every JSON tessera reads or writes (manifests, metrics, summaries, `tessera plugins --json`).
find_package(nlohmann_json 3.10 REQUIRED)

if(TESSERA_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
