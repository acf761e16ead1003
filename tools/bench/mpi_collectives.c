/* The OpenMPI side of tools/bench/compare_mpi.sh: times MPI_Allreduce, MPI_Reduce_scatter_block,
 * MPI_Allgather and MPI_Bcast on float32 buffers with exactly the method `tessera bench
 * collectives` uses, and prints one JSON object per row in the same format.
 *
 * Method: for each size, `reps` repetitions of a back-to-back batch of k operations (k chosen
 * so that a batch takes about 20 ms); a repetition's time is its batch time / k on rank 0.
 * Rows report the median and the minimum over repetitions; `bytes` follows nccl-tests (the
 * whole buffer: for reduce_scatter the input, for all_gather the output).
 *
 * Usage: mpirun -n N mpi_collectives [--ops all_reduce,...] [--sizes 4096,67108864] [--reps R]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static int has_op(const char* ops, const char* op) {
  const char* p = strstr(ops, op);
  if (p == NULL) return 0;
  size_t n = strlen(op);
  return (p == ops || p[-1] == ',') && (p[n] == ',' || p[n] == '\0');
}

/* Runs `op` once. Buffers are sized for the largest role the op needs. */
static void run_op(const char* op, float* in, float* out, size_t count, int size) {
  if (strcmp(op, "all_reduce") == 0) {
    MPI_Allreduce(MPI_IN_PLACE, in, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  } else if (strcmp(op, "reduce_scatter") == 0) {
    MPI_Reduce_scatter_block(in, out, (int)(count / (size_t)size), MPI_FLOAT, MPI_SUM,
                             MPI_COMM_WORLD);
  } else if (strcmp(op, "all_gather") == 0) {
    MPI_Allgather(in, (int)(count / (size_t)size), MPI_FLOAT, out, (int)(count / (size_t)size),
                  MPI_FLOAT, MPI_COMM_WORLD);
  } else {
    MPI_Bcast(in, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
  }
}

/* Fills inputs with small integers so float sums are exact, runs op once, checks the result. */
static int verify(const char* op, float* in, float* out, size_t count, int rank, int size) {
  for (size_t i = 0; i < count; ++i) in[i] = (float)((i * 7 + (size_t)rank * 3) % 17);
  run_op(op, in, out, count, size);
  size_t block = count / (size_t)size;
  int ok = 1;
  for (size_t i = 0; i < count && ok; ++i) {
    float expected;
    if (strcmp(op, "all_reduce") == 0) {
      expected = 0;
      for (int r = 0; r < size; ++r) expected += (float)((i * 7 + (size_t)r * 3) % 17);
      ok = in[i] == expected;
    } else if (strcmp(op, "reduce_scatter") == 0) {
      if (i >= block) break;
      size_t g = (size_t)rank * block + i;
      expected = 0;
      for (int r = 0; r < size; ++r) expected += (float)((g * 7 + (size_t)r * 3) % 17);
      ok = out[i] == expected;
    } else if (strcmp(op, "all_gather") == 0) {
      size_t owner = i / block, j = i % block;
      ok = out[i] == (float)((j * 7 + owner * 3) % 17);
    } else {
      ok = in[i] == (float)((i * 7) % 17);
    }
  }
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all_ok;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  const char* ops = "all_reduce,reduce_scatter,all_gather,broadcast";
  char sizes_buf[1024] = "4096,65536,1048576,16777216,67108864";
  int reps = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--ops") == 0)
      ops = argv[i + 1];
    else if (strcmp(argv[i], "--sizes") == 0)
      snprintf(sizes_buf, sizeof sizes_buf, "%s", argv[i + 1]);
    else if (strcmp(argv[i], "--reps") == 0)
      reps = atoi(argv[i + 1]);
  }

  const char* all_ops[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
  for (int o = 0; o < 4; ++o) {
    const char* op = all_ops[o];
    if (!has_op(ops, op)) continue;
    char sizes[1024];
    snprintf(sizes, sizeof sizes, "%s", sizes_buf);
    for (char* tok = strtok(sizes, ","); tok != NULL; tok = strtok(NULL, ",")) {
      size_t bytes = strtoull(tok, NULL, 10);
      size_t count = bytes / sizeof(float);
      count -= count % (size_t)size; /* reduce_scatter/all_gather need equal blocks */
      bytes = count * sizeof(float);
      float* in = aligned_alloc(64, bytes + 64);
      float* out = aligned_alloc(64, bytes + 64);
      memset(in, 0, bytes);
      memset(out, 0, bytes);
      int ok = verify(op, in, out, count, rank, size);

      /* Pick k so that a batch takes about 20 ms, agreed by all ranks. */
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      run_op(op, in, out, count, size);
      double one = MPI_Wtime() - t0;
      MPI_Allreduce(MPI_IN_PLACE, &one, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      int k = one > 0 ? (int)(0.02 / one) : 1000;
      if (k < 1) k = 1;
      if (k > 10000) k = 10000;

      double* times = malloc(sizeof(double) * (size_t)reps);
      for (int r = 0; r < reps; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        for (int i = 0; i < k; ++i) run_op(op, in, out, count, size);
        times[r] = (MPI_Wtime() - start) / k;
      }
      qsort(times, (size_t)reps, sizeof(double), cmp_double);
      double median = times[reps / 2], min = times[0];
      double algbw = (double)bytes / median / 1e9;
      double factor = strcmp(op, "all_reduce") == 0  ? 2.0 * (size - 1) / size
                      : strcmp(op, "broadcast") == 0 ? 1.0
                                                     : (double)(size - 1) / size;
      if (rank == 0) {
        printf(
            "{\"op\":\"%s\",\"bytes\":%zu,\"time_us_median\":%.3f,\"time_us_min\":%.3f,"
            "\"algbw_gbps\":%.3f,\"busbw_gbps\":%.3f,\"ok\":%s}\n",
            op, bytes, median * 1e6, min * 1e6, algbw, algbw * factor, ok ? "true" : "false");
        fflush(stdout);
      }
      free(times);
      free(in);
      free(out);
    }
  }
  MPI_Finalize();
  return 0;
}
