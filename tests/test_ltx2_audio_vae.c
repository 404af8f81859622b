/* The LTX-2 audio VAE decoder against diffusers (fixtures models/ltx2-tiny and ltx23-tiny:
 * causal along time, pixel norm, three levels): audio_vae.decode of the reference latents
 * (audio_vae_decode.0.arg0) within relative error 1e-4 of audio_vae_decode.0.out0 (float32
 * against float32), a batch of two, and the pipeline's denormalization + unpack of its final
 * packed latents (step_audio.2.out0) giving those latents. Then configs that change only the
 * output's mel bins (a crop, a zero pad, null: the latents' own bins) against the reference
 * cut or padded alike; two synthetic checkpoints (random weights written to --tmp: four levels
 * of three resnets whose frames are cropped, two levels of one whose frames are zero-padded)
 * against a direct-loop decoder written from diffusers' modules; inputs the decoder refuses
 * and configs it cannot run. With DIT_TEST_DEVICE=cuda the same on the GPU, in normalized MSE:
 * its convolutions round their inputs to bf16, and this decoder is more sensitive to that than
 * the video VAE (the CPU's bf16 path, measured: max relative error 2.8e-2 here against 7.4e-3
 * there), so the fixtures' bound is 5e-4 (measured on an H100: 1.15e-4 and 7.8e-5; the video
 * VAE's 1.5e-5 and 2.5e-5 under its 1e-4); the direct-loop checks keep 1e-4. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture.h"
#include "io/safetensors.h"
#include "models/vae_ltx2_audio.h"
#include "testing.h"

#define TOL 1e-4
#define REF_TOL (g_gpu ? 5e-4 : TOL) /* against diffusers' float32 (see above) */

static dit_backend *g_be;
static bool g_gpu;

static dit_tensor dev4(void *p, int64_t a, int64_t b, int64_t c, int64_t d) {
  dit_tensor t = dit_tensor_make(DIT_F32, p, 4, (int64_t[]){a, b, c, d});
  t.device = dit_backend_device(g_be);
  return t;
}

static size_t numel4(const int64_t *s) { return (size_t)(s[0] * s[1] * s[2] * s[3]); }

static void free_dev(void *p) {
  if (p) g_be->ops->free(g_be, p);
}

/* A fixture's reference: the decoder's input z and output y with their shapes. */
typedef struct ref {
  char file[1200], vdir[1200];
  float *z, *y;
  int64_t zs[8], ys[8];
} ref;

static int ref_load(const dt_args *a, const char *name, ref *r) {
  char dir[1024], sub[128];
  memset(r, 0, sizeof *r);
  snprintf(sub, sizeof sub, "models/%s", name);
  dt_path(dir, sizeof dir, a->data, sub);
  json_t *rj = dt_load_reference(dir, NULL, 0);
  if (!rj) return 1;
  json_decref(rj);
  dt_path(r->file, sizeof r->file, dir, "reference.safetensors");
  dt_path(r->vdir, sizeof r->vdir, dir, "audio_vae");
  int zn = 0, yn = 0;
  if (dt_load_f32(r->file, "audio_vae_decode.0.arg0", &r->z, r->zs, &zn) ||
      dt_load_f32(r->file, "audio_vae_decode.0.out0", &r->y, r->ys, &yn)) {
    CHECK_MSG(0, "%s: no audio_vae_decode tensors", name);
    return 1;
  }
  CHECK(zn == 4 && yn == 4);
  return zn == 4 && yn == 4 ? 0 : 1;
}

static void ref_free(ref *r) { free(r->z), free(r->y); }

/* Decodes host latents z [zs] on the backend; the result (host, malloc'd) of shape ys, or NULL. */
static float *decode_host(dit_vae_ltx2_audio *m, const float *z, const int64_t *zs, const int64_t *ys,
                          const char *label) {
  void *dz = dt_to_device(g_be, z, numel4(zs)), *dy = NULL;
  dit_error e = {0};
  CHECK(dz && g_be->ops->alloc(g_be, numel4(ys) * sizeof(float), &dy, &e) == DIT_OK);
  float *got = NULL;
  if (dz && dy) {
    dit_tensor tz = dev4(dz, zs[0], zs[1], zs[2], zs[3]), ty = dev4(dy, ys[0], ys[1], ys[2], ys[3]);
    const dit_status s = dit_vae_ltx2_audio_decode(m, &tz, &ty, &e);
    CHECK_MSG(s == DIT_OK, "%s: %s", label, e.msg);
    if (s == DIT_OK) got = dt_to_host(g_be, dy, numel4(ys));
  }
  free_dev(dz), free_dev(dy);
  return got;
}

