/* The CPU backend: its ops table, host "device" memory, creation (thread count and
 * AVX-512 detection) and the argument checks shared by the op files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include "backend/cpu/cpu_internal.h"
#include "core/cpus.h"

/* Under AddressSanitizer every buffer is a heap block of its exact size, so overruns are
 * caught and LeakSanitizer (which does not follow mappings) still sees leaks. */
#if defined(__SANITIZE_ADDRESS__)
#define CPU_HEAP_ONLY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CPU_HEAP_ONLY 1
#endif
#endif
#ifndef CPU_HEAP_ONLY
#define CPU_HEAP_ONLY 0
#endif

/* Buffers of at least this many bytes (tensors, activation arenas, weight copies) are mapped
 * from the system and unmapped when freed, not taken from the C heap: their pages leave the
 * resident set at once, and whether a buffer that grows by a few bytes finds room where the last
 * one was (glibc keeps a freed block resident unless it borders the heap's top) no longer depends
 * on how earlier frees happened to fragment the heap: the resident peak is what the plan says. */
#define CPU_MAP_MIN ((size_t)1 << 20)

static void *map_bytes(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static dit_status cpu_alloc(dit_backend *be, size_t bytes, void **out, dit_error *err) {
  size_t n = (bytes + 63) & ~(size_t)63;
  if (n < bytes) return dit_errorf(err, DIT_ERR_NOMEM, "cpu alloc: %zu bytes overflows", bytes);
  cpu_mapped *m = &((cpu_impl *)be->impl)->mapped;
  const bool map = !CPU_HEAP_ONLY && n >= CPU_MAP_MIN;
  if (map && m->n == m->cap) {
    const size_t cap = m->cap ? 2 * m->cap : 64;
    cpu_mapping *at = realloc(m->at, cap * sizeof *at);
    if (!at) return dit_errorf(err, DIT_ERR_NOMEM, "cpu alloc: out of memory for the buffer table");
    m->at = at, m->cap = cap;
  }
  void *p = map ? map_bytes(n) : aligned_alloc(64, n ? n : 64);
  if (!p) return dit_errorf(err, DIT_ERR_NOMEM, "cpu alloc: out of memory for %zu bytes", bytes);
  if (map) m->at[m->n++] = (cpu_mapping){p, n};
  *out = p;
  return DIT_OK;
}

static void cpu_free(dit_backend *be, void *p) {
  if (!p) return;
  cpu_mapped *m = &((cpu_impl *)be->impl)->mapped;
  for (size_t i = m->n; i-- > 0;)
    if (m->at[i].addr == p) {
      munmap(p, m->at[i].bytes);
      m->at[i] = m->at[--m->n];
      return;
    }
  free(p);
}

static dit_status cpu_upload(dit_backend *be, void *dst, const void *src, size_t bytes, dit_error *err) {
  if (bytes && (!dst || !src)) return dit_errorf(err, DIT_ERR_INVALID_ARG, "cpu upload: NULL pointer");
  if (bytes) memmove(dst, src, bytes);
  return DIT_OK;
}

static dit_status cpu_sync(dit_backend *be, dit_error *err) { return DIT_OK; }

static void scratch_release(cpu_scratch *sc) {
  if (sc->map) munmap(sc->map, sc->map_bytes);
  for (int i = 0; i < CPU_SCRATCH_PARTS; i++) free(sc->block[i]);
  memset(sc, 0, sizeof *sc);
}

dit_status cpu_scratch_take(const dit_backend *be, int n, const size_t *bytes, void **parts, const char *op,
                            dit_error *err) {
  cpu_scratch *sc = &((cpu_impl *)be->impl)->scratch;
  if (n < 1 || n > CPU_SCRATCH_PARTS)
    return dit_errorf(err, DIT_ERR_INTERNAL, "%s: %d scratch parts (1..%d)", op, n, CPU_SCRATCH_PARTS);
  size_t off[CPU_SCRATCH_PARTS], total = 0;
  for (int i = 0; i < n; i++) {
    const size_t r = (bytes[i] + 63) & ~(size_t)63;
    if (r < bytes[i] || total + r < total)
      return dit_errorf(err, DIT_ERR_NOMEM, "%s: a working buffer of %zu bytes overflows", op, bytes[i]);
    off[i] = total, total += r;
  }
#if CPU_HEAP_ONLY
  for (int i = 0; i < CPU_SCRATCH_PARTS; i++) free(sc->block[i]), sc->block[i] = NULL;
  for (int i = 0; i < n; i++) {
    parts[i] = NULL;
    if (!bytes[i]) continue;
    if (!(sc->block[i] = parts[i] = aligned_alloc(64, (bytes[i] + 63) & ~(size_t)63)))
      return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory for %zu bytes of working buffers", op, total);
  }
  return DIT_OK;
#else
  if (total > sc->map_bytes) {
    /* a new mapping a quarter larger than asked (untouched pages cost nothing), so a slowly
     * growing need does not remap at every call */
    size_t want = total + total / 4, page = (size_t)sysconf(_SC_PAGESIZE);
    want = (want + page - 1) / page * page;
    scratch_release(sc);
    void *m = map_bytes(want);
    if (!m)
      return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory for %zu bytes of working buffers", op, total);
    sc->map = m, sc->map_bytes = want;
  }
  for (int i = 0; i < n; i++) parts[i] = bytes[i] ? (char *)sc->map + off[i] : NULL;
  return DIT_OK;
#endif
}

static void cpu_trim(dit_backend *be) { scratch_release(&((cpu_impl *)be->impl)->scratch); }

static void cpu_destroy(dit_backend *be) {
  cpu_impl *im = be->impl;
  cpu_trim(be);
  for (size_t i = 0; i < im->mapped.n; i++) munmap(im->mapped.at[i].addr, im->mapped.at[i].bytes);
  free(im->mapped.at);
  free(be->impl);
  be->impl = NULL;
}

/* Every op of DIT_BACKEND_OPS is cpu_<op>. The fused ops are bit-identical to their unfused
 * sequences (backend_fused.c), one pass per row (cpu_fused.c), so CPU numbers stay put; the
 * CPU has no fused residual_layer_norm, residual_rms_mod or rms_norm_rope_row: their dit_op_ helpers run
 * the sequence. */
#define cpu_residual_layer_norm NULL
#define cpu_residual_rms_mod NULL
#define cpu_rms_norm_rope_row NULL
static const dit_backend_ops cpu_ops = {
    .name = "cpu",
    .trim = cpu_trim,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_upload,
    .sync = cpu_sync,
#define CPU_OP(name, params, args) .name = cpu_##name,
    DIT_BACKEND_OPS(CPU_OP)
#undef CPU_OP
};

/* avx512f/bw/vl (the fp32 kernels); *bf16: avx512bf16 too. */
static bool detect_avx512(bool *bf16) {
  *bf16 = false;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool f = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl");
  *bf16 = f && __builtin_cpu_supports("avx512bf16");
  return f;
#else
  return false;
#endif
}

static bool detect_avx2(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  unsigned a, b, c, d; /* F16C: CPUID.1:ECX bit 29 (not every compiler's __builtin_cpu_supports knows it) */
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
  return false;
#endif
}

#if defined(__aarch64__)
#define ISA_NAMES "portable, neon"
#else
#define ISA_NAMES "portable, avx2, avx512, avx512bf16"
#endif

/* The kernel paths the CPU has, narrowed by DIT_CPU_ISA (portable; x86-64: avx2, avx512 (the
 * fp32 AVX-512 kernels without BF16), avx512bf16; AArch64: neon): a path the CPU lacks, or
 * one this build does not have, is refused with a message. */
static dit_status choose_isa(cpu_impl *im, dit_error *err) {
  im->have_avx512 = detect_avx512(&im->have_bf16);
  im->have_avx2 = detect_avx2();
#if defined(__aarch64__)
  im->have_neon = true; /* Advanced SIMD is part of the AArch64 base architecture */
#endif
  const char *want = getenv("DIT_CPU_ISA");
  if (!want || !*want) return DIT_OK;
  if (!strcmp(want, "portable")) {
    im->have_avx512 = im->have_bf16 = im->have_avx2 = im->have_neon = false;
    return DIT_OK;
  }
  if (!strcmp(want, "neon")) {
    if (!im->have_neon) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "DIT_CPU_ISA=neon: not a path of this build (%s)",
                                          ISA_NAMES);
    return DIT_OK;
  }
  if (!strcmp(want, "avx2")) {
    if (!im->have_avx2) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "DIT_CPU_ISA=avx2: this CPU lacks avx2, fma or f16c");
    im->have_avx512 = im->have_bf16 = false;
    return DIT_OK;
  }
  if (!strcmp(want, "avx512")) {
    if (!im->have_avx512) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "DIT_CPU_ISA=avx512: this CPU lacks avx512f/bw/vl");
    im->have_bf16 = false;
    return DIT_OK;
  }
  if (!strcmp(want, "avx512bf16")) {
    if (!im->have_bf16)
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "DIT_CPU_ISA=avx512bf16: this CPU lacks avx512f/bw/vl/bf16");
    return DIT_OK;
  }
  return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                    "DIT_CPU_ISA=%s: not a kernel path of this build (%s)", want, ISA_NAMES);
}

