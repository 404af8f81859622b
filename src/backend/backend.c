/* Backend-generic helpers: which memory a backend uses, weight tables moved into (or
 * created in) backend memory once at load, and a profiling backend that forwards to
 * another one and accumulates per-op wall time (for `ditrun bench`). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "core/splitmix.h"
#include "core/timer.h"
#include "io/safetensors.h"

#define PIECE_ALIGN 256
#define STAGE_BYTES ((size_t)32 << 20)

bool dit_backend_is_host(const dit_backend *be) { return be && be->ops->name && !strcmp(be->ops->name, "cpu"); }

dit_device dit_backend_device(const dit_backend *be) { return dit_backend_is_host(be) ? DIT_DEV_CPU : DIT_DEV_CUDA; }

static size_t align_up(size_t n) { return (n + PIECE_ALIGN - 1) / PIECE_ALIGN * PIECE_ALIGN; }

/* The dtype entry e (bound, host data) is uploaded in (flags: DIT_UPLOAD_*): its own, BF16, or
 * F8_E4M3 for the matrices fp8 compute runs in fp8. */
static dit_dtype upload_dtype(const dit_backend *be, const dit_wentry *e, unsigned flags) {
  const dit_tensor *d = e->dst;
  const bool flt = d->dtype == DIT_F32 || d->dtype == DIT_BF16 || d->dtype == DIT_F16;
  if ((flags & DIT_UPLOAD_FP8_COMPUTE) && be->fp8 && flt && dit_wname_fp8_compute(e->name, d->ndim, d->shape))
    return DIT_F8_E4M3;
  if (((flags & DIT_UPLOAD_F16_AS_BF16) && d->dtype == DIT_F16) ||
      ((flags & DIT_UPLOAD_F32_MATRICES_AS_BF16) && d->dtype == DIT_F32 && d->ndim == 2) ||
      ((flags & DIT_UPLOAD_F32_WEIGHTS_AS_BF16) && d->dtype == DIT_F32 && d->ndim >= 2))
    return DIT_BF16;
  return d->dtype;
}

/* The largest magnitude of n F32, BF16 or F16 values (dtype from); f is a buffer of piece floats. */
static float amax_of(const void *src, dit_dtype from, size_t n, float *f, size_t piece) {
  const size_t es = dit_dtype_size(from);
  float amax = 0.0f;
  for (size_t off = 0; off < n; off += piece) {
    const size_t len = n - off < piece ? n - off : piece;
    dit_convert_to_f32(f, (const char *)src + off * es, from, len);
    for (size_t i = 0; i < len; i++) amax = fabsf(f[i]) > amax ? fabsf(f[i]) : amax;
  }
  return amax;
}

/* The fp8 scale of the group entry i starts (DIT_UPLOAD_FP8_COMPUTE): entries i..*last chained
 * by scale_with_next, all going to fp8 and not uploaded yet, share the per-tensor scale of all
 * their values. */
static dit_status fp8_group_scale(const dit_backend *be, const dit_wtable *t, size_t i, unsigned flags, float *scale,
                                  size_t *last, dit_error *err) {
  *last = i;
  while (*last + 1 < t->n && t->entries[*last].scale_with_next && t->entries[*last + 1].dst->data &&
         upload_dtype(be, &t->entries[*last + 1], flags) == DIT_F8_E4M3)
    ++*last;
  const size_t piece = STAGE_BYTES / 4;
  float *f = malloc(piece * sizeof *f), amax = 0.0f;
  if (!f) return dit_errorf(err, DIT_ERR_NOMEM, "no memory for an fp8 staging buffer");
  for (size_t j = i; j <= *last; j++) {
    const dit_tensor *d = t->entries[j].dst;
    const float a = amax_of(d->data, d->dtype, (size_t)dit_tensor_numel(d), f, piece);
    amax = a > amax ? a : amax;
  }
  free(f);
  *scale = dit_fp8_scale(amax, DIT_F8_E4M3);
  return DIT_OK;
}

/* Uploads n F32, BF16 or F16 values (dtype from) as dtype `to` (BF16, or float8_e4m3 codes of
 * the values over scale; scale 1 for BF16) through staging buffers, piece by piece. */
