/* CPU benchmark of the AutoencoderKL decoder at the real FLUX.1 / Z-Image VAE geometry
 * (16 latent channels, block_out_channels 128/256/512/512, 2 layers per block, 32
 * groups) with deterministic random bf16 weights, so no download is needed. Prints per
 * image size: wall time, GFLOP, GFLOP/s over wall time and over the process CPU time per
 * thread (what the code achieves while it holds a core: the machine may be shared),
 * planned activation bytes and the process peak RSS.
 *
 *   bench_vae [--threads N] [--tile T] [--reps R] [--bf16] [SIZE ...]   (SIZE in pixels, default 512 1024)
 * --bf16: the CPU backend's bf16-compute precision (convolutions and linears). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "backend/backend.h"
#include "bench_util.h"
#include "core/timer.h"
#include "models/vae_kl.h"

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

int main(int argc, char **argv) {
  int threads = 0, tile = 0, reps = 1, sizes[16], n_sizes = 0, bf16 = 0;
  for (int i = 1; i < argc; i++) {
    int bad = 0;
    if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      bad = parse_int(argv[++i], 0, 1024, &threads);
    else if (!strcmp(argv[i], "--tile") && i + 1 < argc)
      bad = parse_int(argv[++i], 0, 4096, &tile);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      bad = parse_int(argv[++i], 1, 100, &reps);
    else if (!strcmp(argv[i], "--bf16"))
      bf16 = 1;
    else if (n_sizes < 16)
      bad = parse_int(argv[i], 8, 8192, &sizes[n_sizes++]) || sizes[n_sizes - 1] % 8;
    else
      bad = 1;
    if (bad) {
      fprintf(stderr, "usage: bench_vae [--threads N] [--tile T] [--reps R] [--bf16] [SIZE ...] (SIZE: pixels, multiple of 8)\n");
      return 2;
    }
  }
  if (!n_sizes) {
    sizes[n_sizes++] = 512;
    sizes[n_sizes++] = 1024;
  }
  dit_vae_kl_config cfg;
  dit_vae_kl_config_flux1(&cfg); /* the FLUX.1 / Z-Image VAE */
  dit_error err = {0};
  dit_backend *be = NULL;
  dit_vae_kl *m = NULL;
  if (dit_backend_cpu_create(threads, &be, &err) != DIT_OK ||
      (bf16 && dit_backend_cpu_set_precision(be, DIT_CPU_PRECISION_BF16, &err) != DIT_OK) ||
      dit_vae_kl_create_random(be, &cfg, 42, &m, &err) != DIT_OK) {
    fprintf(stderr, "bench_vae: %s\n", err.msg);
    dit_backend_free(be);
    return 1;
  }
  printf("vae decode (AutoencoderKL, Flux geometry, random bf16 weights), %d threads, tile %d, %s compute\n", be->n_threads, tile,
         bf16 ? "bf16" : "fp32");
  printf("%-10s %9s %9s %9s %10s %9s %12s %12s\n", "image", "wall s", "cpu s", "GFLOP", "GFLOP/s", "cpu GF/s",
         "act MiB", "peak RSS MiB");
  int rc = 0;
  for (int k = 0; k < n_sizes && !rc; k++) {
    int px = sizes[k], lat = px / 8;
    dit_cost cost;
    int ct = tile > 0 && tile < lat ? tile : lat;
    if (dit_vae_kl_cost_of(m, ct, ct, 0, &cost, &err) != DIT_OK) {
      fprintf(stderr, "bench_vae: %s\n", err.msg);
      rc = 1;
      break;
    }
    size_t zn = (size_t)16 * lat * lat, in = (size_t)3 * px * px;
    float *z = malloc(zn * sizeof *z), *img = malloc(in * sizeof *img);
    if (!z || !img) {
      fprintf(stderr, "bench_vae: out of memory\n");
      free(z);
      free(img);
      rc = 1;
      break;
    }
    uint64_t s = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < zn; i++) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      z[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 3.4 - 1.7);
    }
    dit_tensor tz = dit_tensor_4d(DIT_F32, z, 1, 16, lat, lat), ti = dit_tensor_4d(DIT_F32, img, 1, 3, px, px);
    double best = 1e30, best_cpu = 0;
    for (int r = 0; r < reps && !rc; r++) {
      double t0 = dit_time_now(), c0 = bench_cpu_seconds();
      if (dit_vae_kl_decode(m, &tz, &ti, tile, &err) != DIT_OK) {
        fprintf(stderr, "bench_vae: %s\n", err.msg);
        rc = 1;
      }
      double dt = dit_time_now() - t0, dc = bench_cpu_seconds() - c0;
      if (dt < best) {
        best = dt;
        best_cpu = dc;
      }
    }
    if (!rc) {
      /* a tiled decode runs the per-tile cost once per tile */
      double flops = cost.flops;
      if (ct < lat) {
        int ov = tile / 4, n = (lat - ov + (ct - ov) - 1) / (ct - ov);
        flops *= (double)n * n;
      }
      char label[32];
      snprintf(label, sizeof label, "%dx%d", px, px);
      printf("%-10s %9.2f %9.2f %9.1f %10.1f %9.1f %12.1f %12.1f\n", label, best, best_cpu, flops / 1e9,
             flops / 1e9 / best, flops / 1e9 / (best_cpu / be->n_threads), (double)cost.act_bytes / 1048576.0,
             (double)dit_peak_rss_bytes() / 1048576.0);
      fflush(stdout);
    }
    free(z);
    free(img);
  }
  dit_vae_kl_free(m);
  dit_backend_free(be);
  return rc;
}
