/* Element types and exact conversions between them. Narrowing conversions round to
 * nearest, ties to even, like PyTorch's casts; NaN stays NaN. */
#ifndef DIT_CORE_DTYPE_H
#define DIT_CORE_DTYPE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ditrun.h"

/* Parses a safetensors dtype name ("F32", "BF16", ...); returns false if unknown (the
 * block types are not safetensors dtypes). */
bool dit_dtype_from_name(const char *name, dit_dtype *out);
bool dit_dtype_is_float(dit_dtype t);
/* True for the block-quantized types (DIT_Q4_0 ... DIT_Q6_K). */
bool dit_dtype_is_block(dit_dtype t);
/* True for the stored weight types the linear and embedding ops read through
 * dequantization (dit_dequant_row) of 2-D weight matrices: the block types and fp8. */
bool dit_dtype_is_quant(dit_dtype t);
/* Bytes of n consecutive elements of a row: false when n is not a whole number of blocks
 * or the size overflows. */
bool dit_dtype_row_bytes(dit_dtype t, uint64_t n, uint64_t *out);

static inline float dit_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t dit_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float dit_f16_to_f32(uint16_t h);
uint16_t dit_f32_to_f16(float f);
float dit_e4m3_to_f32(uint8_t v);   /* float8_e4m3fn: no inf, 0x7f/0xff = NaN, max 448 */
uint8_t dit_f32_to_e4m3(float f);   /* out of range -> NaN, as torch's cast */
float dit_e5m2_to_f32(uint8_t v);
uint8_t dit_f32_to_e5m2(float f);   /* out of range -> inf */

/* Converts n elements of type `from` at src to float at dst. Float and integer
 * types are supported; bool gives 0/1. */
void dit_convert_to_f32(float *dst, const void *src, dit_dtype from, size_t n);
/* Converts n floats to `to` (float types only; returns false otherwise). */
bool dit_convert_from_f32(void *dst, const float *src, dit_dtype to, size_t n);

#endif
