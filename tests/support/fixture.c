/* Fixture tensor loading for tests (see fixture.h): validated through the library's own
 * safetensors reader, then converted element by element. */
#include "fixture.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "testing.h"

/* Opens file, finds name, copies its raw bytes into a malloc'd buffer (aligned for any
 * dtype). Returns 0 or -1 after printing why. */
static int load_raw(const char *file, const char *name, void **raw, dit_dtype *dtype, size_t *numel, int64_t *shape,
                    int *ndim) {
  dit_error err = {0};
  dit_st_file *f;
  if (dit_st_open(file, NULL, &f, &err) != DIT_OK) {
    fprintf(stderr, "fixture: %s\n", err.msg);
    return -1;
  }
  const dit_st_tensor *t = dit_st_find(f, name);
  if (!t) {
    fprintf(stderr, "fixture: %s: no tensor \"%s\"\n", file, name);
    dit_st_close(f);
    return -1;
  }
  size_t nbytes = (size_t)(t->end - t->begin);
  *raw = malloc(nbytes ? nbytes : 1);
  if (!*raw) {
    fprintf(stderr, "fixture: %s: out of memory for \"%s\"\n", file, name);
    dit_st_close(f);
    return -1;
  }
  memcpy(*raw, t->data, nbytes);
  *dtype = t->dtype;
  *numel = nbytes / dit_dtype_size(t->dtype);
  *ndim = t->ndim;
  for (int i = 0; i < t->ndim; i++) shape[i] = t->shape[i];
  dit_st_close(f);
  return 0;
}

/* Converts n raw elements of dtype dt into out; 0, or -1 after printing why. */
typedef int (*convert_fn)(void *out, const void *raw, dit_dtype dt, size_t n, const char *file, const char *name);

/* load_raw, then a malloc'd output of as many elements of elem bytes filled by convert;
 * NULL after a failure (printed, nothing left allocated). */
static void *load_converted(const char *file, const char *name, size_t elem, convert_fn convert, int64_t *shape,
                            int *ndim) {
  void *raw;
  dit_dtype dt;
  size_t n;
  if (load_raw(file, name, &raw, &dt, &n, shape, ndim)) return NULL;
  void *out = malloc(n ? n * elem : 1);
  if (!out) {
    free(raw);
    fprintf(stderr, "fixture: %s: out of memory for \"%s\"\n", file, name);
    return NULL;
  }
  int rc = convert(out, raw, dt, n, file, name);
  free(raw);
  if (rc) {
    free(out);
    return NULL;
  }
  return out;
}

static int convert_f32(void *out, const void *raw, dit_dtype dt, size_t n, const char *file, const char *name) {
  (void)file;
  (void)name;
  dit_convert_to_f32(out, raw, dt, n);
  return 0;
}

/* Integer and bool dtypes, or floats holding integral values in the int32 range. */
static int convert_i32(void *out_, const void *raw, dit_dtype dt, size_t n, const char *file, const char *name) {
  int32_t *out = out_;
  const unsigned char *p = raw;
  for (size_t i = 0; i < n; i++) {
    double v;
    switch (dt) {
      case DIT_I64: {
        int64_t x;
        memcpy(&x, p + 8 * i, 8);
        v = (double)x;
        break;
      }
      case DIT_U64: {
        uint64_t x;
        memcpy(&x, p + 8 * i, 8);
        v = (double)x;
        break;
      }
      case DIT_F64: memcpy(&v, p + 8 * i, 8); break;
      case DIT_I32: {
        int32_t x;
        memcpy(&x, p + 4 * i, 4);
        v = x;
        break;
      }
      case DIT_U32: {
        uint32_t x;
        memcpy(&x, p + 4 * i, 4);
        v = x;
        break;
      }
      default: {
        float x;
        dit_convert_to_f32(&x, p + dit_dtype_size(dt) * i, dt, 1);
        v = x;
        break;
      }
    }
    if (!(v >= INT32_MIN && v <= INT32_MAX) || v != floor(v)) {
      fprintf(stderr, "fixture: %s: \"%s\" element %zu (%g) is not an int32 value\n", file, name, i, v);
      return -1;
    }
    out[i] = (int32_t)v;
  }
  return 0;
}

int dt_load_f32(const char *file, const char *name, float **data, int64_t *shape, int *ndim) {
  *data = load_converted(file, name, sizeof **data, convert_f32, shape, ndim);
  return *data ? 0 : -1;
}

int dt_load_i32(const char *file, const char *name, int32_t **data, int64_t *shape, int *ndim) {
  *data = load_converted(file, name, sizeof **data, convert_i32, shape, ndim);
  return *data ? 0 : -1;
}

json_t *dt_load_reference(const char *dir, char *ref_file, size_t len) {
  char path[4200];
  if (ref_file) snprintf(ref_file, len, "%s/reference.safetensors", dir);
  snprintf(path, sizeof path, "%s/reference.json", dir);
  json_error_t je;
  json_t *rj = json_load_file(path, 0, &je);
  CHECK_MSG(rj != NULL, "cannot read %s: %s", path, je.text);
  return rj;
}

