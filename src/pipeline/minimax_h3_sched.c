/* MiniMax-H3's scheduler (see minimax_h3_sched.h), in float32 with one rounding per operation as torch
 * computes it (a Python float operand of a float32 tensor is rounded to float32 first). */
#include "pipeline/minimax_h3_sched.h"

#include <math.h>

#include "pipeline/scheduler.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

dit_status dit_h3_sched_set(double shift, int n, float *sigmas, int *n_sigmas, float *timesteps, dit_error *err) {
  if (n < 2 || n > DIT_H3_MAX_SIGMAS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 scheduler: %d sigmas (2..%d: the steps plus the "
                      "terminal one)", n, DIT_H3_MAX_SIGMAS);
  if (!(shift > 0.0) || !isfinite(shift))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 scheduler: shift %g is not positive", shift);
  float base[DIT_H3_MAX_SIGMAS];
  dit_torch_linspace_f32(1.0f, 0.0f, n, base);
  const float s = (float)shift, s1 = (float)(shift - 1.0);
  int k = 0;
  for (int i = 0; i < n; i++) {
    const float num = s * base[i], den = 1.0f + s1 * base[i], v = num / den;
    if (k && sigmas[k - 1] == v) continue; /* unique_consecutive */
    sigmas[k++] = v;
  }
  for (int i = 0; i + 1 < k; i++) timesteps[i] = 1.0f - sigmas[i];
  *n_sigmas = k;
  return DIT_OK;
}

void dit_h3_sched_step(float *sample, const float *v, size_t n, float t, float sigma, float sigma_next) {
  const float s_t = 1.0f - t, r = sigma_next / sigma, r1 = 1.0f - r;
  for (size_t i = 0; i < n; i++) {
    const float x0 = sample[i] + s_t * v[i];
    sample[i] = r * sample[i] + r1 * x0;
  }
}
