/* The TCP ceiling of a 2-rank all_reduce over loopback (docs/benchmarks.md): two processes, one
 * per core, each sending 64 MiB to the other while receiving the other's 64 MiB, the traffic
 * every rank of a 2-rank all_reduce must move (half the buffer out for the reduce-scatter,
 * half for the all-gather). Prints each repetition's per-direction rate and the median.
 * Build: cc -O2 -pthread -o tcp_loopback_bandwidth tcp_loopback_bandwidth.c
 * Run:   ./tcp_loopback_bandwidth [MiB per direction, default 64] [repetitions, default 9]
 *        [port, default 45678] */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int sock = -1;
static char* out;
static size_t bytes;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void* send_all(void* unused) {
  (void)unused;
  for (size_t sent = 0; sent < bytes;) {
    ssize_t k = send(sock, out + sent, bytes - sent, 0);
    if (k <= 0) {
      perror("tcp_loopback_bandwidth: send");
      exit(1);
    }
    sent += (size_t)k;
  }
  return NULL;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  bytes = (size_t)(argc > 1 ? atol(argv[1]) : 64) << 20;
  int reps = argc > 2 ? atoi(argv[2]) : 9;
  int port = argc > 3 ? atoi(argv[3]) : 45678;
  if (bytes == 0 || reps < 1 || reps > 100) {
    fprintf(stderr, "usage: tcp_loopback_bandwidth [MiB] [repetitions 1-100] [port]\n");
    return 2;
  }
  struct sockaddr_in addr = {0};
  addr.sin_family = AF_INET;
  addr.sin_port = htons((unsigned short)port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int listener = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(listener, (struct sockaddr*)&addr, sizeof addr) != 0 || listen(listener, 1) != 0) {
    perror("tcp_loopback_bandwidth: bind/listen");
    return 1;
  }
  pid_t child = fork();
  int rank = child == 0 ? 1 : 0;
  if (rank == 1) {
    sock = socket(AF_INET, SOCK_STREAM, 0);
    for (int tries = 0; connect(sock, (struct sockaddr*)&addr, sizeof addr) != 0; ++tries) {
      if (tries == 1000) {
        perror("tcp_loopback_bandwidth: connect");
        return 1;
      }
      usleep(1000);
    }
  } else {
    sock = accept(listener, NULL, NULL);
  }
  cpu_set_t cores;
  CPU_ZERO(&cores);
  CPU_SET(rank, &cores);
  sched_setaffinity(0, sizeof cores, &cores);
  setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  out = malloc(bytes);
  char* in = malloc(bytes);
  memset(out, 1, bytes);
  memset(in, 0, bytes);
  double* rates = calloc((size_t)reps + 1, sizeof(double));
  for (int r = 0; r <= reps; ++r) { /* the first repetition warms up */
    double start = now();
    pthread_t sender;
    pthread_create(&sender, NULL, send_all, NULL);
    for (size_t got = 0; got < bytes;) {
      ssize_t k = recv(sock, in + got, bytes - got, 0);
      if (k <= 0) {
        perror("tcp_loopback_bandwidth: recv");
        return 1;
      }
      got += (size_t)k;
    }
    pthread_join(sender, NULL);
    rates[r] = bytes / (now() - start) / 1e9;
    if (rank == 0 && r > 0) printf("%.2f ", rates[r]);
  }
  if (rank == 0) {
    qsort(rates + 1, (size_t)reps, sizeof(double), cmp_double);
    printf("\nboth directions at once, %zu MiB each: median %.2f GB/s per direction\n",
           bytes >> 20, rates[1 + reps / 2]);
    waitpid(child, NULL, 0);
  }
  return 0;
}