int dt_check_latents(const char *ref_file, const char *name, const float *lat, size_t n, double tol, double *rel) {
  float *ref;
  int64_t shape[8];
  int nd;
  if (dt_load_f32(ref_file, name, &ref, shape, &nd) != 0) {
    CHECK_MSG(0, "missing %s", name);
    return -1;
  }
  size_t rn = 1;
  for (int i = 0; i < nd; i++) rn *= (size_t)shape[i];
  CHECK_MSG(rn == n, "%s: %zu elements, reference has %zu", name, n, rn);
  *rel = -1;
  if (rn == n) {
    double e = *rel = dt_rel_err(lat, ref, n);
    CHECK_MSG(e <= tol, "%s: relative error %.3g > %.3g", name, e, tol);
    printf("%s: relative error %.3g (bound %.3g)\n", name, e, tol);
  }
  free(ref);
  return 0;
}

int dt_step_check_cb(void *user, int step, int total, const float *lat, size_t n, double secs) {
  (void)total;
  (void)secs;
  dt_step_check *c = user;
  char name[64];
  if (c->prefix) snprintf(name, sizeof name, "%s_latents_step%d", c->prefix, step);
  else snprintf(name, sizeof name, "latents_step%d", step);
  double e;
  if (dt_check_latents(c->ref, name, lat, n, c->tol, &e) != 0) return 0;
  if (e > c->worst) c->worst = e;
  c->steps_seen++;
  return 0;
}

void dt_gen_params_from_reference(dit_gen_params *p, const char *model, const json_t *rj, const json_t *run) {
  dit_gen_params_default(p);
  p->model_dir = model;
  p->prompt = json_string_value(json_object_get(rj, "prompt"));
  p->width = (int)json_integer_value(json_object_get(rj, "width"));
  p->height = (int)json_integer_value(json_object_get(rj, "height"));
  p->seed = (uint64_t)json_integer_value(json_object_get(rj, "seed"));
  p->steps = (int)json_integer_value(json_object_get(run, "steps"));
  p->guidance = json_number_value(json_object_get(run, "guidance_scale"));
  p->guidance_set = 1;
}

void dt_check_reference_run(dit_ctx *ctx, const char *fixture, const char *ref_file, const json_t *rj, int rope_bf16,
                            double tol) {
  dit_gen_params p;
  dt_gen_params_from_reference(&p, fixture, rj, rj);
  const json_t *msl = json_object_get(rj, "max_sequence_length");
  if (json_is_integer(msl)) p.max_sequence_length = (int)json_integer_value(msl);
  p.text_rope_bf16 = rope_bf16;
  dt_step_check cap = {tol, ref_file, NULL, 0, 0};
  p.on_step = dt_step_check_cb;
  p.user = &cap;
  dit_image img;
  dit_gen_stats st;
  dit_status s = dit_generate(ctx, &p, &img, &st);
  CHECK_MSG(s == DIT_OK, "%s: generate failed: %s", fixture, dit_ctx_last_error(ctx));
  CHECK_MSG(cap.steps_seen == p.steps, "%d steps reported, %d expected", cap.steps_seen, p.steps);
  if (s != DIT_OK) return;
  CHECK(img.width == p.width && img.height == p.height);
  printf("%s: worst step latents rel err %.3g\n", fixture, cap.worst);
  dt_check_image(ref_file, "image", &img, fixture);
  dit_image_free(&img);
  /* a size that is not a multiple of 16 is refused before any work */
  p.width = 100;
  p.on_step = NULL;
  s = dit_generate(ctx, &p, &img, NULL);
  CHECK_MSG(s == DIT_ERR_INVALID_ARG && strstr(dit_ctx_last_error(ctx), "multiples of 16"), "%s",
            dit_ctx_last_error(ctx));
}

void dt_check_family_defaults(dit_ctx *ctx, const char *fixture, const char *family, int steps, double guidance) {
  dit_gen_defaults d;
  dit_status s = dit_gen_defaults_for(ctx, fixture, &d);
  CHECK_MSG(s == DIT_OK, "defaults: %s", dit_ctx_last_error(ctx));
  if (s != DIT_OK) return;
  CHECK(!strcmp(d.family, family) && d.width == 1024 && d.height == 1024 && d.size_multiple == 16);
  CHECK_MSG(d.steps == steps && d.guidance == guidance, "%s: %d steps, guidance %g", fixture, d.steps, d.guidance);
}

float *dt_load_f32_n(const char *file, const char *name, size_t n) {
  float *d = NULL;
  int64_t sh[8];
  int nd = 0;
  if (dt_load_f32(file, name, &d, sh, &nd)) {
    CHECK_MSG(0, "%s: no tensor %s", file, name);
    return NULL;
  }
  size_t got = 1;
  for (int i = 0; i < nd; i++) got *= (size_t)sh[i];
  CHECK_MSG(got == n, "%s: %s has %zu elements, expected %zu", file, name, got, n);
  if (got != n) free(d), d = NULL;
  return d;
}

void dt_check_png(const char *png, const char *ref_file, const char *ref_name, int want_w, int want_h) {
  int w = 0, h = 0;
  unsigned char *px = dt_read_png_rgb(png, &w, &h);
  CHECK_MSG(px != NULL, "cannot read %s", png);
  float *ref;
  int64_t sh[8];
  int nd;
  if (!px || dt_load_f32(ref_file, ref_name, &ref, sh, &nd) != 0) {
    free(px);
    return;
  }
  const bool same_size = w == want_w && h == want_h && sh[0] == want_h && sh[1] == want_w;
  CHECK(same_size);
  int maxd = same_size ? dt_max_level_diff(ref, px, (size_t)w * h * 3, NULL) : 0;
  printf("%s vs %s: max difference %d levels\n", png, ref_name, maxd);
  CHECK_MSG(maxd <= 1, "%s differs from %s by %d levels", png, ref_name, maxd);
  free(ref);
  free(px);
}

