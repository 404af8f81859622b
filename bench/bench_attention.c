/* Benchmark of the CPU attention op (blocked, online softmax) at a Z-Image-like shape:
 * q, k, v [1, S, H, D]; prints GFLOP/s (4 S^2 H D flop: Q K^T and P V) over wall time and
 * over process CPU time (the machine may be shared). Usage:
 *   bench_attention [--seq S] [--heads H] [--dim D] [--reps N] [--threads T] [--portable] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "bench_util.h"


int main(int argc, char **argv) {
  long S = 4224, H = 30, D = 128;
  int reps = 3, threads = 0, portable = 0;
  for (int i = 1; i < argc; i++) {
    if (bench_opt_long(argc, argv, &i, "--seq", &S) || bench_opt_long(argc, argv, &i, "--heads", &H) ||
        bench_opt_long(argc, argv, &i, "--dim", &D) || bench_opt_int(argc, argv, &i, "--reps", &reps) ||
        bench_opt_int(argc, argv, &i, "--threads", &threads))
      continue;
    if (!strcmp(argv[i], "--portable")) portable = 1;
    else {
      fprintf(stderr, "usage: %s [--seq S] [--heads H] [--dim D] [--reps N] [--threads T] [--portable]\n", argv[0]);
      return 2;
    }
  }
  if (S < 1 || H < 1 || D < 1 || reps < 1) return 2;
  dit_backend *be = NULL;
  dit_error err = {0};
  if (dit_backend_cpu_create(threads, &be, &err) != DIT_OK) return 1;
  dit_cpu_set_simd(be, !portable); /* --portable: the C kernels (the path name says which ran) */
  size_t n = (size_t)(S * H * D);
  float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(n * 4);
  if (!q || !k || !v || !o) return 1;
  uint64_t r = 88172645463325252ull;
  for (size_t i = 0; i < n; i++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    q[i] = (float)(r >> 40) / 16777216.0f - 0.5f;
    k[i] = (float)((r >> 20) & 0xfffff) / 1048576.0f - 0.5f;
    v[i] = (float)(r & 0xfffff) / 1048576.0f - 0.5f;
  }
  dit_tensor tq = dit_tensor_4d(DIT_F32, q, 1, S, H, D), tk = dit_tensor_4d(DIT_F32, k, 1, S, H, D);
  dit_tensor tv = dit_tensor_4d(DIT_F32, v, 1, S, H, D), to = dit_tensor_4d(DIT_F32, o, 1, S, H, D);
  double flop = 4.0 * (double)S * (double)S * (double)H * (double)D, bw = 1e30, bc = 1e30;
  printf("attention S=%ld H=%ld D=%ld, %d threads, %s path: %.1f GFLOP per call\n", S, H, D, be->n_threads,
         dit_cpu_isa_name(be), flop / 1e9);
  for (int i = 0; i < reps; i++) {
    double t0 = bench_clock(CLOCK_MONOTONIC), c0 = bench_clock(CLOCK_PROCESS_CPUTIME_ID);
    if (dit_op_attention(be, &to, &tq, &tk, &tv, NULL, 0.0883883f, false, &err) != DIT_OK) {
      fprintf(stderr, "%s\n", err.msg);
      return 1;
    }
    double t = bench_clock(CLOCK_MONOTONIC) - t0, c = bench_clock(CLOCK_PROCESS_CPUTIME_ID) - c0;
    bw = t < bw ? t : bw;
    bc = c < bc ? c : bc;
  }
  printf("  best wall %.3f s = %.1f GFLOP/s; best CPU-time %.1f GFLOP/s\n", bw, flop / bw / 1e9,
         flop / (bc / be->n_threads) / 1e9);
  free(q), free(k), free(v), free(o);
  dit_backend_free(be);
  return 0;
}