const char *dit_cpu_isa_names(void) { return ISA_NAMES; }

const char *dit_cpu_isa_name(const dit_backend *be) {
  const cpu_impl *im = (const cpu_impl *)be->impl;
  if (!im->use_simd) return "portable";
  if (im->have_neon) return "neon";
  return im->have_avx512 ? (im->have_bf16 ? "avx512bf16" : "avx512") : im->have_avx2 ? "avx2" : "portable";
}

dit_status dit_backend_cpu_create(int n_threads, dit_backend **out, dit_error *err) {
  *out = NULL;
  if (n_threads <= 0) n_threads = dit_cpu_count();
  dit_backend *be = calloc(1, sizeof *be);
  cpu_impl *im = calloc(1, sizeof *im);
  if (!be || !im) {
    free(be);
    free(im);
    return dit_errorf(err, DIT_ERR_NOMEM, "cpu backend: out of memory");
  }
  dit_status s = choose_isa(im, err);
  if (s != DIT_OK) {
    free(be);
    free(im);
    return s;
  }
  im->use_simd = true;
  be->ops = &cpu_ops;
  be->n_threads = n_threads;
  be->impl = im;
  *out = be;
  return DIT_OK;
}

bool dit_cpu_set_simd(dit_backend *be, bool on) {
  cpu_impl *im = (cpu_impl *)be->impl;
  im->use_simd = on;
  return (im->have_avx512 || im->have_avx2 || im->have_neon) && on;
}