int dt_zimage_case_load(const char *file, dt_zimage_case *d) {
  int nd;
  char name[32];
  memset(d, 0, sizeof *d);
  for (int i = 0; i < 2; i++) {
    snprintf(name, sizeof name, "dit_x%d", i);
    if (dt_load_f32(file, name, &d->x[i], d->xs[i], &nd) || nd != 4) return -1;
    snprintf(name, sizeof name, "dit_cap%d", i);
    if (dt_load_f32(file, name, &d->cap[i], d->cs[i], &nd) || nd != 2) return -1;
    snprintf(name, sizeof name, "dit_out%d", i);
    if (dt_load_f32(file, name, &d->ref[i], d->rs[i], &nd) || nd != 4) return -1;
  }
  if (dt_load_f32(file, "dit_t", &d->t, d->ts, &nd) || nd != 1 || d->ts[0] != 2) return -1;
  return 0;
}

void dt_zimage_case_free(dt_zimage_case *d) {
  for (int i = 0; i < 2; i++) free(d->x[i]), free(d->cap[i]), free(d->ref[i]);
  free(d->t);
}

int dt_flux2_case_load(const char *file, dt_flux2_case *c) {
  memset(c, 0, sizeof *c);
  int64_t s[8];
  int nd;
  int bad = dt_load_f32(file, "dit_hidden", &c->hidden, c->hs, &nd) ||
            dt_load_f32(file, "dit_encoder", &c->enc, c->es, &nd) || dt_load_f32(file, "dit_t", &c->t, s, &nd) ||
            dt_load_f32(file, "dit_img_ids", &c->img_ids, c->is, &nd) ||
            dt_load_f32(file, "dit_txt_ids", &c->txt_ids, c->ts, &nd) ||
            dt_load_f32(file, "dit_out", &c->ref, c->os, &nd);
  return bad ? -1 : 0;
}

void dt_flux2_case_free(dt_flux2_case *c) {
  free(c->hidden);
  free(c->enc);
  free(c->t);
  free(c->img_ids);
  free(c->txt_ids);
  free(c->ref);
}

void dt_zimage_case_item(const dt_zimage_case *d, int i, dit_tensor *x, dit_tensor *cap) {
  *x = dit_tensor_make(DIT_F32, d->x[i], 4, d->xs[i]);
  *cap = dit_tensor_make(DIT_F32, d->cap[i], 2, d->cs[i]);
}

void *dt_to_device(dit_backend *be, const float *h, size_t n) {
  void *p = NULL;
  dit_error err = {0};
  if (be->ops->alloc(be, n * sizeof(float), &p, &err) != DIT_OK) return NULL;
  if (be->ops->upload(be, p, h, n * sizeof(float), &err) != DIT_OK) {
    be->ops->free(be, p);
    return NULL;
  }
  return p;
}

float *dt_to_host(dit_backend *be, const void *p, size_t n) {
  float *h = malloc(n * sizeof *h);
  dit_error e = {0};
  dit_status s = h ? be->ops->download(be, h, p, n * sizeof *h, &e) : DIT_ERR_NOMEM;
  if (s == DIT_OK) s = be->ops->sync(be, &e);
  CHECK_MSG(s == DIT_OK, "download: %s", s == DIT_ERR_NOMEM ? "out of memory" : e.msg);
  if (s != DIT_OK) free(h), h = NULL;
  return h;
}

double dt_error_of(bool gpu, const float *got, const float *ref, size_t n) {
  long bad = 0;
  return gpu ? dt_nmse(got, ref, n, &bad) + (bad ? 1.0 : 0.0) : dt_rel_err(got, ref, n);
}

dit_status dt_backend_from_env(dit_backend **be, bool *gpu, dit_error *err) {
  const char *dev = getenv("DIT_TEST_DEVICE");
  *gpu = dev && !strcmp(dev, "cuda");
#ifdef DIT_HAVE_CUDA
  if (*gpu) return dit_backend_cuda_create(0, DIT_GPU_PRECISION_BF16, NULL, be, err);
#else
  if (*gpu) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "DIT_TEST_DEVICE=cuda in a build without CUDA");
#endif
  return dit_backend_cpu_create(2, be, err);
}

int dt_main_on_env_backend(int argc, char **argv, void (*const *cases)(const dt_args *), size_t n, dit_backend **be,
                           bool *gpu) {
  dit_error err = {0};
  if (dt_backend_from_env(be, gpu, &err) != DIT_OK) {
    fprintf(stderr, "%s backend: %s\n", *gpu ? "cuda" : "cpu", err.msg);
    return 1;
  }
  int rc = dt_main(argc, argv, cases, n);
  dit_backend_free(*be);
  *be = NULL;
  return rc;
}

int dt_json_int(const json_t *obj, const char *key) { return (int)json_integer_value(json_object_get(obj, key)); }

/* An output tensor of the fixture writers: name, dtype, shape, and the source tensors whose
 * data, back to back, make it. */
typedef struct out_t {
  char name[320];
  dit_dtype dtype;
  int ndim;
  int64_t shape[DIT_MAX_DIMS];
  const dit_st_tensor *src[3];
  int n_src;
  dit_st_tensor half[3]; /* a source's half, when a piece takes one */
  int64_t group;          /* rows of each source in turn (0: each source whole, in order) */
} out_t;