static dit_status upload_as(dit_backend *be, void *dst, const void *src, dit_dtype from, dit_dtype to, size_t n,
                            float scale, dit_error *err) {
  const size_t piece = STAGE_BYTES / 4 < n ? STAGE_BYTES / 4 : n, es = dit_dtype_size(from), ts = dit_dtype_size(to);
  float *f = malloc((piece ? piece : 1) * sizeof *f);
  void *stage = malloc((piece ? piece : 1) * ts);
  dit_status s = f && stage ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "no memory for the staging buffers");
  for (size_t off = 0; off < n && s == DIT_OK; off += piece) {
    const size_t len = n - off < piece ? n - off : piece;
    dit_convert_to_f32(f, (const char *)src + off * es, from, len);
    for (size_t i = 0; scale != 1.0f && i < len; i++) f[i] /= scale;
    dit_convert_from_f32(stage, f, to, len);
    s = be->ops->upload(be, (char *)dst + off * ts, stage, len * ts, err);
    if (s == DIT_OK) s = be->ops->sync(be, err); /* the stage is reused */
  }
  free(f), free(stage);
  return s;
}

dit_status dit_backend_upload_wtable(dit_backend *be, const dit_wtable *t, void **block, dit_error *err) {
  return dit_backend_upload_wtable_as(be, t, 0, block, err);
}

dit_status dit_backend_upload_wtable_as(dit_backend *be, const dit_wtable *t, unsigned flags, void **block,
                                        dit_error *err) {
  *block = NULL;
  size_t total = 0;
  for (size_t i = 0; i < t->n; i++) {
    const dit_tensor *d = t->entries[i].dst;
    const dit_dtype to = upload_dtype(be, &t->entries[i], flags);
    if (d->data) total += align_up(to == d->dtype ? dit_tensor_nbytes(d) : (size_t)dit_tensor_numel(d) * dit_dtype_size(to));
  }
  if (!total) return DIT_OK;
  void *blk = NULL;
  DIT_TRY(be->ops->alloc(be, total, &blk, err));
  size_t off = 0, group_last = 0;
  float scale = 0.0f; /* an fp8 group's (fp8_group_scale), through group_last */
  bool in_group = false;
  const dit_device dev = dit_backend_device(be);
  for (size_t i = 0; i < t->n; i++) {
    dit_tensor *d = t->entries[i].dst;
    if (!d->data) continue;
    const dit_dtype to = upload_dtype(be, &t->entries[i], flags);
    const size_t n = (size_t)dit_tensor_numel(d), nb = to == d->dtype ? dit_tensor_nbytes(d) : n * dit_dtype_size(to);
    dit_status s = DIT_OK;
    if (to == DIT_F8_E4M3 && d->dtype != to && (!in_group || i > group_last))
      s = fp8_group_scale(be, t, i, flags, &scale, &group_last, err), in_group = true;
    if (s == DIT_OK)
      s = to == d->dtype ? be->ops->upload(be, (char *)blk + off, d->data, nb, err)
                         : upload_as(be, (char *)blk + off, d->data, d->dtype, to, n,
                                     to == DIT_F8_E4M3 ? scale : 1.0f, err);
    if (s != DIT_OK) {
      be->ops->free(be, blk);
      dit_error_prefix(err, "uploading weight %s", t->entries[i].name);
      return s;
    }
    if (to == DIT_F8_E4M3 && d->dtype != to) d->scale = scale;
    d->dtype = to;
    d->data = (char *)blk + off;
    d->device = dev;
    off += align_up(nb);
  }
  /* the sources may be unmapped after this returns */
  dit_status s = be->ops->sync(be, err);
  if (s != DIT_OK) {
    be->ops->free(be, blk);
    return s;
  }
  *block = blk;
  return DIT_OK;
}

dit_status dit_backend_check_act_dtype(const dit_backend *be, dit_dtype dt, const char *what, dit_error *err) {
  if (dt != DIT_F32 && dt != DIT_BF16)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: activation dtype %s (F32 or BF16)", what, dit_dtype_name(dt));
  if (dt != DIT_F32 && dit_backend_is_host(be))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: the CPU backend computes in F32 (activation dtype %s)", what,
                      dit_dtype_name(dt));
  return DIT_OK;
}

/* ---- random weights ---- */

/* The value of element j of an entry (key: seed and entry index): center + amp * u, u
 * uniform in [-1, 1). */
