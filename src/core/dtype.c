/* dtype names, sizes and the scalar conversions (see dtype.h). The bulk converters are
 * scalar loops; hot paths convert per tile in the backends. */
#include "core/dtype.h"

#include <math.h>

#include "core/tensor.h"

static const struct {
  const char *name;
  size_t size, block_elems, block_bytes; /* block fields 0 for element types */
} dtype_info[DIT_DTYPE_COUNT] = {
    [DIT_F32] = {"F32", 4},     [DIT_BF16] = {"BF16", 2},       [DIT_F16] = {"F16", 2},
    [DIT_F8_E4M3] = {"F8_E4M3", 1}, [DIT_F8_E5M2] = {"F8_E5M2", 1}, [DIT_F64] = {"F64", 8},
    [DIT_I8] = {"I8", 1},       [DIT_I16] = {"I16", 2},         [DIT_I32] = {"I32", 4},
    [DIT_I64] = {"I64", 8},     [DIT_U8] = {"U8", 1},           [DIT_U16] = {"U16", 2},
    [DIT_U32] = {"U32", 4},     [DIT_U64] = {"U64", 8},         [DIT_BOOL] = {"BOOL", 1},
    /* ggml's block layouts: 32-element blocks with one fp16 scale (and min), 256-element
     * super-blocks for the K types. */
    [DIT_Q4_0] = {"Q4_0", 0, 32, 18},   [DIT_Q4_1] = {"Q4_1", 0, 32, 20},   [DIT_Q5_0] = {"Q5_0", 0, 32, 22},
    [DIT_Q5_1] = {"Q5_1", 0, 32, 24},   [DIT_Q8_0] = {"Q8_0", 0, 32, 34},   [DIT_Q2_K] = {"Q2_K", 0, 256, 84},
    [DIT_Q3_K] = {"Q3_K", 0, 256, 110}, [DIT_Q4_K] = {"Q4_K", 0, 256, 144}, [DIT_Q5_K] = {"Q5_K", 0, 256, 176},
    [DIT_Q6_K] = {"Q6_K", 0, 256, 210},
};

const char *dit_dtype_name(dit_dtype t) {
  return (unsigned)t < DIT_DTYPE_COUNT ? dtype_info[t].name : "?";
}

size_t dit_dtype_size(dit_dtype t) { return (unsigned)t < DIT_DTYPE_COUNT ? dtype_info[t].size : 0; }

bool dit_dtype_is_block(dit_dtype t) { return (unsigned)t < DIT_DTYPE_COUNT && dtype_info[t].block_elems > 0; }

bool dit_dtype_is_quant(dit_dtype t) { return dit_dtype_is_block(t) || t == DIT_F8_E4M3 || t == DIT_F8_E5M2; }

size_t dit_dtype_block_elems(dit_dtype t) {
  if ((unsigned)t >= DIT_DTYPE_COUNT) return 0;
  return dtype_info[t].block_elems ? dtype_info[t].block_elems : 1;
}

size_t dit_dtype_block_bytes(dit_dtype t) {
  if ((unsigned)t >= DIT_DTYPE_COUNT) return 0;
  return dtype_info[t].block_elems ? dtype_info[t].block_bytes : dtype_info[t].size;
}

bool dit_dtype_row_bytes(dit_dtype t, uint64_t n, uint64_t *out) {
  uint64_t be = dit_dtype_block_elems(t);
  if (!be || n % be) return false;
  return !dit_mul_overflow_u64(n / be, dit_dtype_block_bytes(t), out);
}

bool dit_dtype_from_name(const char *name, dit_dtype *out) {
  for (int i = 0; i < DIT_DTYPE_COUNT; i++) {
    if (dtype_info[i].block_elems) continue; /* safetensors has no block types */
    if (strcmp(name, dtype_info[i].name) == 0) {
      *out = (dit_dtype)i;
      return true;
    }
  }
  return false;
}