static void out_from(out_t *o, const char *name, const dit_st_tensor *t) {
  memset(o, 0, sizeof *o);
  snprintf(o->name, sizeof o->name, "%s", name);
  o->dtype = t->dtype, o->ndim = t->ndim;
  memcpy(o->shape, t->shape, sizeof o->shape);
  o->src[0] = t, o->n_src = 1;
}

static dit_status out_fill(void *user, size_t i, void *dst, size_t nbytes, dit_error *err) {
  const out_t *o = (const out_t *)user + i;
  size_t at = 0;
  if (o->group > 0) { /* group rows of each source in turn */
    const size_t run = (size_t)(o->src[0]->end - o->src[0]->begin) / (size_t)o->src[0]->shape[0] * (size_t)o->group;
    for (int64_t g = 0; g < o->src[0]->shape[0] / o->group; g++)
      for (int k = 0; k < o->n_src && at + run <= nbytes; k++, at += run)
        memcpy((char *)dst + at, (const char *)o->src[k]->data + (size_t)g * run, run);
    return at == nbytes ? DIT_OK : dit_errorf(err, DIT_ERR_INTERNAL, "fixture writer: %s: data size", o->name);
  }
  for (int k = 0; k < o->n_src; k++) {
    const size_t nb = (size_t)(o->src[k]->end - o->src[k]->begin);
    if (at + nb > nbytes) break;
    memcpy((char *)dst + at, o->src[k]->data, nb);
    at += nb;
  }
  return at == nbytes ? DIT_OK : dit_errorf(err, DIT_ERR_INTERNAL, "fixture writer: %s: data size", o->name);
}

/* Writes the n tensors o[i] to dst (replaced if present) with the library's safetensors
 * writer. 0, or -1 (more than 4 dims, a name twice, sizes that disagree, I/O). */
static int out_write(const char *dst, const out_t *o, size_t n) {
  dit_out_tensor *t = calloc(n + 1, sizeof *t);
  int rc = t ? 0 : -1;
  for (size_t i = 0; !rc && i < n; i++) {
    if (o[i].ndim > 4) rc = -1;
    t[i] = (dit_out_tensor){o[i].name, o[i].dtype, o[i].ndim, {0}};
    memcpy(t[i].shape, o[i].shape, (size_t)(o[i].ndim > 4 ? 4 : o[i].ndim) * sizeof *o[i].shape);
  }
  dit_error err = {0};
  if (!rc && dit_st_write(dst, true, NULL, 0, t, n, out_fill, (void *)o, &err) != DIT_OK) {
    fprintf(stderr, "fixture writer: %s\n", err.msg);
    rc = -1;
  }
  free(t);
  return rc;
}

int dt_st_rewrite(const char *src, const char *dst, const char *drop, const char *data_of) {
  dit_st_file *f = NULL;
  dit_error err = {0};
  if (dit_st_open(src, NULL, &f, &err) != DIT_OK) return -1;
  const dit_st_tensor *repl = data_of ? dit_st_find(f, data_of) : NULL;
  out_t *o = calloc(f->n_tensors + 1, sizeof *o);
  size_t n = 0;
  for (size_t i = 0; o && i < f->n_tensors; i++)
    if (strcmp(f->tensors[i].name, drop)) out_from(&o[n++], f->tensors[i].name, &f->tensors[i]);
  if (o && repl) out_from(&o[n++], drop, repl); /* drop's name, another tensor's dtype, shape and data */
  int rc = o ? out_write(dst, o, n) : -1;
  free(o);
  dit_st_close(f);
  return rc;
}

int dt_st_rename(const char *src, const char *dst, dt_st_rename_fn fn, void *user) {
  dit_st_file *f = NULL;
  dit_error err = {0};
  if (dit_st_open(src, NULL, &f, &err) != DIT_OK) return -1;
  out_t *o = calloc(f->n_tensors + 1, sizeof *o);
  int rc = o ? 0 : -1;
  size_t n = 0;
  for (size_t i = 0; !rc && i < f->n_tensors; i++) {
    const dit_st_tensor *t = &f->tensors[i];
    out_from(&o[n], t->name, t);
    int r = fn(user, t->name, o[n].name, sizeof o[n].name, o[n].shape, &o[n].ndim);
    int64_t before = 1, after = 1;
    for (int k = 0; k < t->ndim; k++) before *= t->shape[k];
    for (int k = 0; r == 0 && k < o[n].ndim; k++) after *= o[n].shape[k];
    if (r < 0 || (r == 0 && (o[n].ndim < 0 || o[n].ndim > DIT_MAX_DIMS || before != after))) rc = -1;
    else if (r == 0) n++;
  }
  if (!rc) rc = out_write(dst, o, n);
  free(o);
  dit_st_close(f);
  return rc;
}