dit_status dit_backend_cpu_set_precision(dit_backend *be, dit_cpu_precision p, dit_error *err) {
  if (!be || be->ops != &cpu_ops)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "cpu precision: not a CPU backend");
  if (p != DIT_CPU_PRECISION_FP32 && p != DIT_CPU_PRECISION_BF16)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "cpu precision: unknown value %d (fp32 or bf16)", (int)p);
  ((cpu_impl *)be->impl)->precision = p;
  return DIT_OK;
}

void cpu_ld_row(float *dst, const void *p, dit_dtype t, int64_t off, int64_t n) {
  if (t == DIT_F32) {
    memcpy(dst, (const float *)p + off, (size_t)n * sizeof(float));
  } else if (t == DIT_BF16) {
    const uint16_t *s = (const uint16_t *)p + off;
    for (int64_t i = 0; i < n; i++) dst[i] = dit_bf16_to_f32(s[i]);
  } else {
    const uint16_t *s = (const uint16_t *)p + off;
    for (int64_t i = 0; i < n; i++) dst[i] = dit_f16_to_f32(s[i]);
  }
}

dit_status cpu_check_strided4(const char *op, const char *name, const dit_tensor *t, dit_error *err) {
  DIT_TRY(dit_check_placed(op, name, t, DIT_DEV_CPU, err));
  if (t->dtype != DIT_F32 || t->ndim != 4)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s must be a 4-D F32 tensor (got %s, %d dims)", op, name,
                      dit_dtype_name(t->dtype), t->ndim);
  if (t->stride[3] != 1 && t->shape[3] > 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s must have unit stride on its last dim", op, name);
  for (int i = 0; i < 3; i++)
    if (t->stride[i] < 0) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: %s has a negative stride", op, name);
  return DIT_OK;
}