/* ---- the fixtures ---- */

/* step_audio.2.out0 [1, L, C*M] unpacked to [1, C, L, M] and denormalized on the backend,
 * against the decoder's input; also the same on the host from the config's statistics. */
static void check_denormalize(dit_vae_ltx2_audio *m, const ref *r) {
  float *packed = NULL;
  int64_t ps[8];
  int pn = 0;
  if (dt_load_f32(r->file, "step_audio.2.out0", &packed, ps, &pn)) {
    CHECK_MSG(0, "no step_audio.2.out0");
    return;
  }
  const dit_vae_ltx2_audio_config *c = dit_vae_ltx2_audio_get_config(m);
  const int64_t C = r->zs[1], L = r->zs[2], M = r->zs[3], n = C * L * M;
  CHECK(pn == 3 && ps[0] == 1 && ps[1] == L && ps[2] == C * M && C * M == c->base_channels);
  if (pn != 3 || ps[1] != L || ps[2] != C * M) {
    free(packed);
    return;
  }
  float *u = malloc((size_t)n * sizeof *u), *hd = malloc((size_t)n * sizeof *hd);
  for (int64_t ch = 0; ch < C; ch++) /* [B, L, C*M] --> [B, C, L, M] */
    for (int64_t l = 0; l < L; l++)
      for (int64_t k = 0; k < M; k++) {
        const int64_t f = ch * M + k;
        const float v = packed[l * C * M + f];
        u[(ch * L + l) * M + k] = v;
        hd[(ch * L + l) * M + k] = v * c->latents_std[f] + c->latents_mean[f];
      }
  const double eh = dt_rel_err(hd, r->z, (size_t)n);
  CHECK_MSG(eh <= 1e-6, "host denormalize: %.3g", eh);
  void *d = dt_to_device(g_be, u, (size_t)n);
  dit_tensor t = dev4(d, 1, C, L, M);
  dit_error e = {0};
  CHECK_MSG(d && dit_vae_ltx2_audio_denormalize(m, &t, &e) == DIT_OK, "denormalize: %s", e.msg);
  float *got = d ? dt_to_host(g_be, d, (size_t)n) : NULL;
  if (got) {
    const double er = dt_rel_err(got, r->z, (size_t)n);
    CHECK_MSG(er <= 1e-6, "denormalize: %.3g", er);
    printf("  unpack(denormalize(step_audio.2.out0)) against the decoder's input: %.3g (host from the config's "
           "statistics: %.3g)\n", er, eh);
  }
  /* M = 3 bins make C * 3 packed features, not the statistics' length */
  dit_tensor bad = dev4(d, 1, C, 1, 3);
  CHECK(dit_vae_ltx2_audio_denormalize(m, &bad, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "statistics"));
  printf("  denormalize of 3 mel bins: %s\n", e.msg);
  free_dev(d);
  free(packed), free(u), free(hd), free(got);
}