/* Piece p's tensor (its parts found in f, rows concatenated) into o; -1 when they do not fit. */
static int compose_one(out_t *o, const dit_st_file *f, const dt_st_piece *p) {
  memset(o, 0, sizeof *o);
  if (p->n_src < 1 || p->n_src > 3) return -1;
  for (int k = 0; k < p->n_src; k++) {
    const dit_st_tensor *b = o->src[k] = dit_st_find(f, p->src[k]);
    if (b && p->half[k] && b->ndim >= 1 && b->shape[0] % 2 == 0) { /* rows [0, R/2) or [R/2, R) */
      const uint64_t nb = (b->end - b->begin) / 2;
      o->half[k] = *b;
      o->half[k].shape[0] /= 2;
      o->half[k].data = (const char *)b->data + (p->half[k] == 2 ? nb : 0);
      o->half[k].begin = b->begin + (p->half[k] == 2 ? nb : 0);
      o->half[k].end = o->half[k].begin + nb;
      b = o->src[k] = &o->half[k];
    } else if (b && p->half[k]) {
      return -1;
    }
    const dit_st_tensor *a = o->src[0];
    if (!b || b->ndim < 1 || b->dtype != a->dtype || b->ndim != a->ndim ||
        memcmp(b->shape + 1, a->shape + 1, (size_t)(a->ndim - 1) * 8))
      return -1;
    if (p->group > 0 && (b->shape[0] != a->shape[0] || b->shape[0] % p->group)) return -1;
    o->shape[0] += b->shape[0];
  }
  snprintf(o->name, sizeof o->name, "%s", p->name);
  o->dtype = o->src[0]->dtype, o->ndim = o->src[0]->ndim, o->n_src = p->n_src, o->group = p->group;
  memcpy(o->shape + 1, o->src[0]->shape + 1, (size_t)(o->ndim - 1) * 8);
  return 0;
}

int dt_st_compose(const char *src, const char *dst, const dt_st_piece *p, size_t n) {
  dit_st_file *f = NULL;
  dit_error err = {0};
  if (dit_st_open(src, NULL, &f, &err) != DIT_OK) return -1;
  out_t *o = calloc(n + 1, sizeof *o);
  int rc = o ? 0 : -1;
  for (size_t i = 0; !rc && i < n; i++) rc = compose_one(&o[i], f, &p[i]);
  if (!rc) rc = out_write(dst, o, n);
  free(o);
  dit_st_close(f);
  return rc;
}

/* t (a float matrix) as fp8 codes q over scale *s, or decoded: F32 values q * s. */
static void *fp8_data(const dit_st_tensor *t, dit_dtype f8, bool decoded, float *s, uint64_t *nb) {
  size_t n = (size_t)(t->shape[0] * t->shape[1]);
  float *f = malloc(n * sizeof *f + 1);
  uint8_t *q = malloc(n + 1);
  float amax = 0.0f;
  dit_convert_to_f32(f, t->data, t->dtype, n);
  for (size_t i = 0; i < n; i++) amax = fabsf(f[i]) > amax ? fabsf(f[i]) : amax;
  *s = amax > 0.0f ? amax / (f8 == DIT_F8_E4M3 ? 448.0f : 57344.0f) : 1.0f;
  for (size_t i = 0; i < n; i++) q[i] = f8 == DIT_F8_E4M3 ? dit_f32_to_e4m3(f[i] / *s) : dit_f32_to_e5m2(f[i] / *s);
  if (!decoded) {
    free(f);
    *nb = n;
    return q;
  }
  for (size_t i = 0; i < n; i++) f[i] = (f8 == DIT_F8_E4M3 ? dit_e4m3_to_f32(q[i]) : dit_e5m2_to_f32(q[i])) * *s;
  free(q);
  *nb = n * 4;
  return f;
}

int dt_st_to_fp8(const char *src, const char *dst, dit_dtype f8, bool weight_scale, bool decoded) {
  dit_st_file *f = NULL;
  dit_error err = {0};
  if (dit_st_open(src, NULL, &f, &err) != DIT_OK) return -1;
  size_t cap = 2 * f->n_tensors + 2, n = 0, nm = 0;
  out_t *o = calloc(cap, sizeof *o);
  dit_st_tensor *made = calloc(cap, sizeof *made); /* the fp8 (or decoded) matrices and the scales */
  float *scales = calloc(cap, sizeof *scales);
  int rc = o && made && scales ? 0 : -1;
  static const uint8_t marker = 0;
  if (!rc && !decoded && !weight_scale) { /* ComfyUI's marker: an empty fp8 tensor */
    made[nm] = (dit_st_tensor){.dtype = f8, .ndim = 1, .data = &marker};
    out_from(&o[n++], "scaled_fp8", &made[nm++]);
  }
  for (size_t i = 0; !rc && i < f->n_tensors; i++) {
    const dit_st_tensor *t = &f->tensors[i];
    if (!dit_wname_quant_matrix(t->name, t->ndim, t->shape, f8) || !dit_dtype_is_float(t->dtype)) {
      out_from(&o[n++], t->name, t);
      continue;
    }
    float *s = &scales[nm];
    dit_st_tensor *q = &made[nm++], *sc = &made[nm++];
    *q = *t;
    q->dtype = decoded ? DIT_F32 : f8;
    q->data = fp8_data(t, f8, decoded, s, &q->end);
    q->begin = 0;
    out_from(&o[n++], t->name, q);
    if (decoded) continue;
    size_t stem = strlen(t->name) - 7; /* without ".weight" */
    char sn[300];
    snprintf(sn, sizeof sn, "%.*s.%s", (int)stem, t->name, weight_scale ? "weight_scale" : "scale_weight");
    *sc = (dit_st_tensor){.dtype = DIT_F32, .ndim = 0, .end = 4, .data = s};
    out_from(&o[n++], sn, sc);
  }
  if (!rc) rc = out_write(dst, o, n);
  for (size_t i = 0; made && i < nm; i++)
    if (made[i].data != &marker && (made[i].data < (const void *)scales || made[i].data >= (const void *)(scales + cap)))
      free((void *)made[i].data);
  free(o), free(made), free(scales);
  dit_st_close(f);
  return rc;
}

