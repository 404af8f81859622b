/* CPU benchmark of the Qwen3 text encoder at the real Qwen3-4B geometry (Z-Image's text
 * encoder: hidden 2560, 36 layers, 32 query / 8 kv heads of 128, MLP 9728, vocab 151936)
 * with deterministic random bf16 weights, so no download is needed: encodes one prompt
 * of T tokens up to hidden_states[-2] (what Z-Image uses: 35 layers). Prints the wall
 * time, the process CPU time, GFLOP (2 x weight elements of the layers run x T, plus
 * attention), GFLOP/s over wall and per CPU second (the machine may be shared) against
 * the nominal peaks (450 fp32 / 900 bf16 on 2 cores), and the peak RSS.
 *
 *   bench_qwen3 [--threads N] [--tokens T] [--reps R] [--bf16] [--layers L] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "backend/backend.h"
#include "bench_util.h"
#include "core/timer.h"
#include "models/qwen3.h"

static double peak_rss_gib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / (1024.0 * 1024.0);
}

int main(int argc, char **argv) {
  int threads = 0, tokens = 100, reps = 2, bf16 = 0, layers = 36;
  for (int i = 1; i < argc; i++) {
    if (bench_opt_int(argc, argv, &i, "--threads", &threads) || bench_opt_int(argc, argv, &i, "--tokens", &tokens) ||
        bench_opt_int(argc, argv, &i, "--reps", &reps) || bench_opt_int(argc, argv, &i, "--layers", &layers))
      continue;
    if (!strcmp(argv[i], "--bf16")) bf16 = 1;
    else {
      fprintf(stderr, "usage: %s [--threads N] [--tokens T] [--reps R] [--bf16] [--layers L]\n", argv[0]);
      return 2;
    }
  }
  if (tokens < 1 || tokens > 4096 || reps < 1 || reps > 100 || layers < 2 || layers > 36) {
    fprintf(stderr, "bench_qwen3: tokens 1..4096, reps 1..100, layers 2..36\n");
    return 2;
  }
  dit_qwen3_config c = {.hidden_size = 2560, .num_layers = layers, .num_heads = 32, .num_kv_heads = 8,
                        .head_dim = 128, .intermediate_size = 9728, .vocab_size = 151936,
                        .max_position_embeddings = 40960, .rms_norm_eps = 1e-6f, .rope_theta = 1e6,
                        .attention_bias = false, .rope_freq_dtype = DIT_F32};
  dit_backend *be = NULL;
  dit_qwen3 *m = NULL;
  dit_error err = {0};
  double t0 = dit_time_now();
  if (dit_backend_cpu_create(threads, &be, &err) != DIT_OK ||
      dit_backend_cpu_set_precision(be, bf16 ? DIT_CPU_PRECISION_BF16 : DIT_CPU_PRECISION_FP32, &err) != DIT_OK ||
      dit_qwen3_create_random(be, &c, DIT_BF16, 42, &m, &err) != DIT_OK) {
    fprintf(stderr, "bench_qwen3: %s\n", err.msg);
    return 1;
  }
  printf("qwen3 encoder (Qwen3-4B geometry, %d layers, random bf16 weights), %d tokens, %d threads, %s compute; "
         "setup %.1f s\n", layers, tokens, be->n_threads, bf16 ? "bf16" : "fp32", dit_time_now() - t0);
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)tokens);
  float *out = malloc(sizeof(float) * (size_t)tokens * (size_t)c.hidden_size);
  if (!ids || !out) return 1;
  for (int i = 0; i < tokens; i++) ids[i] = (int32_t)((i * 7919 + 13) % c.vocab_size);
  /* per token: 2 flop per weight element of the layers run (hidden_states[-2]: L-1 of them) */
  double H = c.hidden_size, QD = 32 * 128.0, KD = 8 * 128.0, I = c.intermediate_size, T = tokens;
  double per_layer = 2.0 * T * (H * QD + 2 * H * KD + QD * H + 3 * H * I) + 2.0 * 2 * 32 * 128.0 * T * T / 2;
  double flop = per_layer * (layers - 1);
  double peak = bf16 ? 450.0 * be->n_threads : 225.0 * be->n_threads;
  int which = -2;
  float *outs[1] = {out};
  for (int r = 0; r <= reps; r++) {
    double w0 = dit_time_now(), c0 = bench_cpu_seconds();
    if (dit_qwen3_encode(m, 1, tokens, ids, NULL, 1, &which, outs, &err) != DIT_OK) {
      fprintf(stderr, "bench_qwen3: %s\n", err.msg);
      return 1;
    }
    double w = dit_time_now() - w0, cs = bench_cpu_seconds() - c0;
    printf("  %s: wall %.2f s (%.1f GFLOP/s), CPU %.2f s (%.1f GFLOP/s per CPU-second x %d = %.1f%% of nominal %.0f)"
           ", %.1f GFLOP\n",
           r == 0 ? "first (cold)" : "run         ", w, flop / w / 1e9, cs, flop / (cs / be->n_threads) / 1e9,
           be->n_threads, 100 * flop / (cs / be->n_threads) / 1e9 / peak, peak, flop / 1e9);
  }
  printf("  peak RSS %.2f GiB\n", peak_rss_gib());
  free(ids);
  free(out);
  dit_qwen3_free(m);
  dit_backend_free(be);
  return 0;
}
