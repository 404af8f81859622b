/* diffusers' FlowMatchEulerDiscreteScheduler as Z-Image and FLUX.2 use it: the sigma /
 * timestep schedule (static shift or resolution-dependent "dynamic" shift, terminal
 * stretch, inversion) computed in the same float32/float64 order as diffusers so the
 * values match the reference bit for bit, the Euler update, and the two pipelines' mu
 * functions and default sigma lists.
 *
 * Typical use (Z-Image):   dit_zimage_default_sigmas(steps, s);
 *                          dit_flow_sched_set_timesteps(&cfg, steps, 0.0, s, sigmas, ts, err);
 *           (FLUX.2 klein): dit_flux2_default_sigmas(steps, s);
 *                          mu = dit_flux2_empirical_mu(image_seq_len, steps);
 *                          dit_flow_sched_set_timesteps(&cfg, steps, mu, s, sigmas, ts, err);
 * then for i in 0..steps-1: model at timesteps[i] (the pipeline maps it to its own t
 * convention), dit_flow_euler_step(x, v, n, sigmas[i], sigmas[i + 1]). */
#ifndef DIT_PIPELINE_SCHEDULER_H
#define DIT_PIPELINE_SCHEDULER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "io/model_dir.h"

#define DIT_FLOW_MAX_STEPS 1000

typedef enum dit_time_shift_type { DIT_TIME_SHIFT_EXPONENTIAL = 0, DIT_TIME_SHIFT_LINEAR } dit_time_shift_type;

/* scheduler_config.json, with diffusers' defaults for absent keys. */
typedef struct dit_flow_sched_config {
  int num_train_timesteps;       /* default 1000 */
  double shift;                  /* static shift, default 1.0 */
  bool use_dynamic_shifting;     /* default false: then shift applies; else mu */
  dit_time_shift_type time_shift_type; /* default exponential */
  double base_shift, max_shift;  /* defaults 0.5, 1.15 (calculate_shift) */
  int base_image_seq_len;        /* default 256 */
  int max_image_seq_len;         /* default 4096 */
  double shift_terminal;         /* 0 = none (null in the json, and diffusers treats 0 as none) */
  bool invert_sigmas;            /* default false */
} dit_flow_sched_config;

/* diffusers' defaults (shift 1, static). */
void dit_flow_sched_config_default(dit_flow_sched_config *c);
/* Reads a parsed scheduler_config.json. `_class_name`, when present, must be
 * FlowMatchEulerDiscreteScheduler. use_karras_sigmas / use_exponential_sigmas /
 * use_beta_sigmas / stochastic_sampling set to true -> DIT_ERR_UNSUPPORTED naming the option;
 * out-of-range values -> DIT_ERR_FORMAT naming the field. *out is only written on success. */
dit_status dit_flow_sched_config_from_json(const json_t *cfg, dit_flow_sched_config *out, dit_error *err);

/* Schedule for `steps` steps (1..DIT_FLOW_MAX_STEPS): sigmas[steps + 1] (the last is 0, or
 * 1 with invert_sigmas) and timesteps[steps] (= sigma * num_train_timesteps).
 * custom_sigmas[steps] is what the pipeline passes as `sigmas=` (NULL: the scheduler's own
 * linspace between its sigma_max and sigma_min, computed in float64 as diffusers does).
 * mu is used only with use_dynamic_shifting and must then be finite.
 * Returns DIT_ERR_INVALID_ARG for a bad step count, mu or custom sigma (NaN, or outside
 * [0, 1]); outputs are untouched on failure. */
dit_status dit_flow_sched_set_timesteps(const dit_flow_sched_config *c, int steps, double mu,
                                        const float *custom_sigmas, float *sigmas, float *timesteps,
                                        dit_error *err);

/* diffusers' calculate_shift (Z-Image, FLUX.1): linear in image_seq_len through
 * (base_image_seq_len, base_shift) and (max_image_seq_len, max_shift), in double. */
double dit_flow_calculate_shift(int image_seq_len, const dit_flow_sched_config *c);
/* FLUX.2's compute_empirical_mu(image_seq_len, num_steps), in double. */
double dit_flux2_empirical_mu(int image_seq_len, int steps);

/* Default `sigmas=` of the pipelines (steps >= 1):
 * Z-Image: torch.linspace(1.0, 1/steps, steps) in float32 (torch's two-sided CPU formula).
 * FLUX.2:  np.linspace(1.0, 1/steps, steps) in float64, rounded to float32. */
void dit_zimage_default_sigmas(int steps, float *out);
/* torch.linspace(start, end, steps) in float32 on the CPU (its two-sided formula, fused multiply-adds). */
void dit_torch_linspace_f32(float start, float end, int steps, float *out);
void dit_flux2_default_sigmas(int steps, float *out);

/* A pipeline's mu for image_seq_len latent tokens and steps (sc: the folder's scheduler). */
typedef double (*dit_flow_mu_fn)(const dit_flow_sched_config *sc, int image_seq_len, int steps);

/* The dit_flow_mu_fn of the pipelines whose mu is calculate_shift over the scheduler's base/max
 * sequence lengths (Z-Image, FLUX.1, Krea 2 Raw, LTX-2); steps is unused. */
double dit_flow_mu_calculate_shift(const dit_flow_sched_config *sc, int image_seq_len, int steps);

/* The schedule a pipeline computes from its folder's scheduler config (the "scheduler"
 * component): its default sigmas (default_sigmas(steps, out)), shifted with
 * mu(sc, image_seq_len, steps); as dit_flow_sched_set_timesteps otherwise. */
dit_status dit_flow_schedule_for(const dit_model_dir *dir, int steps, int image_seq_len,
                                 void (*default_sigmas)(int steps, float *out), dit_flow_mu_fn mu, float *sigmas,
                                 float *timesteps, dit_error *err);

/* In place: sample[i] += (sigma_next - sigma) * model_out[i], each operation rounded to
 * float32 as torch does (dt first, then the product, then the sum; no fused multiply-add). */
void dit_flow_euler_step(float *sample, const float *model_out, size_t n, float sigma, float sigma_next);

#endif
