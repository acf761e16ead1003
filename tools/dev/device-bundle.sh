#!/usr/bin/env bash
# Packs a built tree into a folder that runs on a GPU machine without this machine's Debian
# packages: tessera, libtessera, the plugins and the named test programs, stripped of debug
# information, with every shared library they need from Debian beside them. CUDA's own
# libraries (cudart, cuBLAS, NCCL) are left out: the GPU machine has its own, matching its
# driver. On the GPU machine: `bash BUNDLE/run.sh PROGRAM ARGS...` finds those and runs PROGRAM,
# a program of the bundle or a path (compute-sanitizer, which then runs one of the bundle's).
# A PROGRAM named on the command line is taken from BUILD_DIR/tests or, failing that,
# BUILD_DIR/bin (the bench programs).
#
# usage: tools/dev/device-bundle.sh BUILD_DIR OUT_DIR [PROGRAM...]
#   e.g. tools/dev/device-bundle.sh build/ci build/devbundle tessera_unit_cuda_compute \
#          tessera_bench_cuda_layers
set -euo pipefail
build=${1:?usage: device-bundle.sh BUILD_DIR OUT_DIR [PROGRAM...]}
out=${2:?usage: device-bundle.sh BUILD_DIR OUT_DIR [PROGRAM...]}
shift 2

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/tessera/plugins" "$out/tests" "$out/deps"
cp "$build/bin/tessera" "$out/bin/"
cp -P "$build"/lib/libtessera.so* "$out/lib/"
cp "$build"/lib/tessera/plugins/*.so "$out/lib/tessera/plugins/"
for program in "$@"; do
  if [ -f "$build/tests/$program" ]; then
    cp "$build/tests/$program" "$out/tests/"
  else
    cp "$build/bin/$program" "$out/bin/"
  fi
done
find "$out" -type f \( -name '*.so*' -o -perm -u+x \) -exec strip --strip-debug {} + 2>/dev/null || true

# Every library the programs and plugins load, except the C library's own and CUDA's.
skip='^(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libnccl|libcuda|libtessera)\.'
find "$out/bin" "$out/lib" "$out/tests" -type f | while read -r file; do
  LD_LIBRARY_PATH="$out/lib" ldd "$file" 2>/dev/null | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ ! $name =~ $skip ]]; then cp -L "$path" "$out/deps/$name"; fi
done

cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs a program of this bundle with its libraries and the GPU machine's CUDA libraries.
here=$(cd "$(dirname "$0")" && pwd)
cuda_dirs=""
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  found=$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt /usr/local/lib /usr/lib/python3* \
               -name "$lib" 2>/dev/null | head -n 1)
  [ -n "$found" ] && cuda_dirs="$cuda_dirs:$(dirname "$found")"
done
export LD_LIBRARY_PATH="$here/lib:$here/deps$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
program=$1
shift
case $program in */*) exec "$program" "$@" ;; esac
if [ -x "$here/bin/$program" ]; then exec "$here/bin/$program" "$@"; fi
exec "$here/tests/$program" "$@"
RUN
chmod +x "$out/run.sh"
du -sh "$out"
