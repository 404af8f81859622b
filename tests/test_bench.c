/* ditrun bench at a tiny geometry on the CPU (Z-Image, FLUX.2 klein, Krea 2, LTX-2, MiniMax-H3): the public
 * API's result (FLOPs from the formula, op counts of the profiled run, finite output), the CLI's JSON and its strict
 * usage errors, and the pieces under it: random-weight models are deterministic, and the
 * profiling backend changes no result bit. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "ditrun.h"
#include "models/zimage.h"
#include "testing.h"

/* The tiny geometry used throughout: D 256, 4 heads, 2 layers, 1 refiner, caption 64. */
#define GEOM "--res 64 --text-len 20 --dim 256 --heads 4 --layers 2 --refiners 1 --cap-dim 64"

static void tiny_params(dit_bench_params *p) {
  dit_bench_params_default(p);
  p->res = 64;
  p->text_len = 20;
  p->dim = 256;
  p->n_heads = 4;
  p->n_layers = 2;
  p->n_refiner_layers = 1;
  p->cap_feat_dim = 64;
  p->iters = 2;
  p->warmup = 1;
}

static void test_api(const dt_args *args) {
  dit_ctx *ctx = NULL;
  CHECK(dit_ctx_create(NULL, &ctx) == DIT_OK);
  dit_bench_params p;
  tiny_params(&p);
  dit_bench_result r;
  dit_status s = dit_bench_run(ctx, &p, &r);
  CHECK_MSG(s == DIT_OK, "%s", dit_ctx_last_error(ctx));
  if (s == DIT_OK) {
    /* 64 px -> 8x8 latent -> 16 tokens, padded to 32; 20 caption tokens -> 32 */
    CHECK(r.img_tokens == 32 && r.cap_tokens == 32);
    const double D = 256, Fd = 682, n = 64, ni = 32, nc = 32, L = 2, R = 1;
    double want = 2 * (4 * D * D + 3 * D * Fd) * (L * n + R * ni + R * nc) + 4 * D * (L * n * n + R * ni * ni + R * nc * nc);
    CHECK_MSG(fabs(r.flops - want) <= 1e-9 * want, "flops %g, want %g", r.flops, want);
    CHECK(r.output_finite);
    CHECK(r.ms_median > 0 && r.ms_min <= r.ms_median && r.ms_median <= r.ms_max && r.iters == 2);
    CHECK(r.tflops > 0 && r.peak_tflops > 0 && r.pct_peak > 0);
    CHECK(r.profiled && r.prof_total_ms > 0);
    CHECK(r.phase_ms[0] + r.phase_ms[1] + r.phase_ms[2] <= r.prof_total_ms * 1.0001);
    long att = 0, lin = 0;
    for (int i = 0; i < r.n_ops; i++) {
      if (!strcmp(r.op_name[i], "attention")) att = r.op_calls[i];
      if (!strcmp(r.op_name[i], "linear")) lin = r.op_calls[i];
    }
    /* one attention per block; 5 linears per block (q/k/v stacked: random weights lie back to back)
     * + 3 modulations + 3 (time) + 2 (embedders) + 1 (final) */
    CHECK_MSG(att == 4, "attention calls %ld", att);
    CHECK_MSG(lin == 4 * 5 + 3 + 3 + 2 + 1, "linear calls %ld", lin);
    /* the GEMM shapes account for every linear call; the main blocks' stacked q/k/v is one */
    long shp_calls = 0, qkv = 0;
    double shp_ms = 0, lin_ms = 0;
    for (int i = 0; i < r.n_gemm_shapes; i++) {
      shp_calls += r.gemm_shapes[i].calls, shp_ms += r.gemm_shapes[i].ms;
      if (r.gemm_shapes[i].m == 64 && r.gemm_shapes[i].n == 3 * 256 && r.gemm_shapes[i].k == 256)
        qkv = r.gemm_shapes[i].calls;
    }
    for (int i = 0; i < r.n_ops; i++)
      if (!strcmp(r.op_name[i], "linear")) lin_ms = r.op_ms[i];
    CHECK_MSG(shp_calls == lin && qkv == 2, "shape calls %ld of %ld, stacked qkv at m 64: %ld", shp_calls, lin, qkv);
    CHECK(fabs(shp_ms - lin_ms) <= 1e-9 + 1e-9 * lin_ms && !r.prof_device_timed);
    CHECK(r.weight_bytes > 0 && r.alloc_peak_bytes > r.weight_bytes && r.peak_mem_bytes > 0);
    CHECK(!strcmp(r.device, "cpu") && !strcmp(r.act_dtype, "F32") && !strcmp(r.weight_dtype, "BF16"));
  }
  /* quantized weights against bf16 weights of the same random values: a small, nonzero error
   * (Q8_0 keeps ~8 bits, e4m3 ~4 of bf16's 8) */
  static const struct {
    dit_dtype t;
    double lo, hi;
  } qs[] = {{DIT_Q8_0, 1e-4, 0.05}, {DIT_F8_E4M3, 1e-3, 0.2}};
  for (int k = 0; k < 2; k++) {
    tiny_params(&p);
    p.dtype = qs[k].t, p.ref_bf16 = 1, p.profile = 0, p.iters = 1, p.warmup = 0;
    s = dit_bench_run(ctx, &p, &r);
    CHECK_MSG(s == DIT_OK, "%s", dit_ctx_last_error(ctx));
    printf("%s vs bf16 weights: relative error %.3e (L2), %.3e (max)\n", dit_dtype_name(qs[k].t), r.ref_rel_l2,
           r.ref_rel_max);
    CHECK(s != DIT_OK || (r.have_ref && r.ref_rel_l2 > qs[k].lo && r.ref_rel_l2 < qs[k].hi && r.ref_rel_max > 0));
  }
  tiny_params(&p);
  p.res = 40; /* not a multiple of 16 */
  CHECK(dit_bench_run(ctx, &p, &r) == DIT_ERR_INVALID_ARG);
  tiny_params(&p);
  p.arch = "flux";
  CHECK(dit_bench_run(ctx, &p, &r) == DIT_ERR_UNSUPPORTED);
  dit_ctx_free(ctx);
}

