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

# CUDA and NCCL: on the machine image under /usr/local/cuda, not from Debian. The CUDA support
# library (plugins/devices/cuda) and the nccl transport build only where nvcc, the CUDA
# toolkit and NCCL are all found; a message says what is missing otherwise, and everything else
# builds as before. TESSERA_CUDA=OFF turns them off (the sanitizer presets do: the sanitizers'
# shadow memory and the CUDA runtime do not mix).
option(TESSERA_CUDA "Build the CUDA path and the nccl transport where CUDA and NCCL are found" ON)
set(TESSERA_HAVE_CUDA OFF)
if(TESSERA_CUDA)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX}
     AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(STATUS "tessera: no CUDA compiler (nvcc) found; the CUDA path and the nccl "
                   "transport are not built")
  else()
    find_package(CUDAToolkit QUIET)
    find_path(TESSERA_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(TESSERA_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(NOT CUDAToolkit_FOUND)
      message(STATUS "tessera: nvcc found but not the CUDA toolkit's libraries; the CUDA path "
                     "and the nccl transport are not built")
    elseif(NOT TESSERA_NCCL_INCLUDE_DIR OR NOT TESSERA_NCCL_LIBRARY)
      message(STATUS "tessera: CUDA found but not NCCL (nccl.h, libnccl.so); the CUDA path "
                     "and the nccl transport are not built")
    else()
      if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
        # Turing (the oldest CUDA 13 supports) as PTX that any newer GPU compiles, and Hopper
        # (H100, H200) as machine code.
        set(CMAKE_CUDA_ARCHITECTURES 75-virtual 90-real)
      endif()
      enable_language(CUDA)
      # CMake 3.25 knows no C++20 flag for nvcc 13; the kernels (.cu files, plain launch functions
      # over raw pointers) need only C++17. Every .cpp is C++20 as everywhere else.
      set(CMAKE_CUDA_STANDARD 17)
      set(CMAKE_CUDA_STANDARD_REQUIRED ON)
      add_library(tessera_nccl INTERFACE)
      target_include_directories(tessera_nccl INTERFACE "${TESSERA_NCCL_INCLUDE_DIR}")
      target_link_libraries(tessera_nccl INTERFACE "${TESSERA_NCCL_LIBRARY}" CUDA::cudart)
      set(TESSERA_HAVE_CUDA ON)
      message(STATUS "tessera: CUDA ${CUDAToolkit_VERSION} and NCCL found; building the CUDA "
                     "path and the nccl transport")
    endif()
  endif()
endif()
