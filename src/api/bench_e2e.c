/* End-to-end benchmark (ditrun bench --e2e STEPS): what `ditrun generate` does for one
 * Z-Image-Turbo image, at the real geometry with deterministic random weights created in
 * memory, all three models on the bench's device: the Qwen3-4B text encoder over text_len
 * tokens (hidden_states[-2] as the caption features), STEPS transformer forwards with a
 * flow-matching Euler update of the latents, and the VAE decode of the latents to pixels.
 * Phases are timed with a sync at each boundary; warmup runs first, then the median of iters.
 * The sampler's arithmetic (sigmas, the update) runs on the host as in the pipeline, with
 * the latents uploaded and downloaded around each forward (a staged forward). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/bench_internal.h"
#include "core/timer.h"
#include "models/qwen3.h"
#include "models/vae_kl.h"

#define E2E_MAX_STEPS 1000

/* Qwen3-4B, the Z-Image text encoder; with the bench's test geometry overrides a 2-layer
 * encoder of the transformer's caption width (so tests can run it on a CPU). */
static dit_qwen3_config qwen3_for(const dit_bench_params *p, int cap_dim) {
  dit_qwen3_config c = {.hidden_size = 2560, .num_layers = 36, .num_heads = 32, .num_kv_heads = 8, .head_dim = 128,
                        .intermediate_size = 9728, .vocab_size = 151936, .max_position_embeddings = 40960,
                        .rms_norm_eps = 1e-6f, .rope_theta = 1e6, .attention_bias = false,
                        .rope_freq_dtype = DIT_F32};
  if (p->dim || p->n_layers || p->cap_feat_dim) {
    c.hidden_size = cap_dim, c.num_layers = 2, c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = cap_dim / 4;
    c.intermediate_size = 2 * cap_dim, c.vocab_size = 1000;
  }
  return c;
}

/* The Flux / Z-Image AutoencoderKL decoder. */
static dit_vae_kl_config flux_vae(void) {
  dit_vae_kl_config c;
  dit_vae_kl_config_flux1(&c);
  return c;
}

typedef struct e2e_models {
  dit_qwen3 *enc;
  dit_zimage *dit;
  dit_vae_kl *vae;
} e2e_models;

typedef struct e2e_bufs {
  int32_t *ids;
  float *cap_dev;      /* [L, cap_dim] F32 in backend memory (the encoder output) */
  float *noise;        /* the initial latents, made once (not timed) */
  float *lat, *pred;   /* host latents [16, 1, h, w] and the prediction */
  float *z, *img;      /* host VAE input and image [3, H, W] */
  float *trace;        /* NULL, or [steps, n_lat]: the latents after each step (the bf16 comparison) */
  size_t n_lat, n_img;
  int cap_dim;
} e2e_bufs;

typedef struct e2e_times {
  double enc, steps, dec, total;
} e2e_times;

static dit_status e2e_setup(dit_backend *be, const dit_bench_params *p, const dit_run_opts *o, e2e_models *m,
                            e2e_bufs *b, dit_bench_e2e_result *r, dit_error *err) {
  dit_zimage_config zc;
  dit_bench_zimage_config(p, &zc);
  if (zc.cap_feat_dim % 8) return dit_errorf(err, DIT_ERR_INVALID_ARG, "caption width %d: a multiple of 8", zc.cap_feat_dim);
  dit_qwen3_config qc = qwen3_for(p, zc.cap_feat_dim);
  b->cap_dim = zc.cap_feat_dim;
  dit_vae_kl_config vc = flux_vae();
  DIT_TRY(dit_qwen3_create_random(be, &qc, DIT_BF16, p->seed, &m->enc, err));
  DIT_TRY(dit_zimage_create_random(be, &zc, p->dtype, p->seed + 1, &m->dit, err));
  dit_zimage_set_stacked_qkv(m->dit, o->zimage_stack_qkv);
  if (!dit_backend_is_host(be)) DIT_TRY(dit_zimage_set_act_dtype(m->dit, p->dtype, err));
  DIT_TRY(dit_vae_kl_create_random(be, &vc, p->seed + 2, &m->vae, err));
  if (!dit_backend_is_host(be)) DIT_TRY(dit_vae_kl_set_act_dtype(m->vae, p->dtype, err));
  r->weight_bytes = dit_zimage_weight_bytes(m->dit);
  const int lat = p->res / 8;
  b->n_lat = (size_t)16 * lat * lat;
  b->n_img = (size_t)3 * p->res * p->res;
  b->ids = malloc((size_t)p->text_len * sizeof *b->ids);
  b->noise = malloc(b->n_lat * sizeof(float));
  b->lat = malloc(b->n_lat * sizeof(float));
  b->pred = malloc(b->n_lat * sizeof(float));
  b->z = malloc(b->n_lat * sizeof(float));
  b->img = malloc(b->n_img * sizeof(float));
  if (!b->ids || !b->noise || !b->lat || !b->pred || !b->z || !b->img)
    return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < b->n_lat; i++) b->noise[i] = sinf((float)i * 0.37f); /* fixed "noise" */
  for (int i = 0; i < p->text_len; i++) b->ids[i] = (int32_t)((i * 7919 + 13) % qc.vocab_size);
  void *cd = NULL;
  DIT_TRY(be->ops->alloc(be, (size_t)p->text_len * (size_t)qc.hidden_size * sizeof(float), &cd, err));
  b->cap_dev = cd;
  return DIT_OK;
}