/* FLUX.2 klein at a tiny geometry: inner dim 64 (2 heads of 32), 1 double + 1 single
 * block, joint_attention_dim 32, in_channels 128 as klein's. */
#define FLUX_GEOM "--arch flux2-klein-4b --res 64 --dim 64 --heads 2 --layers 1 --refiners 1 --cap-dim 32"

/* A FLUX MMDiT variant at a tiny geometry: inner dim 64 (2 heads of 32), 1 double + 1 single
 * block, joint_attention_dim 32: tokens, the FLOP formula (mlp: the MLP's D*M MACs per token
 * and block, M its width), one attention per block, and a bad head split refused. */
static void check_flux_arch(const char *arch, double M, double mlp, int bad_heads) {
  dit_ctx *ctx = NULL;
  CHECK(dit_ctx_create(NULL, &ctx) == DIT_OK);
  dit_bench_params p;
  tiny_params(&p);
  p.arch = arch;
  p.text_len = 12;
  p.dim = 64, p.n_heads = 2, p.n_layers = 1, p.n_refiner_layers = 1, p.cap_feat_dim = 32;
  dit_bench_result r;
  dit_status s = dit_bench_run(ctx, &p, &r);
  CHECK_MSG(s == DIT_OK, "%s: %s", arch, dit_ctx_last_error(ctx));
  if (s == DIT_OK) {
    /* 64 px -> (64/16)^2 = 16 image tokens, 12 text tokens, no padding */
    CHECK(r.img_tokens == 16 && r.cap_tokens == 12 && !strcmp(r.arch, arch));
    const double D = 64, S = 28, blocks = 2;
    double want = blocks * (2 * (4 * D * D + mlp * D * M) * S + 4 * D * S * S);
    CHECK_MSG(fabs(r.flops - want) <= 1e-9 * want, "%s: flops %g, want %g", arch, r.flops, want);
    CHECK(r.output_finite && r.ms_median > 0 && r.tflops > 0 && r.profiled);
    long att = 0;
    for (int i = 0; i < r.n_ops; i++)
      if (!strcmp(r.op_name[i], "attention")) att = r.op_calls[i];
    CHECK_MSG(att == 2, "%s: attention calls %ld (one per block)", arch, att);
    CHECK(r.weight_bytes > 0 && r.alloc_peak_bytes > r.weight_bytes);
  }
  p.n_heads = bad_heads; /* 64 / bad_heads is no whole head */
  CHECK(dit_bench_run(ctx, &p, &r) == DIT_ERR_INVALID_ARG);
  dit_ctx_free(ctx);
}

