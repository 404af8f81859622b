/* Shared pieces of the block formats (quant.c, quant_k.c). */
#ifndef DIT_CORE_QUANT_INTERNAL_H
#define DIT_CORE_QUANT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"

/* A little-endian fp16 at p, widened exactly; f stored at p as fp16 (nearest even). */
static inline float dit_q_f16(const uint8_t *p) { return dit_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }
static inline void dit_q_put_f16(uint8_t *p, float f) {
  uint16_t h = dit_f32_to_f16(f);
  p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}
/* The x[i] of largest magnitude (the first of equal ones), its magnitude into *amax. */
float dit_q_signed_absmax(const float *x, int n, float *amax);
/* Scale and min j (6 bits each) of a Q4_K / Q5_K block's 12 scale bytes q. */
void dit_q_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m);
/* The K types' reference quantizers, nb blocks of 256 from x into b. */
void dit_q_q2_k(const float *x, uint8_t *b, int64_t nb);
void dit_q_q3_k(const float *x, uint8_t *b, int64_t nb);
void dit_q_q45_k(const float *x, uint8_t *b, int64_t nb, bool five);
void dit_q_q6_k(const float *x, uint8_t *b, int64_t nb);

#endif
