/* MiniMax-H3's scheduler (diffusers MiniMaxH3Scheduler): the rectified-flow schedule in H3's t
 * convention (t = 1 - sigma, t = 1 clean) and its Euler step on a data-ward velocity. Video and
 * audio each have one (shift 12 and 3 in the released folder). */
#ifndef DIT_PIPELINE_MINIMAX_H3_SCHED_H
#define DIT_PIPELINE_MINIMAX_H3_SCHED_H

#include <stddef.h>

#include "core/error.h"

#define DIT_H3_MAX_SIGMAS 1001

/* set_timesteps(num_inference_steps = n): sigmas = shift b / (1 + (shift - 1) b) over b =
 * torch.linspace(1, 0, n) in float32, consecutive duplicates collapsed (the terminal 0 counts among the n,
 * so n sigmas give n - 1 model evaluations); timesteps = 1 - sigmas[:-1]. sigmas[DIT_H3_MAX_SIGMAS],
 * timesteps likewise; *n_sigmas: how many sigmas remain. DIT_ERR_INVALID_ARG for n outside 2..1001 or a
 * shift that is not positive and finite. */
dit_status dit_h3_sched_set(double shift, int n, float *sigmas, int *n_sigmas, float *timesteps, dit_error *err);

/* One step at timestep t from sigma to sigma_next, in place: x0 = x + (1 - t) v, then
 * x = r x + (1 - r) x0 with r = sigma_next / sigma, in float32 as diffusers computes it. */
void dit_h3_sched_step(float *sample, const float *v, size_t n, float t, float sigma, float sigma_next);

#endif