/* FLUX.2 klein: SwiGLU MLP (M = 3D, 3 D M MACs); FLUX.1 dev: GELU MLP (M = 4D, 2 D M), the
 * pooled embedding and guidance going in as FluxPipeline passes them. 3 heads do not divide 64. */
static void test_flux_api(const dt_args *args) {
  (void)args;
  check_flux_arch("flux2-klein-4b", 192, 3, 3);
  check_flux_arch("flux1-dev", 256, 2, 3);
}

/* Krea 2 at a tiny geometry: inner dim 128 (4 heads of 32, 1 KV head), 2 blocks, text width 32
 * (one head, MLP 86) with the released 12 taps and 2 + 2 fusion blocks, 20 text tokens: tokens,
 * the FLOP formula, one attention per block and per fusion block, a bad head split refused. */
static void test_krea2_api(const dt_args *args) {
  (void)args;
  dit_ctx *ctx = NULL;
  CHECK(dit_ctx_create(NULL, &ctx) == DIT_OK);
  dit_bench_params p;
  tiny_params(&p);
  p.arch = "krea2";
  p.dim = 128, p.n_heads = 4, p.n_layers = 2, p.cap_feat_dim = 32;
  dit_bench_result r;
  dit_status s = dit_bench_run(ctx, &p, &r);
  CHECK_MSG(s == DIT_OK, "krea2: %s", dit_ctx_last_error(ctx));
  if (s == DIT_OK) {
    CHECK(r.img_tokens == 16 && r.cap_tokens == 20 && !strcmp(r.arch, "krea2"));
    const double D = 128, Dkv = 32, F = 341, S = 36, L = 20, T = 12, td = 32, tf = 86;
    const double tblk = 2 * (5 * td * td + 3 * td * tf);
    const double want = 2 * (2 * (3 * D * D + 2 * D * Dkv + 3 * D * F) * S + 4 * D * S * S) +
                        2 * (tblk * L * T + 4 * td * T * T * L) + 2 * (tblk * L + 4 * td * L * L) + 2 * (td * D + D * D) * L;
    CHECK_MSG(fabs(r.flops - want) <= 1e-9 * want, "krea2: flops %g, want %g", r.flops, want);
    CHECK(r.output_finite && r.ms_median > 0 && r.profiled);
    long att = 0;
    for (int i = 0; i < r.n_ops; i++)
      if (!strcmp(r.op_name[i], "attention")) att = r.op_calls[i];
    CHECK_MSG(att == 2 + 4, "krea2: attention calls %ld (2 blocks + 4 fusion blocks)", att);
  }
  p.n_heads = 3; /* 128 / 3 is no whole head */
  CHECK(dit_bench_run(ctx, &p, &r) == DIT_ERR_INVALID_ARG);
  dit_ctx_free(ctx);
}

/* One attention's FLOPs (q, k, v, out projections and QK^T + PV), ungated. */
static double att(double Sq, double Dq, double Sk, double Dk, double I) {
  return 2 * (2 * Sq * Dq * I + 2 * Sk * Dk * I) + 4 * Sq * Sk * I;
}

