/* The memory-bandwidth ceiling of a 2-rank all_reduce (docs/benchmarks.md): one process per
 * core copying 64 MiB at once, best of 15. Build: cc -O2 -o memcpy_bandwidth memcpy_bandwidth.c;
 * run: taskset -c 0 ./memcpy_bandwidth & taskset -c 1 ./memcpy_bandwidth; wait */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
int main() {
  size_t n = 64u << 20;
  char *a = aligned_alloc(64, n), *b = aligned_alloc(64, n);
  memset(a, 1, n);
  memset(b, 2, n);
  double best = 1e9;
  for (int i = 0; i < 15; i++) {
    double t = now();
    memcpy(b, a, n);
    t = now() - t;
    if (t < best) best = t;
  }
  printf("memcpy 64MiB: %.2f ms, %.1f GB/s copied (%.1f GB/s read+write)\n", best * 1e3,
         n / best / 1e9, 2 * n / best / 1e9);
}
