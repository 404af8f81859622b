/* torch-compatible CPU random normals: the initial latents of a diffusers pipeline are
 * `torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed))`, so reproducing
 * a reference image from its seed needs torch's exact generator and sampling, bit for bit.
 *
 * What is reproduced (torch's CPUGeneratorImpl on x86-64 with AVX2, the build every x86
 * PyTorch wheel dispatches to, AVX-512 machines included):
 *   - mt19937 seeded with the low 32 bits of the seed (init_genrand), 32-bit draws;
 *     64-bit draws are (first << 32) | second.
 *   - n < 16 elements: scalar Box-Muller in double from 53-bit uniforms
 *     (u1, u2 -> r = sqrt(-2 log1p(-u2)), theta = 2 pi u1; returns r cos theta and caches
 *     r sin theta in the generator for the next draw), rounded to float.
 *   - n >= 16: n float uniforms from 24-bit draws, then Box-Muller on blocks of 16
 *     (first 8 give the radius, last 8 the angle) with the Cephes-polynomial log/sincos
 *     of torch's avx_mathfun.h, emulated here in portable scalar float arithmetic; if n is
 *     not a multiple of 16 the last 16 elements are redrawn from 16 new uniforms and
 *     transformed again.
 * Not reproduced: torch builds without AVX2 (e.g. aarch64 wheels use libm log/sin/cos
 * in the n >= 16 path and give different values), and the `philox` generator of torch's
 * CUDA backend (torch.randn(..., device="cuda")) is NOT implemented. */
#ifndef DIT_PIPELINE_RNG_TORCH_H
#define DIT_PIPELINE_RNG_TORCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DIT_MT19937_N 624

/* Generator state only (no globals): one per request, like a torch.Generator. */
typedef struct dit_torch_rng {
  uint32_t state[DIT_MT19937_N];
  int left;               /* draws left before the next twist (torch's left_) */
  int next;               /* index of the next state word */
  bool has_cached_normal; /* torch's next_double_normal_sample_ */
  double cached_normal;
} dit_torch_rng;

/* torch.Generator().manual_seed(seed): any u64 (torch keeps only the low 32 bits for the
 * mt19937 state). Clears the cached normal. */
void dit_torch_rng_seed(dit_torch_rng *g, uint64_t seed);
/* One raw 32-bit draw (torch's random()) and one 64-bit draw (random64()). */
uint32_t dit_torch_rng_u32(dit_torch_rng *g);
uint64_t dit_torch_rng_u64(dit_torch_rng *g);
/* Fills out[n] exactly as torch.randn(n) (any shape of n contiguous elements, float32)
 * would with this generator, and advances it the same way. n = 0 draws nothing. */
void dit_torch_randn(dit_torch_rng *g, float *out, size_t n);

#endif