/* LTX-2.0 at a tiny geometry: 2 heads a stream (video width 256, audio 128), 2 blocks, text
 * width 64, 16 text tokens, a 64x96 clip of 9 frames: 2 x 3 x 2 video tokens and round(9 / 24
 * * 25) = 9 audio tokens; the FLOP formula written out, six attentions a block; LTX-2.3 runs;
 * frame counts, sizes and overrides it cannot take are refused, as frames for an image model. */
static void test_ltx2_api(const dt_args *args) {
  (void)args;
  dit_ctx *ctx = NULL;
  CHECK(dit_ctx_create(NULL, &ctx) == DIT_OK);
  dit_bench_params p;
  dit_bench_params_default(&p);
  p.arch = "ltx2", p.res = 64, p.height = 96, p.frames = 9, p.text_len = 16;
  p.n_heads = 2, p.n_layers = 2, p.cap_feat_dim = 64, p.iters = 1, p.warmup = 0;
  dit_bench_result r;
  dit_status s = dit_bench_run(ctx, &p, &r);
  CHECK_MSG(s == DIT_OK, "ltx2: %s", dit_ctx_last_error(ctx));
  if (s == DIT_OK) {
    CHECK_MSG(r.img_tokens == 12 && r.aux_tokens == 9 && r.cap_tokens == 16, "ltx2 tokens %lld %lld %lld",
              r.img_tokens, r.aux_tokens, r.cap_tokens);
    CHECK(r.res == 64 && r.height == 96 && r.frames == 9 && !strcmp(r.arch, "ltx2"));
    const double N = 12, L = 9, T = 16, Dv = 256, Da = 128, C = 64;
    const double video = att(N, Dv, N, Dv, Dv) + att(N, Dv, T, Dv, Dv) + att(N, Dv, L, Da, Da) + 16 * Dv * Dv * N;
    const double audio = att(L, Da, L, Da, Da) + att(L, Da, T, Da, Da) + att(L, Da, N, Dv, Da) + 16 * Da * Da * L;
    const double rest = 2 * N * Dv * 256 + 2 * L * Da * 256 + 2 * T * (C * Dv + Dv * Dv) + 2 * T * (C * Da + Da * Da);
    const double want = 2 * (video + audio) + rest;
    CHECK_MSG(fabs(r.flops - want) <= 1e-9 * want, "ltx2: flops %g, want %g", r.flops, want);
    CHECK(r.output_finite && r.ms_median > 0 && r.profiled);
    long att_calls = 0;
    for (int i = 0; i < r.n_ops; i++)
      if (!strcmp(r.op_name[i], "attention")) att_calls = r.op_calls[i];
    CHECK_MSG(att_calls == 2 * 6, "ltx2: attention calls %ld (6 a block)", att_calls);
  }
  p.arch = "ltx23";
  s = dit_bench_run(ctx, &p, &r);
  CHECK_MSG(s == DIT_OK && r.output_finite, "ltx23: %s", dit_ctx_last_error(ctx));
  p.frames = 10; /* not 1 + a multiple of 8 */
  CHECK(dit_bench_run(ctx, &p, &r) == DIT_ERR_INVALID_ARG);
  p.frames = 9, p.height = 80; /* not a multiple of 32 */
  CHECK(dit_bench_run(ctx, &p, &r) == DIT_ERR_INVALID_ARG);
  p.height = 96, p.dim = 512; /* no such override */
  CHECK(dit_bench_run(ctx, &p, &r) == DIT_ERR_INVALID_ARG);
  dit_bench_params q;
  tiny_params(&q);
  q.frames = 9; /* an image model */
  CHECK(dit_bench_run(ctx, &q, &r) == DIT_ERR_UNSUPPORTED);
  dit_ctx_free(ctx);
}

/* MiniMax-H3 at a tiny geometry: hidden 192 (attention 256 = 4 heads of 64, SwiGLU 512, time MLP 192 -> 96), 2
 * blocks, 1 refiner block, text width 64, a 64-pixel image (4x4 latents, 2x2 patches: 4 video rows) and 20 text
 * rows: tokens, the FLOP formula and the parameters written out (the modulation projections counted), one
 * attention per block, the modulation folded (no projection in the forward); sizes it cannot take refused. */