static inline float random_value(uint64_t key, int64_t j, float center, float amp) {
  uint64_t h = dit_splitmix64(key ^ (uint64_t)j * 0xD1B54A32D192ED03ull);
  float u = (float)((double)(h >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
  return center + amp * u;
}

/* Elements [first, first + n) of an entry into dst (F32, BF16, F16, or fp8 codes of the
 * values divided by the entry's scale: amp maps to the type's largest value). */
static void fill_random(void *dst, dit_dtype dt, float scale, int64_t first, int64_t n, uint64_t key, float center,
                        float amp) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; j++) {
    float v = random_value(key, first + j, center, amp);
    if (dt == DIT_F32) ((float *)dst)[j] = v;
    else if (dt == DIT_BF16) ((uint16_t *)dst)[j] = dit_f32_to_bf16(v);
    else if (dt == DIT_F16) ((uint16_t *)dst)[j] = dit_f32_to_f16(v);
    else if (dt == DIT_F8_E4M3) ((uint8_t *)dst)[j] = dit_f32_to_e4m3(v / scale);
    else ((uint8_t *)dst)[j] = dit_f32_to_e5m2(v / scale);
  }
}

/* Rows [r0, r0 + nr) of K elements of an entry, quantized to block type dt (the same values
 * as fill_random's, then ggml's reference quantization), into dst. False when out of memory. */
static bool fill_random_blocks(void *dst, dit_dtype dt, int64_t K, int64_t r0, int64_t nr, uint64_t key, float center,
                               float amp) {
  uint64_t rb = 0;
  dit_dtype_row_bytes(dt, (uint64_t)K, &rb);
  const int nt = omp_get_max_threads();
  float *rows = malloc((size_t)nt * (size_t)K * sizeof *rows);
  if (!rows) return false;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t r = 0; r < nr; r++) {
    float *row = rows + (size_t)omp_get_thread_num() * (size_t)K;
    for (int64_t k = 0; k < K; k++) row[k] = random_value(key, (r0 + r) * K + k, center, amp);
    dit_quant_row(dt, row, (char *)dst + (uint64_t)r * rb, K);
  }
  free(rows);
  return true;
}

static void init_law(const dit_wentry *e, float *center, float *amp) {
  *center = 0.0f;
  if (e->ndim >= 2) *amp = 1.0f / sqrtf((float)(e->shape[e->ndim - 1] > 0 ? e->shape[e->ndim - 1] : 1));
  else if (strlen(e->name) >= 6 && !strcmp(e->name + strlen(e->name) - 6, "weight")) *center = 1.0f, *amp = 0.05f;
  else *amp = 0.02f;
}

/* An entry's dtype for random weights of dt: a block type or fp8 only for 2-D "*.weight"
 * matrices (whose rows are whole blocks), BF16 for the rest (as ditrun quantize keeps them
 * from a bf16 folder, and scaled fp8 files keep norms and biases); with DIT_UPLOAD_FP8_COMPUTE
 * on an fp8 backend, the matrices fp8 compute names are e4m3 whatever dt is (a float type). */
static dit_dtype entry_dtype(const dit_backend *be, const dit_wentry *e, dit_dtype dt, unsigned flags) {
  if ((flags & DIT_UPLOAD_FP8_COMPUTE) && be->fp8 && !dit_dtype_is_quant(dt) &&
      dit_wname_fp8_compute(e->name, e->ndim, e->shape))
    return DIT_F8_E4M3;
  if (!dit_dtype_is_quant(dt)) return dt;
  return dit_wname_quant_matrix(e->name, e->ndim, e->shape, dt) ? dt : DIT_BF16;
}