/* Inputs the decoder refuses: NULLs, a wrong channel count, a wrong output shape, dtype, rank. */
static void check_refusals(dit_vae_ltx2_audio *m, const ref *r) {
  const int64_t *zs = r->zs, *ys = r->ys;
  void *dz = dt_to_device(g_be, r->z, numel4(zs)), *dy = dt_to_device(g_be, r->y, numel4(ys));
  dit_error e = {0};
  dit_tensor z = dev4(dz, zs[0], zs[1], zs[2], zs[3]), y = dev4(dy, ys[0], ys[1], ys[2], ys[3]);
  CHECK(dit_vae_ltx2_audio_decode(m, NULL, &y, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "NULL"));
  CHECK(dit_vae_ltx2_audio_decode(m, &z, NULL, &e) == DIT_ERR_INVALID_ARG);
  CHECK(dit_vae_ltx2_audio_decode(NULL, &z, &y, &e) == DIT_ERR_INVALID_ARG);
  CHECK(dit_vae_ltx2_audio_denormalize(m, NULL, &e) == DIT_ERR_INVALID_ARG);
  CHECK(dit_vae_ltx2_audio_denormalize(NULL, &z, &e) == DIT_ERR_INVALID_ARG);
  dit_tensor bad = dev4(dz, zs[0], zs[1] - 1, zs[2], zs[3]);
  CHECK(dit_vae_ltx2_audio_decode(m, &bad, &y, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "channels"));
  printf("  %lld latent channels: %s\n", (long long)bad.shape[1], e.msg);
  CHECK(dit_vae_ltx2_audio_denormalize(m, &bad, &e) == DIT_ERR_INVALID_ARG);
  bad = dev4(dy, ys[0], ys[1], ys[2] - 1, ys[3]); /* one frame short */
  CHECK(dit_vae_ltx2_audio_decode(m, &z, &bad, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "expected"));
  printf("  one frame short: %s\n", e.msg);
  bad = dev4(dy, ys[0], ys[1], ys[2], ys[3] - 1);
  CHECK(dit_vae_ltx2_audio_decode(m, &z, &bad, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "expected"));
  bad = dev4(dy, ys[0], ys[1] - 1, ys[2], ys[3]);
  CHECK(dit_vae_ltx2_audio_decode(m, &z, &bad, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "channels"));
  bad = z;
  bad.dtype = DIT_BF16;
  CHECK(dit_vae_ltx2_audio_decode(m, &bad, &y, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "F32"));
  bad = dit_tensor_3d(DIT_F32, dz, zs[1], zs[2], zs[3]);
  bad.device = z.device;
  CHECK(dit_vae_ltx2_audio_decode(m, &bad, &y, &e) == DIT_ERR_INVALID_ARG);
  bad = z;
  bad.data = NULL;
  CHECK(dit_vae_ltx2_audio_decode(m, &bad, &y, &e) == DIT_ERR_INVALID_ARG);
  /* the reference output buffer is untouched by the refused calls */
  float *after = dy ? dt_to_host(g_be, dy, numel4(ys)) : NULL;
  CHECK(after && !memcmp(after, r->y, numel4(ys) * sizeof(float)));
  free(after);
  free_dev(dz), free_dev(dy);
}

static void check_fixture(const dt_args *a, const char *name) {
  ref r;
  if (ref_load(a, name, &r)) {
    ref_free(&r);
    return;
  }
  dit_vae_ltx2_audio *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_vae_ltx2_audio_load(g_be, r.vdir, &m, &e) == DIT_OK, "%s: %s", name, e.msg);
  if (!m) {
    ref_free(&r);
    return;
  }
  const dit_vae_ltx2_audio_config *c = dit_vae_ltx2_audio_get_config(m);
  CHECK(c->latent_channels == 2 && c->output_channels == 2 && c->base_channels == 4 && c->n_levels == 3);
  CHECK(c->ch_mult[0] == 1 && c->ch_mult[1] == 2 && c->ch_mult[2] == 4 && c->num_res_blocks == 1);
  CHECK(c->mel_bins == 8 && c->sample_rate == 16000 && c->mel_hop_length == 160 && c->is_causal);
  CHECK(c->temporal_ratio == 4 && c->mel_ratio == 4 && c->has_latents_stats);
  CHECK(c->latents_std[0] >= 1.0f && c->latents_std[0] <= 1.5f && c->latents_mean[0] != 0.0f);
  int T, Mo;
  dit_vae_ltx2_audio_output_size(m, (int)r.zs[2], (int)r.zs[3], &T, &Mo);
  CHECK(r.ys[0] == r.zs[0] && r.ys[1] == c->output_channels && r.ys[2] == T && r.ys[3] == Mo);
  CHECK(T == 4 * (int)r.zs[2] - 3 && Mo == c->mel_bins);
  printf("%s (%s): latents [%lld,%lld,%lld,%lld] -> mel [%lld,%lld,%d,%d]\n", name,
         g_gpu ? "cuda, nmse" : "cpu, rel err",
         (long long)r.zs[0], (long long)r.zs[1], (long long)r.zs[2], (long long)r.zs[3], (long long)r.ys[0],
         (long long)r.ys[1], T, Mo);
  for (int rep = 0; rep < 2; rep++) { /* the second decode reuses the activation buffers */
    float *got = decode_host(m, r.z, r.zs, r.ys, name);
    if (got) {
      const double er = dt_error_of(g_gpu, got, r.y, numel4(r.ys));
      CHECK_MSG(er <= REF_TOL, "%s decode %d: %.3g", name, rep, er);
      printf("  decode %d: %.3g\n", rep, er);
    }
    free(got);
  }
  /* a batch of two: the latents and their negation, each against its own single decode */
  const size_t nz = numel4(r.zs), ny = numel4(r.ys);
  float *z2 = malloc(2 * nz * sizeof *z2);
  for (size_t i = 0; i < nz; i++) z2[i] = r.z[i], z2[nz + i] = -r.z[i];
  int64_t zs2[4] = {2, r.zs[1], r.zs[2], r.zs[3]}, ys2[4] = {2, r.ys[1], r.ys[2], r.ys[3]};
  float *both = decode_host(m, z2, zs2, ys2, "batch of two"), *neg = decode_host(m, z2 + nz, r.zs, r.ys, "negated");
  if (both && neg) {
    const double e0 = dt_error_of(g_gpu, both, r.y, ny), e1 = dt_rel_err(both + ny, neg, ny);
    CHECK_MSG(e0 <= REF_TOL && e1 <= 1e-6, "batch: %.3g %.3g", e0, e1);
    CHECK(dt_rel_err(neg, r.y, ny) > 1e-2); /* the second item is not the first again */
    printf("  batch of two: item 0 %.3g against the reference, item 1 %.3g against its own decode\n", e0, e1);
  }
  free(z2), free(both), free(neg);
  check_denormalize(m, &r);
  check_refusals(m, &r);
  dit_vae_ltx2_audio_free(m);
  ref_free(&r);
}