static void test_h3_api(const dt_args *args) {
  (void)args;
  dit_ctx *ctx = NULL;
  CHECK(dit_ctx_create(NULL, &ctx) == DIT_OK);
  dit_bench_params p;
  tiny_params(&p);
  p.arch = "minimax-h3";
  p.dim = 192, p.n_heads = 4, p.n_layers = 2, p.n_refiner_layers = 1, p.cap_feat_dim = 64;
  dit_bench_result r;
  dit_status s = dit_bench_run(ctx, &p, &r);
  CHECK_MSG(s == DIT_OK, "minimax-h3: %s", dit_ctx_last_error(ctx));
  if (s == DIT_OK) {
    CHECK_MSG(r.img_tokens == 4 && r.cap_tokens == 20 && r.aux_tokens == 0, "minimax-h3 tokens %lld %lld %lld",
              r.img_tokens, r.cap_tokens, r.aux_tokens);
    CHECK(!strcmp(r.arch, "minimax-h3") && !strcmp(r.act_dtype, "F32"));
    const double H = 192, I = 256, F = 512, L = 20, N = 4, S = 24, td = 64, Pd = 96, Ca = 32, hd = 64, Tm = 96;
    const double row = 2 * (4 * H * I + 3 * F * H);
    const double want =
        (L * row + 4 * L * L * I) + 2 * (S * row + 4 * S * S * I) + 2 * H * (L * td + N * Pd + S * (Pd + Ca));
    CHECK_MSG(fabs(r.flops - want) <= 1e-9 * want, "minimax-h3: flops %g, want %g", r.flops, want);
    const double blk = 2 * H + 4 * I * H + 2 * hd + 3 * F * H, A = 18 * H;
    const double params = (H * Pd + H) + (H * Ca + H) + (H * td + H) + (H * 256 + H) + (Tm * H + Tm) + 2 * H +
                          (2 * H * Tm + 2 * H) + (Pd * H + Pd) + (Ca * H + Ca) + 3 * blk + 2 * (A * Tm + A);
    CHECK_MSG((double)r.params == params, "minimax-h3: params %lld, want %.0f", r.params, params);
    CHECK(r.output_finite && r.ms_median > 0 && r.profiled);
    long att = 0, lin = 0;
    for (int i = 0; i < r.n_ops; i++) {
      if (!strcmp(r.op_name[i], "attention")) att = r.op_calls[i];
      if (!strcmp(r.op_name[i], "linear")) lin = r.op_calls[i];
    }
    CHECK_MSG(att == 3, "minimax-h3: attention calls %ld (2 blocks + 1 refiner block)", att);
    /* 7 a block (q, k, v, out, SwiGLU value and gate, down), context_embedder, proj_in, proj_out */
    CHECK_MSG(lin == 3 * 7 + 3, "minimax-h3: linear calls %ld", lin);
  }
  p.res = 48; /* not a multiple of 32 */
  CHECK(dit_bench_run(ctx, &p, &r) == DIT_ERR_INVALID_ARG);
  p.res = 64, p.n_heads = 3; /* 256 / 3 is no whole head */
  CHECK(dit_bench_run(ctx, &p, &r) == DIT_ERR_INVALID_ARG);
  dit_ctx_free(ctx);
}

/* `ditrun bench ARGS --iters 1 --warmup 0 --json` parsed (NULL, and a failed check, when it
 * did not exit 0 with one JSON object). */
static json_t *bench_json(const dt_args *a, const char *args) {
  char cmd[8192], out[4096];
  static char buf[65536];
  dt_path(out, sizeof out, a->tmp, "bench.json");
  snprintf(cmd, sizeof cmd, "%s/ditrun bench %s --iters 1 --warmup 0 --json", a->bin, args);
  CHECK_MSG(dt_run(cmd, out) == 0, "bench %s failed", args);
  const long n = dt_read_file(out, buf, sizeof buf);
  json_error_t je;
  json_t *j = n > 0 ? json_loads(buf, 0, &je) : NULL;
  CHECK_MSG(j != NULL, "bench %s --json output is not JSON: %s", args, n > 0 ? buf : "");
  return j;
}