bool dit_dtype_is_float(dit_dtype t) {
  return t == DIT_F32 || t == DIT_BF16 || t == DIT_F16 || t == DIT_F8_E4M3 || t == DIT_F8_E5M2 ||
         t == DIT_F64;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

float dit_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    float v = ldexpf((float)man, -24);
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* Generic RNE narrowing of a finite float to a format with `mbits` mantissa bits,
 * exponent bias `bias` and largest finite magnitude `maxv`. Returns the magnitude code
 * (exponent and mantissa fields), or -1 when |f| rounds beyond maxv. */
static int32_t narrow_code(float a, int mbits, int bias, float maxv) {
  if (a == 0.0f) return 0;
  int e;
  frexpf(a, &e);             /* a = m * 2^e, m in [0.5, 1) */
  int exp_unbiased = e - 1;  /* a = 1.x * 2^exp_unbiased */
  int min_normal = 1 - bias;
  int shift = (exp_unbiased < min_normal ? min_normal : exp_unbiased) - mbits;
  float q = ldexpf(a, -shift);           /* exact: scaling by a power of two */
  float r = nearbyintf(q);               /* current rounding mode: ties to even */
  if (ldexpf(r, shift) > maxv) return -1;
  int32_t units = (int32_t)r;            /* value = units * 2^shift */
  if (units < (1 << mbits)) return units; /* subnormal (or rounds up to min normal) */
  int ex = shift + mbits;
  if (units >= (2 << mbits)) { units >>= 1; ex++; }
  return ((ex + bias) << mbits) | (units - (1 << mbits));
}

uint16_t dit_f32_to_f16(float f) {
  uint16_t sign = (f32_bits(f) >> 16) & 0x8000;
  if (isnan(f)) return sign | 0x7e00;
  float a = fabsf(f);
  if (isinf(a)) return sign | 0x7c00;
  int32_t c = narrow_code(a, 10, 15, 65504.0f);
  if (c < 0) return sign | 0x7c00;
  return sign | (uint16_t)c;
}

float dit_e4m3_to_f32(uint8_t v) {
  float s = (v & 0x80) ? -1.0f : 1.0f;
  int exp = (v >> 3) & 0xf, man = v & 7;
  if (exp == 0xf && man == 7) return NAN;
  if (exp == 0) return s * ldexpf((float)man, -9);
  return s * ldexpf((float)(8 + man), exp - 10);
}

uint8_t dit_f32_to_e4m3(float f) {
  uint8_t sign = (f32_bits(f) >> 24) & 0x80;
  if (isnan(f) || isinf(f)) return sign | 0x7f;
  int32_t c = narrow_code(fabsf(f), 3, 7, 448.0f);
  if (c < 0) return sign | 0x7f;
  return sign | (uint8_t)c;
}

float dit_e5m2_to_f32(uint8_t v) { return dit_f16_to_f32((uint16_t)v << 8); }

uint8_t dit_f32_to_e5m2(float f) {
  uint8_t sign = (f32_bits(f) >> 24) & 0x80;
  if (isnan(f)) return sign | 0x7f;
  float a = fabsf(f);
  if (isinf(a)) return sign | 0x7c;
  int32_t c = narrow_code(a, 2, 15, 57344.0f);
  if (c < 0) return sign | 0x7c;
  return sign | (uint8_t)c;
}

void dit_convert_to_f32(float *dst, const void *src, dit_dtype from, size_t n) {
  const unsigned char *p = src;
  for (size_t i = 0; i < n; i++) {
    float v = 0;
    switch (from) {
      case DIT_F32: memcpy(&v, p + 4 * i, 4); break;
      case DIT_BF16: { uint16_t h; memcpy(&h, p + 2 * i, 2); v = dit_bf16_to_f32(h); break; }
      case DIT_F16: { uint16_t h; memcpy(&h, p + 2 * i, 2); v = dit_f16_to_f32(h); break; }
      case DIT_F8_E4M3: v = dit_e4m3_to_f32(p[i]); break;
      case DIT_F8_E5M2: v = dit_e5m2_to_f32(p[i]); break;
      case DIT_F64: { double d; memcpy(&d, p + 8 * i, 8); v = (float)d; break; }
      case DIT_I8: v = (float)(int8_t)p[i]; break;
      case DIT_I16: { int16_t x; memcpy(&x, p + 2 * i, 2); v = (float)x; break; }
      case DIT_I32: { int32_t x; memcpy(&x, p + 4 * i, 4); v = (float)x; break; }
      case DIT_I64: { int64_t x; memcpy(&x, p + 8 * i, 8); v = (float)x; break; }
      case DIT_U8: v = (float)p[i]; break;
      case DIT_U16: { uint16_t x; memcpy(&x, p + 2 * i, 2); v = (float)x; break; }
      case DIT_U32: { uint32_t x; memcpy(&x, p + 4 * i, 4); v = (float)x; break; }
      case DIT_U64: { uint64_t x; memcpy(&x, p + 8 * i, 8); v = (float)x; break; }
      case DIT_BOOL: v = p[i] ? 1.0f : 0.0f; break;
      default: break;
    }
    dst[i] = v;
  }
}

bool dit_convert_from_f32(void *dst, const float *src, dit_dtype to, size_t n) {
  unsigned char *p = dst;
  switch (to) {
    case DIT_F32: memmove(dst, src, n * 4); return true;
    case DIT_BF16:
      for (size_t i = 0; i < n; i++) { uint16_t h = dit_f32_to_bf16(src[i]); memcpy(p + 2 * i, &h, 2); }
      return true;
    case DIT_F16:
      for (size_t i = 0; i < n; i++) { uint16_t h = dit_f32_to_f16(src[i]); memcpy(p + 2 * i, &h, 2); }
      return true;
    case DIT_F8_E4M3: for (size_t i = 0; i < n; i++) p[i] = dit_f32_to_e4m3(src[i]); return true;
    case DIT_F8_E5M2: for (size_t i = 0; i < n; i++) p[i] = dit_f32_to_e5m2(src[i]); return true;
    case DIT_F64:
      for (size_t i = 0; i < n; i++) { double d = src[i]; memcpy(p + 8 * i, &d, 8); }
      return true;
    default: return false;
  }
}