static void test_ltx20(const dt_args *a) { check_fixture(a, "ltx2-tiny"); }
static void test_ltx23(const dt_args *a) { check_fixture(a, "ltx23-tiny"); }

/* The cost's FLOPs against the decoder's convolutions written out for ltx2-tiny's audio VAE (base 4, ch_mult
 * [1, 2, 4], one resnet a level plus one, latent and output channels 2, 3x3 causal convolutions, 1x1 shortcuts):
 * 2 x output pixels x input channels x kernel area for each, the nearest upsampling doubling mel bins and giving
 * 2 H - 1 rows. */
static void test_cost(const dt_args *a) {
  char dir[1200];
  dt_path(dir, sizeof dir, a->data, "models/ltx2-tiny/audio_vae");
  dit_vae_ltx2_audio *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_vae_ltx2_audio_load(g_be, dir, &m, &e) == DIT_OK, "%s", e.msg);
  const int L = 7, M = 2;
  dit_cost c = {0};
  CHECK_MSG(m && dit_vae_ltx2_audio_cost(m, L, M, &c, &e) == DIT_OK, "%s", e.msg);
  double want = 2.0 * L * M * 16 * 2 * 9;                 /* conv_in: 2 -> 16 */
  want += 2 * (2 * 2.0 * L * M * 16 * 16 * 9);            /* mid: two resnets of 16 */
  double H = L, W = M, ch = 16;
  const int outs[3] = {16, 8, 4};                          /* levels 2, 1, 0 */
  for (int l = 0; l < 3; l++) {
    const double co = outs[l];
    for (int i = 0; i < 2; i++) {
      const double ci = i ? co : ch;
      want += 2.0 * H * W * co * ci * 9 + 2.0 * H * W * co * co * 9; /* conv1, conv2 */
      if (ci != co) want += 2.0 * H * W * co * ci;                   /* nin_shortcut */
    }
    ch = co;
    if (l < 2) H = 2 * H - 1, W = 2 * W, want += 2.0 * H * W * co * co * 9; /* upsample's conv */
  }
  want += 2.0 * H * W * 2 * 4 * 9; /* conv_out: 4 -> 2 */
  printf("audio VAE cost at %d x %d latents: %.6g FLOP (written out: %.6g), %zu activation bytes\n", L, M, c.flops,
         want, c.act_bytes);
  CHECK_MSG(c.flops == want && c.act_bytes > 0, "%.9g FLOP, %.9g written out", c.flops, want);
  dit_vae_ltx2_audio_free(m);
}

/* ---- configs written to --tmp ---- */

/* dir/config.json: the ltx2-tiny audio VAE config with `field` set to the JSON `value`, beside a
 * link to its weights. 0 on success. */
static int write_config(const dt_args *a, const char *dir, const char *field, const char *value) {
  char src[1200], path[1300], cmd[4000], vdir[1200];
  dt_path(vdir, sizeof vdir, a->data, "models/ltx2-tiny/audio_vae");
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && ln -sf '%s/diffusion_pytorch_model.safetensors' '%s/'", dir, vdir, dir);
  CHECK(dt_run(cmd, NULL) == 0);
  dt_path(src, sizeof src, vdir, "config.json");
  json_error_t je;
  json_t *j = json_load_file(src, 0, &je), *v = json_loads(value, JSON_DECODE_ANY, &je);
  CHECK(j && v);
  if (!j || !v) {
    json_decref(j), json_decref(v);
    return 1;
  }
  json_object_set_new(j, field, v);
  snprintf(path, sizeof path, "%s/config.json", dir);
  const int rc = json_dump_file(j, path, JSON_INDENT(1));
  CHECK(rc == 0);
  json_decref(j);
  return rc;
}