static void test_cli(const dt_args *a) {
  char cmd[8192], out[4096];
  dt_path(out, sizeof out, a->tmp, "bench.json");
  json_t *j = bench_json(a, GEOM);
  if (j) {
    CHECK(json_is_number(json_object_get(j, "ms_median")));
    CHECK(json_is_number(json_object_get(j, "tflops")));
    CHECK(json_is_object(json_object_get(j, "phase_ms")));
    CHECK(json_is_true(json_object_get(j, "output_finite")));
    CHECK(json_integer_value(json_object_get(j, "res")) == 64);
    json_decref(j);
  }
  /* FLUX.2: the text length defaults to 512 for the klein archs */
  if ((j = bench_json(a, FLUX_GEOM " --no-profile"))) {
    CHECK(!strcmp(json_string_value(json_object_get(j, "arch")), "flux2-klein-4b"));
    CHECK(json_integer_value(json_object_get(j, "cap_tokens")) == 512);
    CHECK(json_integer_value(json_object_get(j, "img_tokens")) == 16);
    CHECK(json_is_true(json_object_get(j, "output_finite")));
    json_decref(j);
  }
  /* the VAE decoder alone */
  if ((j = bench_json(a, "--vae --res 32"))) {
    CHECK(!strcmp(json_string_value(json_object_get(j, "arch")), "vae-flux"));
    CHECK(json_integer_value(json_object_get(j, "res")) == 32);
    CHECK(json_number_value(json_object_get(j, "flops")) > 0);
    CHECK(json_is_true(json_object_get(json_array_get(json_object_get(j, "gemm_shapes"), 0), "conv")));
    json_decref(j);
  }
  /* LTX-2: WxH and frames */
  if ((j = bench_json(a, "--arch ltx2 --res 64x96 --frames 9 --heads 2 --layers 1 --cap-dim 64 --text-len 16 "
                         "--no-profile"))) {
    CHECK(json_integer_value(json_object_get(j, "res")) == 64 && json_integer_value(json_object_get(j, "height")) == 96);
    CHECK(json_integer_value(json_object_get(j, "frames")) == 9);
    CHECK(json_integer_value(json_object_get(j, "img_tokens")) == 12);
    CHECK(json_integer_value(json_object_get(j, "aux_tokens")) == 9);
    CHECK(json_is_true(json_object_get(j, "output_finite")));
    json_decref(j);
  }
  /* MiniMax-H3: 512 text rows by default, F32 activations on the CPU */
  if ((j = bench_json(a, "--arch minimax-h3 --res 64 --dim 96 --heads 2 --layers 1 --refiners 1 --cap-dim 32 "
                         "--no-profile"))) {
    CHECK(json_integer_value(json_object_get(j, "cap_tokens")) == 512);
    CHECK(json_integer_value(json_object_get(j, "img_tokens")) == 4);
    CHECK(!strcmp(json_string_value(json_object_get(j, "act_dtype")), "F32"));
    CHECK(json_is_true(json_object_get(j, "output_finite")));
    json_decref(j);
  }
  const char *bad[] = {"--res 63", "--res", "--device tpu", "--dtype fp9", "--arch flux", "--iters 0",
                       "--bogus", "--text-len 12x", "--vae --e2e 2", "--res 64x", "--res 64x72", "--res x64",
                       "--frames 0", "--frames 9"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(cmd, sizeof cmd, "%s/ditrun bench " GEOM " %s", a->bin, bad[i]);
    int rc = dt_run(cmd, out);
    CHECK_MSG(rc == 2, "'%s' exited %d, expected 2", bad[i], rc);
  }
}

