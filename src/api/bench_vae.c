/* VAE decode benchmark (ditrun bench --vae): the Flux / Z-Image AutoencoderKL decoder (the
 * one `generate` runs for both families) on one random latent of res/8 x res/8 x 16, with
 * deterministic random BF16 weights made in memory. Timed as the model benchmark is (warmup,
 * the median of iters), then once through the profiling backend for the per-op split and
 * the convolutions by shape. The latent comes from and the image goes to host memory, as in
 * `generate`, so the upload and download are part of the time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/bench_internal.h"
#include "core/timer.h"
#include "models/vae_kl.h"

typedef struct vae_bench {
  dit_vae_kl *vae;
  float *z, *img; /* host latent [1, 16, h, w] and image [1, 3, 8h, 8w] */
  int lat, res;
} vae_bench;

static dit_status decode_once(vae_bench *b, double *ms, dit_error *err) {
  dit_tensor z = dit_tensor_4d(DIT_F32, b->z, 1, 16, b->lat, b->lat);
  dit_tensor img = dit_tensor_4d(DIT_F32, b->img, 1, 3, b->res, b->res);
  const double t0 = dit_time_now();
  DIT_TRY(dit_vae_kl_decode(b->vae, &z, &img, 0, err)); /* returns after the image is on the host */
  *ms = (dit_time_now() - t0) * 1e3;
  return DIT_OK;
}

static dit_status setup(dit_backend *prof, const dit_bench_params *p, vae_bench *b, dit_bench_result *r,
                        dit_error *err) {
  dit_vae_kl_config c;
  dit_vae_kl_config_flux1(&c);
  b->res = p->res, b->lat = p->res / 8;
  DIT_TRY(dit_vae_kl_create_random(prof, &c, p->seed, &b->vae, err));
  r->weight_bytes = dit_backend_profiler_stats(prof)->live_bytes;
  const dit_dtype adt = dit_backend_is_host(prof) || p->dtype == DIT_F32 ? DIT_F32 : DIT_BF16;
  DIT_TRY(dit_vae_kl_set_act_dtype(b->vae, adt, err));
  snprintf(r->act_dtype, sizeof r->act_dtype, "%s", dit_dtype_name(adt));
  dit_cost cost;
  DIT_TRY(dit_vae_kl_cost_of(b->vae, b->lat, b->lat, 0, &cost, err));
  r->flops = cost.flops;
  const size_t nz = (size_t)16 * b->lat * b->lat, ni = (size_t)3 * b->res * b->res;
  b->z = malloc(nz * sizeof *b->z);
  b->img = malloc(ni * sizeof *b->img);
  if (!b->z || !b->img) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the latent and the image");
  dit_bench_fill_host(b->z, nz, p->seed ^ 0x3333);
  return DIT_OK;
}

static dit_status measure(dit_backend *prof, const dit_bench_params *p, vae_bench *b, dit_bench_result *r,
                          dit_error *err) {
  double ms = 0, *ts = malloc((size_t)p->iters * sizeof *ts);
  if (!ts) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  dit_status s = DIT_OK;
  for (int i = 0; i < p->warmup && s == DIT_OK; i++) {
    s = decode_once(b, &ms, err);
    if (i == 0) r->first_ms = ms;
  }
  for (int i = 0; i < p->iters && s == DIT_OK; i++) {
    s = decode_once(b, &ts[i], err);
    if (i == 0 && p->warmup == 0) r->first_ms = ts[0];
    const size_t used = dit_bench_device_used(p);
    if (used > r->peak_mem_bytes) r->peak_mem_bytes = used;
  }
  if (s == DIT_OK) {
    r->iters = p->iters;
    r->ms_median = dit_bench_median(ts, p->iters);
    r->ms_min = ts[0], r->ms_max = ts[p->iters - 1];
    r->tflops = r->flops / (r->ms_median * 1e-3) / 1e12;
  }
  free(ts);
  if (s == DIT_OK && p->profile) {
    dit_backend_profiler_reset(prof);
    dit_backend_profiler_enable(prof, true);
    s = decode_once(b, &r->prof_total_ms, err);
    dit_backend_profiler_enable(prof, false);
    if (s == DIT_OK) s = dit_bench_take_profile(prof, r, err);
  }
  if (s == DIT_OK) {
    r->output_finite = 1; /* dit_vae_kl_decode refuses a non-finite image */
    r->alloc_peak_bytes = dit_backend_profiler_stats(prof)->peak_bytes;
    if (dit_backend_is_host(prof)) r->peak_mem_bytes = dit_peak_rss_bytes();
  }
  return s;
}

dit_status dit_bench_vae_run(dit_ctx *ctx, const dit_bench_params *p, dit_bench_result *r) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  memset(r, 0, sizeof *r);
  if (!p) return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench vae: no parameters");
  DIT_TRY(dit_bench_check_params(p, err));
  if (p->dtype != DIT_BF16 && p->dtype != DIT_F32)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "bench vae: dtype %s (the decoder's activations: bf16 or f32)",
                      dit_dtype_name(p->dtype));
  r->device_base_bytes = dit_bench_device_used(p);
  dit_backend *be = NULL, *prof = NULL;
  DIT_TRY(dit_bench_make_backend(ctx, p, &be, err));
  snprintf(r->arch, sizeof r->arch, "vae-flux");
  snprintf(r->device, sizeof r->device, "%s", be->ops->name);
  snprintf(r->weight_dtype, sizeof r->weight_dtype, "bf16");
  if (p->device == DIT_DEVICE_CPU) snprintf(r->cpu_isa, sizeof r->cpu_isa, "%s", dit_cpu_isa_name(be));
  r->res = p->res, r->threads = be->n_threads;
  vae_bench b;
  memset(&b, 0, sizeof b);
  const double t0 = dit_time_now();
  dit_status s = dit_backend_profiler_create(be, &prof, err);
  if (s == DIT_OK) s = setup(prof, p, &b, r, err);
  r->setup_s = dit_time_now() - t0;
  if (s == DIT_OK) s = measure(prof, p, &b, r, err);
  dit_vae_kl_free(b.vae);
  free(b.z);
  free(b.img);
  dit_backend_profiler_free(prof);
  dit_backend_free(be);
  if (s != DIT_OK) dit_error_prefix(err, "bench vae");
  return s;
}