/* mel_bins 6 (a crop), 10 (zero columns after the 8 decoded) and null (the latents' own 2):
 * the same decode, cut or padded. */
static void test_mel_bins(const dt_args *a) {
  ref r;
  if (ref_load(a, "ltx2-tiny", &r)) {
    ref_free(&r);
    return;
  }
  static const struct {
    const char *value;
    int mo;
  } cases[] = {{"6", 6}, {"10", 10}, {"null", 2}};
  char dir[1200];
  dt_path(dir, sizeof dir, a->tmp, "audio_vae_mel");
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    if (write_config(a, dir, "mel_bins", cases[k].value)) continue;
    dit_vae_ltx2_audio *m = NULL;
    dit_error e = {0};
    CHECK_MSG(dit_vae_ltx2_audio_load(g_be, dir, &m, &e) == DIT_OK, "mel_bins %s: %s", cases[k].value, e.msg);
    if (!m) continue;
    int T, Mo;
    dit_vae_ltx2_audio_output_size(m, (int)r.zs[2], (int)r.zs[3], &T, &Mo);
    CHECK(T == r.ys[2] && Mo == cases[k].mo);
    const int64_t W = r.ys[3], ys[4] = {r.ys[0], r.ys[1], T, Mo};
    float *want = calloc(numel4(ys), sizeof *want);
    for (int64_t i = 0; i < ys[0] * ys[1] * T; i++)
      for (int64_t j = 0; j < Mo && j < W; j++) want[i * Mo + j] = r.y[i * W + j];
    float *got = decode_host(m, r.z, r.zs, ys, cases[k].value);
    if (got) {
      const double er = dt_error_of(g_gpu, got, want, numel4(ys));
      bool zeros = true;
      for (int64_t i = 0; i < ys[0] * ys[1] * T; i++)
        for (int64_t j = W; j < Mo; j++) zeros = zeros && got[i * Mo + j] == 0.0f;
      CHECK_MSG(er <= REF_TOL && zeros, "mel_bins %s: %.3g", cases[k].value, er);
      printf("mel_bins %s: mel [%lld,%lld,%d,%d], %.3g against the reference %s\n", cases[k].value,
             (long long)ys[0], (long long)ys[1], T, Mo, er, Mo < W ? "cropped" : Mo > W ? "zero-padded" : "");
    }
    free(got), free(want);
    dit_vae_ltx2_audio_free(m);
  }
  ref_free(&r);
}

/* ---- other configs against direct loops ---- */

/* A conv of the synthetic checkpoint: w [co, ci, k, k], b [co] (random), its stored name. */
typedef struct hconv {
  int co, ci, k;
  float *w, *b;
  char name[96];
} hconv;

typedef struct hmodel {
  hconv cv[160];
  int n, next; /* convs in forward order; the forward's cursor */
} hmodel;

static void h_add(hmodel *h, int co, int ci, int k, const char *name) {
  hconv *c = &h->cv[h->n];
  c->co = co, c->ci = ci, c->k = k;
  snprintf(c->name, sizeof c->name, "%s", name);
  const size_t nw = (size_t)co * ci * k * k;
  c->w = malloc(nw * sizeof *c->w), c->b = malloc((size_t)co * sizeof *c->b);
  dt_fill_random(c->w, nw, 100 + (uint64_t)h->n);
  dt_fill_random(c->b, (size_t)co, 500 + (uint64_t)h->n);
  const float amp = 1.0f / sqrtf((float)(ci * k * k));
  for (size_t i = 0; i < nw; i++) c->w[i] *= amp;
  for (int i = 0; i < co; i++) c->b[i] *= 0.1f;
  h->n++;
}

static void h_add_resnet(hmodel *h, int cin, int cout, const char *base) {
  char n[96];
  snprintf(n, sizeof n, "%s.conv1.conv", base), h_add(h, cout, cin, 3, n);
  snprintf(n, sizeof n, "%s.conv2.conv", base), h_add(h, cout, cout, 3, n);
  if (cin != cout) snprintf(n, sizeof n, "%s.nin_shortcut.conv", base), h_add(h, cout, cin, 1, n);
}