/* The first occurrence of from in s (len bytes) replaced by to; false if it does not fit. */
static bool replace(char *s, size_t len, const char *from, const char *to) {
  char *p = strstr(s, from);
  if (!p) return true;
  char tail[512];
  snprintf(tail, sizeof tail, "%s", p + strlen(from));
  size_t head = (size_t)(p - s);
  return (size_t)snprintf(p, len - head, "%s%s", to, tail) < len - head;
}

/* Z-Image's original checkpoint names (q, k, v fused, renamed modules, an unused
 * norm_final, ComfyUI's prefix), from a diffusers-named transformer file: this suite's own
 * table. */
int dt_zimage_write_original(const char *src, const char *dst, bool split_qkv) {
  dit_st_file *f = NULL;
  dit_error err = {0};
  if (dit_st_open(src, NULL, &f, &err) != DIT_OK) return -1;
  dt_st_piece *p = calloc(f->n_tensors + 1, sizeof *p); /* k and v (skipped) make room for split parts */
  size_t n = 0;
  static const char *const pre = "model.diffusion_model.";
  for (size_t i = 0; p && i < f->n_tensors; i++) {
    char name[200], from[256];
    snprintf(name, sizeof name, "%s", f->tensors[i].name);
    const char *q = strstr(name, ".attention.to_q.weight");
    if (strstr(name, ".attention.to_k.weight") || strstr(name, ".attention.to_v.weight")) continue;
    if (q && split_qkv) { /* q, k, v as stable-diffusion.cpp's converter writes them */
      size_t stem = (size_t)(q - name);
      static const char *const parts[3] = {"q", "k", "v"}, *const sfx[3] = {"", ".1", ".2"};
      for (int k = 0; k < 3; k++, n++) {
        snprintf(p[n].name, sizeof p[n].name, "%s%.*s.attention.qkv.weight%s", pre, (int)stem, name, sfx[k]);
        snprintf(p[n].src[0], sizeof p[n].src[0], "%.*s.attention.to_%s.weight", (int)stem, name, parts[k]);
        p[n].n_src = 1;
      }
      continue;
    }
    if (q) { /* q, k, v as one tensor */
      size_t stem = (size_t)(q - name);
      snprintf(p[n].name, sizeof p[n].name, "%s%.*s.attention.qkv.weight", pre, (int)stem, name);
      static const char *const parts[3] = {"q", "k", "v"};
      for (int k = 0; k < 3; k++)
        snprintf(p[n].src[k], sizeof p[n].src[k], "%.*s.attention.to_%s.weight", (int)stem, name, parts[k]);
      p[n++].n_src = 3;
      continue;
    }
    static const char *const ren[][2] = {{"all_final_layer.2-1.", "final_layer."}, {"all_x_embedder.2-1.", "x_embedder."},
                                         {".attention.to_out.0.", ".attention.out."}, {".attention.norm_k.", ".attention.k_norm."},
                                         {".attention.norm_q.", ".attention.q_norm."}};
    snprintf(from, sizeof from, "%s", name);
    for (size_t r = 0; r < sizeof ren / sizeof *ren; r++) replace(name, sizeof name, ren[r][0], ren[r][1]);
    snprintf(p[n].name, sizeof p[n].name, "%s%s", pre, name);
    snprintf(p[n].src[0], sizeof p[n].src[0], "%s", from);
    p[n++].n_src = 1;
  }
  if (p) { /* in the original, unused */
    snprintf(p[n].name, sizeof p[n].name, "%snorm_final.weight", pre);
    snprintf(p[n].src[0], sizeof p[n].src[0], "cap_embedder.0.weight");
    p[n++].n_src = 1;
  }
  dit_st_close(f);
  int rc = p ? dt_st_compose(src, dst, p, n) : -1;
  free(p);
  return rc;
}

/* One piece of dt_flux2_write_bfl: prefix + dst from the n sources, each stem + src[k]. */
static void bfl_piece(dt_st_piece *p, const char *prefix, const char *dst, const char *stem, int n,
                      const char *const *src) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s%s", prefix, dst);
  for (int k = 0; k < n; k++) snprintf(p->src[k], sizeof p->src[k], "%s%s", stem, src[k]);
  p->n_src = n;
}