static void e2e_free(dit_backend *be, e2e_models *m, e2e_bufs *b) {
  dit_qwen3_free(m->enc);
  dit_zimage_free(m->dit);
  dit_vae_kl_free(m->vae);
  if (b->cap_dev) be->ops->free(be, b->cap_dev);
  free(b->ids), free(b->noise), free(b->lat), free(b->pred), free(b->z), free(b->img), free(b->trace);
}

/* One image: encode, steps forwards with Euler updates, decode. */
static dit_status e2e_once(dit_backend *be, const dit_bench_params *p, int steps, const e2e_models *m,
                           e2e_bufs *b, e2e_times *t, dit_error *err) {
  const int lat = p->res / 8;
  double t0 = dit_time_now();
  int layer = -2;
  float *outs[1] = {b->cap_dev};
  DIT_TRY(dit_qwen3_encode(m->enc, 1, p->text_len, b->ids, NULL, 1, &layer, outs, err));
  DIT_TRY(be->ops->sync(be, err));
  double t1 = dit_time_now();
  memcpy(b->lat, b->noise, b->n_lat * sizeof(float));
  dit_tensor cap = dit_tensor_2d(DIT_F32, b->cap_dev, p->text_len, b->cap_dim);
  cap.device = dit_backend_device(be);
  dit_tensor x = dit_tensor_4d(DIT_F32, b->lat, 16, 1, lat, lat), o = dit_tensor_4d(DIT_F32, b->pred, 16, 1, lat, lat);
  /* the sampler stages host tensors (as generate does): on a GPU the features come back once */
  float *ch = NULL;
  dit_status s = DIT_OK;
  if (!dit_backend_is_host(be)) {
    const size_t nb = (size_t)p->text_len * (size_t)b->cap_dim * sizeof(float);
    ch = malloc(nb);
    s = ch ? be->ops->download(be, ch, b->cap_dev, nb, err) : dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
    cap.data = ch;
    cap.device = DIT_DEV_CPU;
  }
  for (int k = 0; k < steps && s == DIT_OK; k++) {
    float sg = 1.0f - (float)k / (float)steps, sn = 1.0f - (float)(k + 1) / (float)steps;
    s = dit_zimage_forward(m->dit, 1, &x, &cap, &sg, &o, err);
    for (size_t i = 0; s == DIT_OK && i < b->n_lat; i++) b->lat[i] += (sn - sg) * -b->pred[i];
    if (b->trace) memcpy(b->trace + (size_t)k * b->n_lat, b->lat, b->n_lat * sizeof(float));
  }
  free(ch);
  DIT_TRY(s);
  double t2 = dit_time_now();
  const dit_vae_kl_config *vc = dit_vae_kl_get_config(m->vae);
  for (size_t i = 0; i < b->n_lat; i++) b->z[i] = b->lat[i] / vc->scaling_factor + vc->shift_factor;
  dit_tensor z = dit_tensor_4d(DIT_F32, b->z, 1, 16, lat, lat), img = dit_tensor_4d(DIT_F32, b->img, 1, 3, p->res, p->res);
  DIT_TRY(dit_vae_kl_decode(m->vae, &z, &img, 0, err));
  double t3 = dit_time_now();
  t->enc = (t1 - t0) * 1e3, t->steps = (t2 - t1) * 1e3, t->dec = (t3 - t2) * 1e3, t->total = (t3 - t0) * 1e3;
  return DIT_OK;
}