/* The decoder's convs in forward order (diffusers' module names). */
static void h_build(hmodel *h, int lat, int out, int base, const int *mult, int nl, int nrb) {
  char n[96];
  int cur = base * mult[nl - 1];
  h_add(h, cur, lat, 3, "decoder.conv_in.conv");
  h_add_resnet(h, cur, cur, "decoder.mid.block_1");
  h_add_resnet(h, cur, cur, "decoder.mid.block_2");
  for (int l = nl - 1; l >= 0; l--) {
    for (int i = 0; i <= nrb; i++, cur = base * mult[l]) {
      snprintf(n, sizeof n, "decoder.up.%d.block.%d", l, i);
      h_add_resnet(h, cur, base * mult[l], n);
    }
    if (l) snprintf(n, sizeof n, "decoder.up.%d.upsample.conv.conv", l), h_add(h, cur, cur, 3, n);
  }
  h_add(h, out, cur, 3, "decoder.conv_out.conv");
}

/* F.pad(x, (k/2 left, rest right, k - 1 top, 0 bottom)) then a conv: x [ci, H, W] -> [co, H, W]. */
static float *h_conv(hmodel *h, const float *x, int H, int W) {
  const hconv *c = &h->cv[h->next++];
  const int k = c->k, pt = k - 1, pl = (k - 1) / 2;
  float *y = malloc((size_t)c->co * H * W * sizeof *y);
  for (int o = 0; o < c->co; o++)
    for (int i = 0; i < H; i++)
      for (int j = 0; j < W; j++) {
        double s = c->b[o];
        for (int ci = 0; ci < c->ci; ci++)
          for (int a = 0; a < k; a++)
            for (int b = 0; b < k; b++) {
              const int r = i + a - pt, q = j + b - pl;
              if (r >= 0 && q >= 0 && q < W)
                s += (double)c->w[((o * c->ci + ci) * k + a) * k + b] * x[(ci * H + r) * W + q];
            }
        y[(o * H + i) * W + j] = (float)s;
      }
  return y;
}

/* PixelNorm (eps 1e-6) then SiLU over the C channels of each of n positions. */
static float *h_norm_silu(const float *x, int C, int n) {
  float *y = malloc((size_t)C * n * sizeof *y);
  for (int p = 0; p < n; p++) {
    double ss = 0;
    for (int c = 0; c < C; c++) ss += (double)x[c * n + p] * x[c * n + p];
    const double rms = sqrt(ss / C + 1e-6);
    for (int c = 0; c < C; c++) {
      const double v = x[c * n + p] / rms;
      y[c * n + p] = (float)(v / (1.0 + exp(-v)));
    }
  }
  return y;
}

static float *h_resnet(hmodel *h, float *x, int *C, int H, int W) {
  const int cin = *C, cout = h->cv[h->next].co, n = H * W;
  float *t = h_norm_silu(x, cin, n), *a = h_conv(h, t, H, W);
  free(t);
  t = h_norm_silu(a, cout, n);
  free(a);
  float *b = h_conv(h, t, H, W), *sc = cin != cout ? h_conv(h, x, H, W) : x;
  for (int i = 0; i < cout * n; i++) b[i] += sc[i];
  free(t), free(x);
  if (sc != x) free(sc);
  *C = cout;
  return b;
}

/* The decode of x [C, L, M] as diffusers writes it, into [out, T, Mo] (T, Mo: the targets). */
static float *h_decode(hmodel *h, const float *z, int C, int L, int M, int nl, int nrb, int T, int Mo) {
  int H = L, W = M;
  h->next = 0;
  float *x = h_conv(h, z, H, W);
  C = h->cv[0].co;
  for (int k = 0; k < 2; k++) x = h_resnet(h, x, &C, H, W);
  for (int l = nl - 1; l >= 0; l--) {
    for (int i = 0; i <= nrb; i++) x = h_resnet(h, x, &C, H, W);
    if (!l) continue;
    float *u = malloc((size_t)C * 4 * H * W * sizeof *u); /* interpolate(scale 2, nearest), conv, x[:, :, 1:] */
    for (int c = 0; c < C; c++)
      for (int i = 0; i < 2 * H; i++)
        for (int j = 0; j < 2 * W; j++) u[(c * 2 * H + i) * 2 * W + j] = x[(c * H + i / 2) * W + j / 2];
    float *y = h_conv(h, u, 2 * H, 2 * W);
    free(x), free(u);
    x = malloc((size_t)C * (2 * H - 1) * 2 * W * sizeof *x);
    const size_t rows = (size_t)(2 * H - 1) * 2 * W;
    for (int c = 0; c < C; c++) memcpy(x + c * rows, y + (c * 2 * H + 1) * 2 * W, rows * sizeof *x);
    free(y);
    H = 2 * H - 1, W *= 2;
  }
  const int oc = h->cv[h->n - 1].co;
  float *t = h_norm_silu(x, C, H * W), *y = h_conv(h, t, H, W), *o = calloc((size_t)oc * T * Mo, sizeof *o);
  for (int c = 0; c < oc; c++)
    for (int i = 0; i < T && i < H; i++)
      for (int j = 0; j < Mo && j < W; j++) o[(c * T + i) * Mo + j] = y[(c * H + i) * W + j];
  free(x), free(t), free(y);
  return o;
}

