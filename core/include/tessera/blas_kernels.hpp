#pragma once
// OpenBLAS picks its GEMM kernels once, when the library is loaded, from the CPU it detects or
// from OPENBLAS_CORETYPE. Debian's 0.3.21 files AVX-512 AMD CPUs (Zen 4) under Haswell (AVX2)
// kernels; its SkylakeX (AVX-512) kernels run sgemm about twice as fast there (measured
// 150 vs 70-80 GFLOPS on one core for the MLP's 256x1024x1024 GEMM).

namespace tessera {

// Sets OPENBLAS_CORETYPE=SkylakeX when it is unset and the CPU has AVX-512 F/BW/DQ/VL; returns
// whether it did. Takes effect only if called before libopenblas is loaded into the process,
// i.e. before the first model plugin is loaded (libtessera itself does not link OpenBLAS), or
// in a launcher before it starts workers. Not thread-safe (setenv).
bool prefer_avx512_blas_kernels() noexcept;

}  // namespace tessera