static dit_status e2e_measure(dit_backend *be, const dit_bench_params *p, int steps, const e2e_models *m,
                              e2e_bufs *b, dit_bench_e2e_result *r, dit_error *err) {
  e2e_times t;
  for (int i = 0; i < p->warmup; i++) DIT_TRY(e2e_once(be, p, steps, m, b, &t, err));
  double *v = malloc((size_t)p->iters * 4 * sizeof *v);
  if (!v) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  dit_status s = DIT_OK;
  for (int i = 0; i < p->iters && s == DIT_OK; i++) {
    s = e2e_once(be, p, steps, m, b, &t, err);
    v[i] = t.enc, v[p->iters + i] = t.steps, v[2 * p->iters + i] = t.dec, v[3 * p->iters + i] = t.total;
    size_t used = dit_bench_device_used(p);
    if (used > r->peak_mem_bytes) r->peak_mem_bytes = used;
  }
  if (s == DIT_OK) {
    r->encode_ms = dit_bench_median(v, p->iters);
    r->steps_ms = dit_bench_median(v + p->iters, p->iters);
    r->decode_ms = dit_bench_median(v + 2 * p->iters, p->iters);
    r->total_ms = dit_bench_median(v + 3 * p->iters, p->iters);
    r->total_min_ms = v[3 * p->iters], r->total_max_ms = v[4 * p->iters - 1];
    r->step_ms = r->steps_ms / steps;
    r->iters = p->iters;
    r->output_finite = 1;
    for (size_t i = 0; i < b->n_img; i++)
      if (!isfinite(b->img[i])) r->output_finite = 0;
  }
  free(v);
  return s;
}

static double rel_l2(const float *q, const float *ref, size_t n) {
  double se = 0, sr = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = (double)q[i] - ref[i];
    se += d * d, sr += (double)ref[i] * ref[i];
  }
  return sr > 0 ? sqrt(se / sr) : sqrt(se);
}

/* --precision fp8 --ref-bf16: one image with the fp8 transformer, its latents kept after each
 * step, then the same image with a bf16 transformer of the same random weights (fp8 off);
 * the relative L2 error of each step's latents and of the decoded image against bf16. */
static dit_status e2e_ref(dit_backend *be, const dit_bench_params *p, const dit_run_opts *o, int steps,
                          e2e_models *m, e2e_bufs *b, dit_bench_e2e_result *r, dit_error *err) {
  const size_t nt = (size_t)steps * b->n_lat;
  float *q = malloc(nt * sizeof *q), *qi = malloc(b->n_img * sizeof *qi);
  b->trace = malloc(nt * sizeof *b->trace);
  dit_status s = q && qi && b->trace ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the bf16 comparison");
  e2e_times t;
  if (s == DIT_OK) s = e2e_once(be, p, steps, m, b, &t, err);
  if (s == DIT_OK) {
    memcpy(q, b->trace, nt * sizeof *q);
    memcpy(qi, b->img, b->n_img * sizeof *qi);
    dit_zimage_free(m->dit);
    m->dit = NULL;
    const bool fp8 = be->fp8;
    be->fp8 = false; /* the reference: bf16 weights and bf16 GEMMs */
    dit_zimage_config zc;
    dit_bench_zimage_config(p, &zc);
    s = dit_zimage_create_random(be, &zc, p->dtype, p->seed + 1, &m->dit, err);
    if (s == DIT_OK) {
      dit_zimage_set_stacked_qkv(m->dit, o->zimage_stack_qkv);
      s = dit_zimage_set_act_dtype(m->dit, p->dtype, err);
    }
    if (s == DIT_OK) s = e2e_once(be, p, steps, m, b, &t, err);
    be->fp8 = fp8;
  }
  if (s == DIT_OK) {
    r->have_ref = 1;
    r->ref_steps = steps < DIT_BENCH_E2E_REF_STEPS ? steps : DIT_BENCH_E2E_REF_STEPS;
    for (int k = 0; k < r->ref_steps; k++)
      r->ref_step_rel_l2[k] = rel_l2(q + (size_t)k * b->n_lat, b->trace + (size_t)k * b->n_lat, b->n_lat);
    r->ref_img_rel_l2 = rel_l2(qi, b->img, b->n_img);
  }
  free(q);
  free(qi);
  return s;
}