static dit_status h_fill(void *user, size_t i, void *dst, size_t nbytes, dit_error *err) {
  (void)err;
  const hconv *c = &((const hmodel *)user)->cv[i / 2];
  memcpy(dst, i % 2 ? c->b : c->w, nbytes);
  return DIT_OK;
}

/* One synthetic config: dir/config.json and its random checkpoint (no latent statistics), a
 * decode of random latents [1, lat, L, M] for each L of Ls against h_decode. */
typedef struct synth {
  const char *name;
  int lat, out, base, mult[4], nl, nrb, mel_bins, M, Ls[2];
} synth;

static void check_synth(const dt_args *a, const synth *s) {
  char dir[1200], path[1300], cmd[1400];
  dt_path(dir, sizeof dir, a->tmp, s->name);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  CHECK(dt_run(cmd, NULL) == 0);
  hmodel *h = calloc(1, sizeof *h);
  h_build(h, s->lat, s->out, s->base, s->mult, s->nl, s->nrb);
  dit_out_tensor o[320];
  for (int i = 0; i < h->n; i++) {
    const hconv *c = &h->cv[i];
    char *wn = malloc(112), *bn = malloc(112);
    snprintf(wn, 112, "%s.weight", c->name), snprintf(bn, 112, "%s.bias", c->name);
    o[2 * i] = (dit_out_tensor){wn, DIT_F32, 4, {c->co, c->ci, c->k, c->k}};
    o[2 * i + 1] = (dit_out_tensor){bn, DIT_F32, 1, {c->co}};
  }
  snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
  dit_error e = {0};
  CHECK_MSG(dit_st_write(path, true, NULL, 0, o, (size_t)(2 * h->n), h_fill, h, &e) == DIT_OK, "%s", e.msg);
  json_t *j = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:i}", "_class_name", "AutoencoderKLLTX2Audio",
                        "latent_channels", s->lat, "output_channels", s->out, "base_channels", s->base,
                        "num_res_blocks", s->nrb, "mel_bins", s->mel_bins, "norm_type", "pixel", "causality_axis",
                        "height", "resolution", 64);
  json_t *mult = json_array();
  for (int i = 0; i < s->nl; i++) json_array_append_new(mult, json_integer(s->mult[i]));
  json_object_set_new(j, "ch_mult", mult);
  snprintf(path, sizeof path, "%s/config.json", dir);
  CHECK(json_dump_file(j, path, 0) == 0);
  json_decref(j);
  dit_vae_ltx2_audio *m = NULL;
  CHECK_MSG(dit_vae_ltx2_audio_load(g_be, dir, &m, &e) == DIT_OK, "%s: %s", s->name, e.msg);
  const dit_vae_ltx2_audio_config *c = dit_vae_ltx2_audio_get_config(m);
  CHECK(m && !c->has_latents_stats && c->latents_std[0] == 1.0f && c->latents_mean[0] == 0.0f);
  for (int k = 0; m && k < 2; k++) {
    const int L = s->Ls[k];
    int T, Mo;
    dit_vae_ltx2_audio_output_size(m, L, s->M, &T, &Mo);
    CHECK(T == (4 * L - 3 > 1 ? 4 * L - 3 : 1) && Mo == s->mel_bins);
    const int64_t zs[4] = {1, s->lat, L, s->M}, ys[4] = {1, s->out, T, Mo};
    float *z = malloc(numel4(zs) * sizeof *z);
    dt_fill_random(z, numel4(zs), 77 + (uint64_t)L);
    float *want = h_decode(h, z, s->lat, L, s->M, s->nl, s->nrb, T, Mo), *got = decode_host(m, z, zs, ys, s->name);
    if (got) {
      const int H = ((L - 1) << (s->nl - 1)) + 1, W = s->M << (s->nl - 1);
      const double er = dt_error_of(g_gpu, got, want, numel4(ys));
      CHECK_MSG(er <= TOL, "%s L %d: %.3g", s->name, L, er);
      printf("%s (%d levels of %d resnets): latents [1,%d,%d,%d] decode [1,%d,%d,%d] %s to [1,%d,%d,%d]: "
             "%.3g against direct loops\n", s->name, s->nl, s->nrb + 1, s->lat, L, s->M, s->out, H, W,
             H > T || W > Mo ? "cropped" : "padded", s->out, T, Mo, er);
    }
    free(z), free(want), free(got);
  }
  dit_vae_ltx2_audio_free(m);
  for (int i = 0; i < h->n; i++)
    free(h->cv[i].w), free(h->cv[i].b), free((void *)o[2 * i].name), free((void *)o[2 * i + 1].name);
  free(h);
}