/* One forward of a random tiny model through be (host tensors). */
static int forward(dit_backend *be, uint64_t seed, float *o, dit_error *err) {
  dit_zimage_config c;
  dit_zimage_config_turbo(&c);
  c.dim = 128, c.n_heads = c.n_kv_heads = 2, c.n_layers = 1, c.n_refiner_layers = 1, c.cap_feat_dim = 32;
  c.axes_dims[0] = 16, c.axes_dims[1] = 24, c.axes_dims[2] = 24;
  dit_zimage *m = NULL;
  if (dit_zimage_create_random(be, &c, DIT_BF16, seed, &m, err) != DIT_OK) return -1;
  float xs[16 * 8 * 8], caps[7 * 32];
  dt_fill_random(xs, 16 * 8 * 8, 3);
  dt_fill_random(caps, 7 * 32, 4);
  dit_tensor x = dit_tensor_4d(DIT_F32, xs, 16, 1, 8, 8), cap = dit_tensor_2d(DIT_F32, caps, 7, 32);
  dit_tensor out = dit_tensor_4d(DIT_F32, o, 16, 1, 8, 8);
  float t = 0.3f;
  int rc = dit_zimage_forward(m, 1, &x, &cap, &t, &out, err) == DIT_OK ? 0 : -1;
  /* wrong device tag: rejected before any work */
  dit_tensor xd = x;
  xd.device = DIT_DEV_CUDA;
  if (rc == 0 && dit_zimage_forward(m, 1, &xd, &cap, &t, &out, err) != DIT_ERR_INVALID_ARG) rc = -2;
  /* BF16 activations are for GPU backends */
  if (rc == 0 && dit_zimage_set_act_dtype(m, DIT_BF16, err) != DIT_ERR_UNSUPPORTED) rc = -3;
  dit_zimage_free(m);
  return rc;
}

static void test_random_and_profiler(const dt_args *args) {
  dit_error err = {0};
  dit_backend *cpu = NULL, *prof = NULL;
  CHECK(dit_backend_cpu_create(0, &cpu, &err) == DIT_OK);
  CHECK(dit_backend_profiler_create(cpu, &prof, &err) == DIT_OK);
  if (!prof) return;
  static float a[1024], b[1024], c[1024], d[1024];
  CHECK_MSG(forward(cpu, 7, a, &err) == 0, "%s", err.msg);
  CHECK_MSG(forward(cpu, 7, b, &err) == 0, "%s", err.msg);
  CHECK_MSG(!memcmp(a, b, sizeof a), "same seed, different outputs");
  dit_backend_profiler_enable(prof, true);
  CHECK_MSG(forward(prof, 7, c, &err) == 0, "%s", err.msg);
  CHECK_MSG(!memcmp(a, c, sizeof a), "the profiler changed the output");
  CHECK(dit_backend_profiler_stats(prof)->calls[0] > 0);              /* linear */
  CHECK(dit_backend_profiler_stats(prof)->live_bytes == 0);           /* everything freed */
  CHECK(dit_backend_profiler_stats(prof)->peak_bytes > 0);
  CHECK_MSG(forward(cpu, 8, d, &err) == 0, "%s", err.msg);
  CHECK_MSG(memcmp(a, d, sizeof a) != 0, "another seed, same output");
  double mx = 0;
  for (int i = 0; i < 1024; i++) mx = fmax(mx, fabs(a[i]));
  CHECK_MSG(isfinite(mx) && mx > 1e-3 && mx < 1e3, "output magnitude %g", mx);
  dit_backend_profiler_free(prof);
  dit_backend_free(cpu);
}

/* End to end (ditrun bench --e2e): tiny geometry on the CPU: every phase ran, the image is
 * finite, the step time is the steps' share, bad arguments are refused. */