int dt_flux2_write_bfl(const char *src, const char *dst, const char *prefix) {
  dit_st_file *f = NULL;
  dit_error err = {0};
  if (dit_st_open(src, NULL, &f, &err) != DIT_OK) return -1;
  int nd = 0, ns = 0;
  char probe[256];
  while (snprintf(probe, sizeof probe, "transformer_blocks.%d.attn.norm_q.weight", nd), dit_st_find(f, probe)) nd++;
  while (snprintf(probe, sizeof probe, "single_transformer_blocks.%d.attn.norm_q.weight", ns), dit_st_find(f, probe))
    ns++;
  const size_t cap = 16 + 12 * (size_t)nd + 4 * (size_t)ns;
  dt_st_piece *p = calloc(cap, sizeof *p);
  size_t n = 0;
  static const char *const top[][2] = {
      {"img_in.weight", "x_embedder.weight"},
      {"txt_in.weight", "context_embedder.weight"},
      {"time_in.in_layer.weight", "time_guidance_embed.timestep_embedder.linear_1.weight"},
      {"time_in.out_layer.weight", "time_guidance_embed.timestep_embedder.linear_2.weight"},
      {"guidance_in.in_layer.weight", "time_guidance_embed.guidance_embedder.linear_1.weight"},
      {"guidance_in.out_layer.weight", "time_guidance_embed.guidance_embedder.linear_2.weight"},
      {"double_stream_modulation_img.lin.weight", "double_stream_modulation_img.linear.weight"},
      {"double_stream_modulation_txt.lin.weight", "double_stream_modulation_txt.linear.weight"},
      {"single_stream_modulation.lin.weight", "single_stream_modulation.linear.weight"},
      {"final_layer.linear.weight", "proj_out.weight"},
  };
  for (size_t i = 0; p && i < sizeof top / sizeof *top; i++)
    if (dit_st_find(f, top[i][1])) bfl_piece(&p[n++], prefix, top[i][0], "", 1, &top[i][1]);
  if (p) { /* diffusers keeps (scale, shift), the original (shift, scale) */
    static const char *const mod[2] = {"norm_out.linear.weight", "norm_out.linear.weight"};
    bfl_piece(&p[n], prefix, "final_layer.adaLN_modulation.1.weight", "", 2, mod);
    p[n].half[0] = 2, p[n++].half[1] = 1;
  }
  static const char *const dbl[][2] = {
      {"img_attn.norm.query_norm.scale", "attn.norm_q.weight"},
      {"img_attn.norm.key_norm.scale", "attn.norm_k.weight"},
      {"txt_attn.norm.query_norm.scale", "attn.norm_added_q.weight"},
      {"txt_attn.norm.key_norm.scale", "attn.norm_added_k.weight"},
      {"img_attn.proj.weight", "attn.to_out.0.weight"},
      {"txt_attn.proj.weight", "attn.to_add_out.weight"},
      {"img_mlp.0.weight", "ff.linear_in.weight"},
      {"img_mlp.2.weight", "ff.linear_out.weight"},
      {"txt_mlp.0.weight", "ff_context.linear_in.weight"},
      {"txt_mlp.2.weight", "ff_context.linear_out.weight"},
  };
  static const char *const img_qkv[3] = {"attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight"};
  static const char *const txt_qkv[3] = {"attn.add_q_proj.weight", "attn.add_k_proj.weight", "attn.add_v_proj.weight"};
  for (int b = 0; p && b < nd; b++) {
    char stem[64], d[64], name[256];
    snprintf(stem, sizeof stem, "transformer_blocks.%d.", b);
    snprintf(d, sizeof d, "double_blocks.%d.", b);
    snprintf(name, sizeof name, "%simg_attn.qkv.weight", d);
    bfl_piece(&p[n++], prefix, name, stem, 3, img_qkv);
    snprintf(name, sizeof name, "%stxt_attn.qkv.weight", d);
    bfl_piece(&p[n++], prefix, name, stem, 3, txt_qkv);
    for (size_t i = 0; i < sizeof dbl / sizeof *dbl; i++) {
      snprintf(name, sizeof name, "%s%s", d, dbl[i][0]);
      bfl_piece(&p[n++], prefix, name, stem, 1, &dbl[i][1]);
    }
  }
  static const char *const sgl[][2] = {
      {"linear1.weight", "attn.to_qkv_mlp_proj.weight"},
      {"linear2.weight", "attn.to_out.weight"},
      {"norm.query_norm.scale", "attn.norm_q.weight"},
      {"norm.key_norm.scale", "attn.norm_k.weight"},
  };
  for (int b = 0; p && b < ns; b++) {
    char stem[64], name[256];
    snprintf(stem, sizeof stem, "single_transformer_blocks.%d.", b);
    for (size_t i = 0; i < sizeof sgl / sizeof *sgl; i++) {
      snprintf(name, sizeof name, "single_blocks.%d.%s", b, sgl[i][0]);
      bfl_piece(&p[n++], prefix, name, stem, 1, &sgl[i][1]);
    }
  }
  const size_t have = f->n_tensors;
  dit_st_close(f);
  /* every source tensor used (the fused q, k, v: three per piece, two such pieces per block) */
  int rc = p && n + 4 * (size_t)nd == have ? dt_st_compose(src, dst, p, n) : -1;
  free(p);
  return rc;
}

/* dt_st_rename callback: transformers' names (with "model.") as llama.cpp's GGUF converter
 * writes them (this suite's own table). */
int dt_qwen3_to_llama_cpp(void *user, const char *name, char *out, size_t len, int64_t *shape, int *ndim) {
  (void)user, (void)shape, (void)ndim;
  static const char *const map[][2] = {
      {"model.layers.", "blk."},          {"self_attn.q_norm.", "attn_q_norm."}, {"self_attn.k_norm.", "attn_k_norm."},
      {"input_layernorm.", "attn_norm."}, {"self_attn.q_proj.", "attn_q."},      {"self_attn.k_proj.", "attn_k."},
      {"self_attn.v_proj.", "attn_v."},   {"self_attn.o_proj.", "attn_output."}, {"post_attention_layernorm.", "ffn_norm."},
      {"mlp.gate_proj.", "ffn_gate."},    {"mlp.up_proj.", "ffn_up."},           {"mlp.down_proj.", "ffn_down."},
      {"model.embed_tokens.", "token_embd."}, {"model.norm.", "output_norm."},   {"lm_head.", "output."}};
  char buf[512];
  snprintf(buf, sizeof buf, "%s", name);
  for (size_t i = 0; i < sizeof map / sizeof *map; i++)
    if (!replace(buf, sizeof buf, map[i][0], map[i][1])) return -1;
  return snprintf(out, len, "%s", buf) < (int)len ? 0 : -1;
}