/* Four levels of two resnets (frames 8 L - 7 cropped to 4 L - 3, bins 8 M cropped to mel_bins)
 * and two levels of one (frames 2 L - 1 padded with zero rows, bins 2 M with zero columns). */
static void test_synthetic(const dt_args *a) {
  static const synth cases[] = {
      {"synth_deep", 3, 1, 2, {1, 2, 2, 3}, 4, 2, 20, 3, {3, 1}},
      {"synth_shallow", 2, 2, 3, {2, 1}, 2, 0, 9, 4, {4, 1}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_synth(a, &cases[i]);
}

static void test_refused_configs(const dt_args *a) {
  static const struct {
    const char *field, *value;
    dit_status st;
  } cases[] = {
      {"norm_type", "\"group\"", DIT_ERR_UNSUPPORTED},
      {"causality_axis", "\"width\"", DIT_ERR_UNSUPPORTED},
      {"causality_axis", "\"none\"", DIT_ERR_UNSUPPORTED},
      {"causality_axis", "null", DIT_ERR_UNSUPPORTED},
      {"mid_block_add_attention", "true", DIT_ERR_UNSUPPORTED},
      {"attn_resolutions", "[16]", DIT_ERR_UNSUPPORTED}, /* resolution 32: levels at 8, 16, 32 */
      {"_class_name", "\"AutoencoderKLLTX2Video\"", DIT_ERR_FORMAT},
      {"ch_mult", "[]", DIT_ERR_FORMAT},
      {"latent_channels", "0", DIT_ERR_FORMAT},
      {"mel_bins", "\"64\"", DIT_ERR_FORMAT},
  };
  char dir[1200];
  dt_path(dir, sizeof dir, a->tmp, "audio_vae_config");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (write_config(a, dir, cases[i].field, cases[i].value)) continue;
    dit_vae_ltx2_audio *m = NULL;
    dit_error e = {0};
    const dit_status s = dit_vae_ltx2_audio_load(g_be, dir, &m, &e);
    CHECK_MSG(s == cases[i].st && !m && strstr(e.msg, cases[i].field), "%s = %s: status %d, %s", cases[i].field,
              cases[i].value, (int)s, e.msg);
    printf("%s = %s: %s\n", cases[i].field, cases[i].value, e.msg);
  }
  /* attention at a resolution no level has: nothing to run, accepted */
  dit_vae_ltx2_audio *m = NULL;
  dit_error e = {0};
  if (!write_config(a, dir, "attn_resolutions", "[5, 64]")) {
    CHECK_MSG(dit_vae_ltx2_audio_load(g_be, dir, &m, &e) == DIT_OK && m, "attn_resolutions [5, 64]: %s", e.msg);
    dit_vae_ltx2_audio_free(m);
    m = NULL;
  }
  /* two levels: the checkpoint's third level is extra, its conv_in the wrong width */
  if (!write_config(a, dir, "ch_mult", "[1, 2]")) {
    CHECK(dit_vae_ltx2_audio_load(g_be, dir, &m, &e) != DIT_OK && !m && strstr(e.msg, "decoder."));
    printf("ch_mult = [1, 2]: %s\n", e.msg);
  }
  CHECK(dit_vae_ltx2_audio_load(g_be, NULL, &m, &e) == DIT_ERR_INVALID_ARG && !m);
  CHECK(dit_vae_ltx2_audio_load(NULL, dir, &m, &e) == DIT_ERR_INVALID_ARG && !m);
  CHECK(dit_vae_ltx2_audio_load(g_be, dir, NULL, &e) == DIT_ERR_INVALID_ARG);
  CHECK(dit_vae_ltx2_audio_get_config(NULL) == NULL);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_ltx20, test_ltx23, test_cost, test_mel_bins,
                                                   test_synthetic, test_refused_configs};
  return dt_main_on_env_backend(argc, argv, cases, sizeof cases / sizeof cases[0], &g_be, &g_gpu);
}