static void test_e2e(const dt_args *args) {
  dit_ctx *ctx = NULL;
  CHECK(dit_ctx_create(NULL, &ctx) == DIT_OK);
  dit_bench_params p;
  tiny_params(&p);
  p.iters = 1, p.warmup = 0;
  dit_bench_e2e_result r;
  dit_status s = dit_bench_e2e_run(ctx, &p, 3, &r);
  CHECK_MSG(s == DIT_OK, "%s", dit_ctx_last_error(ctx));
  if (s == DIT_OK) {
    CHECK(r.steps == 3 && r.res == 64 && r.text_len == 20 && r.iters == 1 && r.output_finite);
    CHECK(r.encode_ms > 0 && r.steps_ms > 0 && r.decode_ms > 0);
    CHECK(fabs(r.step_ms * 3 - r.steps_ms) < 1e-9 * r.steps_ms);
    CHECK(r.total_ms >= r.encode_ms + r.steps_ms + r.decode_ms - 1e-6);
    CHECK(r.graph_launches == 0); /* no capture on the CPU */
  }
  CHECK(dit_bench_e2e_run(ctx, &p, 0, &r) == DIT_ERR_INVALID_ARG);
  p.arch = "flux2-klein-4b";
  CHECK(dit_bench_e2e_run(ctx, &p, 2, &r) == DIT_ERR_UNSUPPORTED);
  dit_ctx_free(ctx);
}

/* The VAE decode bench (ditrun bench --vae) on the CPU at 32x32: timed and profiled, and
 * the profile's shapes account for the whole FLOP count: the conv and linear shapes as
 * GEMMs plus the one attention (4 S^2 C over S = 16 latent pixels of 512 channels). */
static void test_vae(const dt_args *args) {
  (void)args;
  dit_ctx *ctx = NULL;
  CHECK(dit_ctx_create(NULL, &ctx) == DIT_OK);
  dit_bench_params p;
  dit_bench_params_default(&p);
  p.res = 32, p.iters = 1, p.warmup = 0;
  dit_bench_result r;
  dit_status s = dit_bench_vae_run(ctx, &p, &r);
  CHECK_MSG(s == DIT_OK, "%s", dit_ctx_last_error(ctx));
  if (s == DIT_OK) {
    CHECK(!strcmp(r.arch, "vae-flux") && r.res == 32 && r.text_len == 0 && r.iters == 1 && r.output_finite);
    CHECK(r.ms_median > 0 && r.flops > 0 && r.profiled && r.n_ops > 0);
    double fl = 4.0 * 16 * 16 * 512, conv_ms = 0;
    int convs = 0;
    for (int i = 0; i < r.n_gemm_shapes; i++) {
      fl += 2.0 * (double)r.gemm_shapes[i].m * (double)r.gemm_shapes[i].n * (double)r.gemm_shapes[i].k *
            (double)r.gemm_shapes[i].calls;
      if (r.gemm_shapes[i].conv) convs += (int)r.gemm_shapes[i].calls, conv_ms += r.gemm_shapes[i].ms;
    }
    CHECK_MSG(fabs(fl - r.flops) <= 1e-9 * r.flops, "shapes %.6g FLOP, model %.6g", fl, r.flops);
    long op_convs = 0;
    double op_conv_ms = 0;
    for (int i = 0; i < r.n_ops; i++)
      if (!strcmp(r.op_name[i], "conv2d")) op_convs = r.op_calls[i], op_conv_ms = r.op_ms[i];
    /* the Flux decoder: conv_in, 2 x 2 mid, 4 levels x 3 resnets x 2, 2 shortcuts, 3
     * upsamplers, conv_out */
    CHECK_MSG(convs == 35 && op_convs == 35, "conv calls %d by shape, %ld by op", convs, op_convs);
    CHECK(fabs(conv_ms - op_conv_ms) <= 1e-6 * op_conv_ms + 1e-9);
  }
  p.dtype = DIT_Q8_0;
  CHECK(dit_bench_vae_run(ctx, &p, &r) == DIT_ERR_UNSUPPORTED);
  dit_ctx_free(ctx);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_random_and_profiler, test_api, test_flux_api, test_krea2_api,
                                                   test_ltx2_api, test_h3_api,
                                                   test_e2e, test_vae, test_cli};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