int dt_vae_case_load(const char *file, float **z, int64_t *zs, float **img, int64_t *is) {
  int zn = 0, in = 0;
  *z = *img = NULL;
  if (dt_load_f32(file, "vae_z", z, zs, &zn) || dt_load_f32(file, "vae_image", img, is, &in) || zn != 4 || in != 4) {
    CHECK_MSG(0, "cannot load vae_z / vae_image [4-D] from %s", file);
    free(*z);
    free(*img);
    *z = *img = NULL;
    return -1;
  }
  return 0;
}

/* ---- an AutoencoderKL under LDM names (as FLUX.1's ae.safetensors) ---- */

/* Replaces the first `from` in s (len bytes) by `to`; false when the result does not fit. */

/* diffusers -> LDM, by substring, for encoder and decoder alike. */
static const char *const subst[][2] = {
    {"mid_block.resnets.0.", "mid.block_1."},
    {"mid_block.resnets.1.", "mid.block_2."},
    {"mid_block.attentions.0.group_norm.", "mid.attn_1.norm."},
    {"mid_block.attentions.0.to_q.", "mid.attn_1.q."},
    {"mid_block.attentions.0.to_k.", "mid.attn_1.k."},
    {"mid_block.attentions.0.to_v.", "mid.attn_1.v."},
    {"mid_block.attentions.0.to_out.0.", "mid.attn_1.proj_out."},
    {"conv_shortcut.", "nin_shortcut."},
    {"conv_norm_out.", "norm_out."},
};

typedef struct ldm_opts {
  int n_levels;
  bool linear_attn;
} ldm_opts;

/* The rename callback of dt_vae_write_ldm. */
static int to_ldm(void *user, const char *name, char *out, size_t len, int64_t *shape, int *ndim) {
  const ldm_opts *o = user;
  const bool linear_attn = o->linear_attn;
  const int N_LEVELS = o->n_levels;
  if ((size_t)snprintf(out, len, "%s", name) >= len) return -1;
  bool ok = true;
  for (size_t i = 0; i < sizeof subst / sizeof subst[0]; i++) ok &= replace(out, len, subst[i][0], subst[i][1]);
  for (int i = 0; i < N_LEVELS; i++) {
    char from[64], to[64];
    /* the decoder's up blocks count from the other end in LDM */
    snprintf(from, sizeof from, "decoder.up_blocks.%d.resnets.", i);
    snprintf(to, sizeof to, "decoder.up.%d.block.", N_LEVELS - 1 - i);
    ok &= replace(out, len, from, to);
    snprintf(from, sizeof from, "decoder.up_blocks.%d.upsamplers.0.", i);
    snprintf(to, sizeof to, "decoder.up.%d.upsample.", N_LEVELS - 1 - i);
    ok &= replace(out, len, from, to);
    snprintf(from, sizeof from, "encoder.down_blocks.%d.resnets.", i);
    snprintf(to, sizeof to, "encoder.down.%d.block.", i);
    ok &= replace(out, len, from, to);
    snprintf(from, sizeof from, "encoder.down_blocks.%d.downsamplers.0.", i);
    snprintf(to, sizeof to, "encoder.down.%d.downsample.", i);
    ok &= replace(out, len, from, to);
  }
  if (!ok) return -1;
  const bool attn_w = strstr(out, "attn_1.") && !strstr(out, ".norm.") && strstr(out, ".weight");
  if (attn_w && !linear_attn && *ndim == 2) {
    shape[2] = shape[3] = 1;
    *ndim = 4;
  }
  return 0;
}

int dt_vae_write_ldm(const char *src, const char *dst, int n_levels, bool linear_attn) {
  ldm_opts o = {n_levels, linear_attn};
  return dt_st_rename(src, dst, to_ldm, &o);
}

void dt_check_image(const char *ref_file, const char *name, const dit_image *img, const char *label) {
  float *ref;
  int64_t sh[8];
  int nd;
  if (dt_load_f32(ref_file, name, &ref, sh, &nd) != 0) {
    CHECK_MSG(0, "%s: %s has no %s", label, ref_file, name);
    return;
  }
  const size_t n = (size_t)img->width * img->height * 3;
  const bool same = nd == 3 && sh[0] == img->height && sh[1] == img->width && sh[2] == 3;
  CHECK_MSG(same, "%s: image %dx%d, reference of another size", label, img->width, img->height);
  int maxd = same ? dt_max_level_diff(ref, img->rgb, n, NULL) : 0;
  printf("%s: image max difference %d levels\n", label, maxd);
  CHECK_MSG(maxd <= 1, "%s: image differs by %d 8-bit levels", label, maxd);
  free(ref);
}

dit_model *dt_model_open(const char *dir, bool gpu, dit_ctx **ctx) {
  *ctx = NULL;
  dit_ctx_params cp;
  dit_ctx_params_default(&cp);
  CHECK(dit_ctx_create(&cp, ctx) == DIT_OK);
  if (!*ctx) return NULL;
  dit_model_opts mo;
  dit_model_opts_default(&mo);
  mo.device = gpu ? DIT_DEVICE_CUDA : DIT_DEVICE_CPU;
  dit_model *m = NULL;
  CHECK_MSG(dit_model_load(*ctx, dir, &mo, &m) == DIT_OK, "%s: %s", dir, dit_ctx_last_error(*ctx));
  return m;
}