dit_status dit_bench_e2e_run(dit_ctx *ctx, const dit_bench_params *p, int steps, dit_bench_e2e_result *r) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  memset(r, 0, sizeof *r);
  if (!p) return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench e2e: no parameters");
  DIT_TRY(dit_bench_check_params(p, err));
  if (strcmp(p->arch, "zimage"))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "bench e2e: only --arch zimage (got %s)", p->arch);
  if (steps < 1 || steps > E2E_MAX_STEPS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "bench e2e: steps %d outside 1..%d", steps, E2E_MAX_STEPS);
  r->device_base_bytes = dit_bench_device_used(p);
  dit_backend *be = NULL;
  DIT_TRY(dit_bench_make_backend(ctx, p, &be, err));
  snprintf(r->device, sizeof r->device, "%s", be->ops->name);
  r->res = p->res, r->text_len = p->text_len, r->steps = steps;
  e2e_models m = {0};
  e2e_bufs b;
  memset(&b, 0, sizeof b);
  double t0 = dit_time_now();
  dit_status s = e2e_setup(be, p, &ctx->opts, &m, &b, r, err);
  r->setup_s = dit_time_now() - t0;
  if (s == DIT_OK) s = e2e_measure(be, p, steps, &m, &b, r, err);
  if (s == DIT_OK) {
    long cap = 0;
    dit_zimage_graph_counts(m.dit, &cap, &r->graph_launches);
  }
  if (s == DIT_OK && p->ref_bf16 && be->fp8) s = e2e_ref(be, p, &ctx->opts, steps, &m, &b, r, err);
  e2e_free(be, &m, &b);
  if (s != DIT_OK) dit_error_prefix(err, "bench e2e");
  dit_backend_free(be);
  return s;
}

void dit_bench_e2e_print(const dit_bench_e2e_result *r, int json, FILE *f) {
  if (json) {
    fprintf(f,
            "{\"mode\": \"e2e\", \"arch\": \"zimage\", \"device\": \"%s\", \"res\": %d, \"text_len\": %d, \"steps\": %d, "
            "\"iters\": %d, \"encode_ms\": %.3f, \"steps_ms\": %.3f, \"step_ms\": %.3f, \"decode_ms\": %.3f, "
            "\"total_ms\": %.3f, \"total_min_ms\": %.3f, \"total_max_ms\": %.3f, \"setup_s\": %.3f, "
            "\"weight_bytes\": %zu, \"peak_mem_bytes\": %zu, \"device_base_bytes\": %zu, \"graph_launches\": %ld, "
            "\"output_finite\": %s",
            r->device, r->res, r->text_len, r->steps, r->iters, r->encode_ms, r->steps_ms, r->step_ms, r->decode_ms,
            r->total_ms, r->total_min_ms, r->total_max_ms, r->setup_s, r->weight_bytes, r->peak_mem_bytes,
            r->device_base_bytes, r->graph_launches, r->output_finite ? "true" : "false");
    if (r->have_ref) {
      fprintf(f, ", \"ref_step_rel_l2\": [");
      for (int k = 0; k < r->ref_steps; k++) fprintf(f, "%s%.6g", k ? ", " : "", r->ref_step_rel_l2[k]);
      fprintf(f, "], \"ref_img_rel_l2\": %.6g", r->ref_img_rel_l2);
    }
    fprintf(f, "}\n");
    return;
  }
  fprintf(f, "zimage end to end, %dx%d, %d text tokens, %d steps, device %s (random weights: Qwen3 text encoder, "
             "transformer, Flux VAE)\n", r->res, r->res, r->text_len, r->steps, r->device);
  fprintf(f, "  total: median %.1f ms (min %.1f, max %.1f, %d runs); setup %.1f s\n", r->total_ms, r->total_min_ms,
          r->total_max_ms, r->iters, r->setup_s);
  fprintf(f, "  text encode %.1f ms, %d steps %.1f ms (%.2f ms per step), VAE decode %.1f ms\n", r->encode_ms,
          r->steps, r->steps_ms, r->step_ms, r->decode_ms);
  fprintf(f, "  memory: transformer weights %.2f GiB, device in use peak %.2f GiB; graph launches %ld; output "
             "finite: %s\n", (double)r->weight_bytes / (1u << 30), (double)r->peak_mem_bytes / (1u << 30),
          r->graph_launches, r->output_finite ? "yes" : "NO");
  if (r->have_ref) {
    fprintf(f, "  fp8 against bf16 (same random weights): latents' relative L2 error after each step:");
    for (int k = 0; k < r->ref_steps; k++) fprintf(f, " %.2e", r->ref_step_rel_l2[k]);
    fprintf(f, "; decoded image %.2e\n", r->ref_img_rel_l2);
  }
}