/* Fills entry d (dtype set) with its random values on a host or, through stage, a device. */
static dit_status fill_entry(dit_backend *be, dit_tensor *d, void *stage, uint64_t key, float center, float amp,
                             dit_error *err) {
  const bool block = dit_dtype_is_block(d->dtype);
  const int64_t n = dit_tensor_numel(d), K = block ? d->shape[1] : 1, units = block ? n / K : n;
  uint64_t ub = block ? 0 : dit_dtype_size(d->dtype); /* bytes per unit: a row, or an element */
  if (block) dit_dtype_row_bytes(d->dtype, (uint64_t)K, &ub);
  const bool host = stage == NULL;
  if (d->dtype == DIT_F8_E4M3 || d->dtype == DIT_F8_E5M2) /* a per-tensor scale, as scaled fp8 files have */
    d->scale = dit_fp8_scale(fabsf(center) + amp, d->dtype);
  const int64_t chunk = host ? units : (int64_t)(STAGE_BYTES / ub) > 0 ? (int64_t)(STAGE_BYTES / ub) : 1;
  for (int64_t j = 0; j < units; j += chunk) {
    int64_t m = units - j < chunk ? units - j : chunk;
    void *dst = host ? (char *)d->data + (uint64_t)j * ub : stage;
    if (!block) fill_random(dst, d->dtype, dit_tensor_scale(d), j, m, key, center, amp);
    else if (!fill_random_blocks(dst, d->dtype, K, j, m, key, center, amp))
      return dit_errorf(err, DIT_ERR_NOMEM, "random weights: out of memory for a row of %lld", (long long)K);
    if (host) continue;
    DIT_TRY(be->ops->upload(be, (char *)d->data + (uint64_t)j * ub, stage, (size_t)((uint64_t)m * ub), err));
    DIT_TRY(be->ops->sync(be, err)); /* stage is reused */
  }
  return DIT_OK;
}

dit_status dit_backend_random_wtable(dit_backend *be, const dit_wtable *t, dit_dtype dt, unsigned flags,
                                     uint64_t seed, void **block, dit_error *err) {
  *block = NULL;
  if (dt != DIT_F32 && dt != DIT_BF16 && dt != DIT_F16 && !dit_dtype_is_quant(dt))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "random weights: dtype %s (F32, BF16, F16, fp8 or a block type)",
                      dit_dtype_name(dt));
  if (t->status != DIT_OK) return dit_errorf(err, t->status, "%s", t->err.msg);
  const dit_device dev = dit_backend_device(be);
  size_t total = 0;
  for (size_t i = 0; i < t->n; i++) {
    *t->entries[i].dst = dit_tensor_make(entry_dtype(be, &t->entries[i], dt, flags), NULL, t->entries[i].ndim,
                                         t->entries[i].shape);
    total += align_up(dit_tensor_nbytes(t->entries[i].dst));
  }
  void *blk = NULL, *stage = NULL;
  DIT_TRY(be->ops->alloc(be, total ? total : PIECE_ALIGN, &blk, err));
  if (!dit_backend_is_host(be) && !(stage = malloc(STAGE_BYTES))) {
    be->ops->free(be, blk);
    return dit_errorf(err, DIT_ERR_NOMEM, "random weights: no memory for a %zu-byte staging buffer", STAGE_BYTES);
  }
  size_t off = 0;
  dit_status s = DIT_OK;
  for (size_t i = 0; i < t->n && s == DIT_OK; i++) {
    dit_tensor *d = t->entries[i].dst;
    d->data = (char *)blk + off;
    d->device = dev;
    float center, amp;
    init_law(&t->entries[i], &center, &amp);
    const uint64_t key = dit_splitmix64(seed ^ dit_splitmix64((uint64_t)i + 1));
    s = fill_entry(be, d, stage, key, center, amp, err);
    off += align_up(dit_tensor_nbytes(d));
  }
  free(stage);
  if (s != DIT_OK) {
    be->ops->free(be, blk);
    return s;
  }
  *block = blk;
  return DIT_OK;
}

void dit_backend_trim(dit_backend *be) {
  if (be && be->ops->trim) be->ops->trim(be);
}

void dit_backend_free(dit_backend *be) {
  if (!be) return;
  if (be->ops->destroy) be->ops->destroy(be); /* the backend's own state: pools, streams, handles */
  free(be);
}

/* ---- the backend registry: one row per kind of backend ---- */

static dit_status cpu_create(int device, int n_threads, dit_backend_precision precision, const dit_run_opts *opts,
                             dit_backend **out, dit_error *err) {
  (void)device, (void)opts;
  if (precision.gpu != DIT_GPU_PRECISION_BF16)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "the CPU has no fp8 compute: fp8 precision needs a GPU (--device "
                      "cuda); on the CPU, --cpu-precision bf16 is the fast choice");
  DIT_TRY(dit_backend_cpu_create(n_threads, out, err));
  dit_status s = dit_backend_cpu_set_precision(*out, precision.cpu, err);
  if (s != DIT_OK) {
    dit_backend_free(*out);
    *out = NULL;
  }
  return s;
}

