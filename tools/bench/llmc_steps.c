// Times llm.c's CPU training step (karpathy/llm.c, train_gpt2.c) at a batch shape of our choice.
// train_gpt2.c's own main trains a fixed B = 4, T = 64 on files it expects in its folder and
// spends most of its time in evaluation and sampling; this driver calls the same functions its
// main calls for one step (gpt2_forward, gpt2_zero_grad, gpt2_backward, gpt2_update: AdamW) on
// random tokens, and prints one line per step. Nothing of llm.c is copied here: it is compiled
// from the fetched snapshot (tools/bench/gpt_speed.py does it):
//
//   cc -Ofast -march=native -fopenmp -DTESTING -I LLMC_DIR -include LLMC_DIR/train_gpt2.c \
//      tools/bench/llmc_steps.c -lm -o llmc_steps
//   OMP_NUM_THREADS=1 ./llmc_steps MODEL.bin BATCH TIME STEPS
//
// Output, one line per step: "step N wall_s W cpu_s C" (monotonic and process CPU seconds).
// train_gpt2.c is included with TESTING defined, which hides its main (as llm.c's test_gpt2.c
// does).

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds_of(clockid_t clock) {
  struct timespec now;
  clock_gettime(clock, &now);
  return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s MODEL.bin BATCH TIME STEPS\n", argv[0]);
    return 2;
  }
  const int batch = atoi(argv[2]);
  const int seq_len = atoi(argv[3]);
  const int steps = atoi(argv[4]);
  GPT2 model;
  gpt2_build_from_checkpoint(&model, argv[1]);
  if (batch < 1 || seq_len < 1 || steps < 1 || seq_len > model.config.max_seq_len) {
    fprintf(stderr, "llmc_steps: BATCH, TIME and STEPS must be positive, TIME <= %d\n",
            model.config.max_seq_len);
    return 2;
  }
  // Uniform token ids from a fixed xorshift stream: the ids do not change the work.
  int* tokens = (int*)malloc(sizeof(int) * (size_t)(batch * seq_len + 1));
  unsigned long long state = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i <= batch * seq_len; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    tokens[i] = (int)(state % (unsigned long long)model.config.vocab_size);
  }
  for (int step = 1; step <= steps; ++step) {
    const double wall = seconds_of(CLOCK_MONOTONIC);
    const double cpu = seconds_of(CLOCK_PROCESS_CPUTIME_ID);
    gpt2_forward(&model, tokens, tokens + 1, batch, seq_len);
    gpt2_zero_grad(&model);
    gpt2_backward(&model);
    gpt2_update(&model, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, step);
    printf("step %d wall_s %.6f cpu_s %.6f loss %.4f\n", step, seconds_of(CLOCK_MONOTONIC) - wall,
           seconds_of(CLOCK_PROCESS_CPUTIME_ID) - cpu, model.mean_loss);
    fflush(stdout);
  }
  free(tokens);
  gpt2_free(&model);
  return 0;
}
