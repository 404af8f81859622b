/* ggml's block-quantized weight formats (the dtypes DIT_Q4_0 ... DIT_Q6_K): rows of whole
 * blocks, each block an fp16 scale (and min) with packed integers; the K types group 256
 * elements with 6-bit (Q3_K: 6-bit signed, Q6_K: 8-bit) sub-block scales. The layouts are
 * ggml's (its ggml-common.h) byte for byte, little-endian, any alignment.
 *
 * dit_dequant_row computes each value as ggml's dequantize_row_* does in ISO C (no fused
 * multiply-add: ditrun compiles with -std=c11, where GCC does not contract); a ggml built
 * with FP contraction on an FMA machine can differ in the last bit for the types that
 * subtract a min (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K). dit_quant_row is ggml's reference
 * quantizer (quantize_row_*_ref: what its converters use without an importance matrix),
 * under the same ISO semantics. Finite inputs only: NaN or Inf in a row to quantize gives
 * unspecified (but defined, in-range) codes. Test vectors from ggml itself:
 * tests/fixtures/quant/. */
#ifndef DIT_CORE_QUANT_H
#define DIT_CORE_QUANT_H

#include <stdint.h>

#include "core/dtype.h"

/* n elements (a whole number of blocks) of type t at src to float. Element types (F32, F16,
 * BF16, the fp8 types) convert too. */
void dit_dequant_row(dit_dtype t, const void *src, float *dst, int64_t n);
/* n floats (whole blocks) to type t; F32, F16 and BF16 too (nearest even). */
void dit_quant_row(dit_dtype t, const float *src, void *dst, int64_t n);
/* The per-tensor scale of an fp8 (t) tensor whose largest magnitude is amax: amax over the
 * type's largest finite value (448 for e4m3, 57344 for e5m2), so the largest element maps
 * to it; 1 when amax is 0 or not finite. */
float dit_fp8_scale(float amax, dit_dtype t);

#endif