/* Physical memory and what the kernel says is available (Linux /proc/meminfo), in bytes. */
static dit_status cpu_mem_info(int device, size_t *free_b, size_t *total_b, dit_error *err) {
  (void)device;
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "cpu memory: /proc/meminfo is not readable");
  char line[256];
  unsigned long long kb, tot = 0, avail = 0;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) tot = kb;
    else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = kb;
  }
  fclose(f);
  if (!tot) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "cpu memory: no MemTotal in /proc/meminfo");
  *total_b = (size_t)(tot * 1024ull);
  *free_b = (size_t)(avail * 1024ull);
  return DIT_OK;
}

static int cpu_device_count(void) { return 1; }

#ifdef DIT_HAVE_CUDA
static dit_status cuda_create(int device, int n_threads, dit_backend_precision precision, const dit_run_opts *opts,
                              dit_backend **out, dit_error *err) {
  (void)n_threads;
  return dit_backend_cuda_create(device, precision.gpu, opts, out, err);
}
#define CUDA_ROW {DIT_DEVICE_CUDA, "cuda", false, dit_cuda_device_count, cuda_create, dit_cuda_mem_info},
#else
#define CUDA_ROW
#endif

static const dit_backend_kind_info backend_kinds[] = {
    {DIT_DEVICE_CPU, "cpu", true, cpu_device_count, cpu_create, cpu_mem_info},
    CUDA_ROW
};

size_t dit_backend_kind_count(void) { return sizeof backend_kinds / sizeof *backend_kinds; }

const dit_backend_kind_info *dit_backend_kind_at(size_t i) {
  return i < dit_backend_kind_count() ? &backend_kinds[i] : NULL;
}

const dit_backend_kind_info *dit_backend_kind_get(dit_device_kind kind) {
  for (size_t i = 0; i < dit_backend_kind_count(); i++)
    if (backend_kinds[i].kind == kind) return &backend_kinds[i];
  return NULL;
}

dit_status dit_backend_create(dit_device_kind kind, int device, int n_threads, dit_backend_precision precision,
                              const dit_run_opts *opts, dit_backend **out, dit_error *err) {
  *out = NULL;
  const dit_backend_kind_info *k = dit_backend_kind_get(kind);
  if (!k)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "device %s is not available in this build%s",
                      kind == DIT_DEVICE_CUDA ? "cuda" : "?", kind == DIT_DEVICE_CUDA ? " (built without CUDA)" : "");
  return k->create(device, n_threads, precision, opts, out, err);
}

dit_status dit_backend_mem_info(dit_device_kind kind, int device, size_t *free_b, size_t *total_b, dit_error *err) {
  *free_b = *total_b = 0;
  const dit_backend_kind_info *k = dit_backend_kind_get(kind);
  if (!k) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "memory info: device kind %d is not in this build", (int)kind);
  return k->mem_info(device, free_b, total_b, err);
}

size_t dit_backend_device_used(dit_device_kind kind, int device) {
  size_t fr = 0, tot = 0;
  dit_error e = {0};
  if (kind == DIT_DEVICE_CPU || dit_backend_mem_info(kind, device, &fr, &tot, &e) != DIT_OK) return 0;
  return tot - fr;
}

bool dit_backend_supports_op(const dit_backend *be, int op) {
  int i = 0;
#define SUPPORTS(name, params, args) \
  if (i++ == op) return be->ops->name != NULL;
  DIT_BACKEND_OPS(SUPPORTS)
#undef SUPPORTS
  return false;
}

dit_status dit_backend_fit_slots(dit_backend *be, const size_t *need, int n, void **act, size_t *act_bytes,
                                 char **slot, dit_error *err) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += (need[i] + 255) & ~(size_t)255;
  if (total > *act_bytes) {
    if (*act) be->ops->free(be, *act);
    *act = NULL, *act_bytes = 0;
    DIT_TRY(be->ops->alloc(be, total, act, err));
    *act_bytes = total;
  }
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    slot[i] = (char *)*act + off;
    off += (need[i] + 255) & ~(size_t)255;
  }
  return DIT_OK;
}
