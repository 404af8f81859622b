/* FlowMatchEulerDiscreteScheduler (see scheduler.h). The schedule's last bits matter:
 * the reference pipelines feed these exact timesteps to the model, so each formula below
 * follows diffusers' precision: numpy/torch float32 arithmetic when the pipeline passes
 * float32 sigmas (a Python float operand of a float32 array is rounded to float32 first),
 * float64 for the scheduler's own linspace, one rounding per operation, no fused
 * multiply-add (contraction is turned off for this file) except the one torch.linspace
 * really has (dit_zimage_default_sigmas). */
#include "pipeline/scheduler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define SCHED_WHAT "scheduler_config.json"

void dit_flow_sched_config_default(dit_flow_sched_config *c) {
  memset(c, 0, sizeof *c);
  c->num_train_timesteps = 1000;
  c->shift = 1.0;
  c->use_dynamic_shifting = false;
  c->time_shift_type = DIT_TIME_SHIFT_EXPONENTIAL;
  c->base_shift = 0.5;
  c->max_shift = 1.15;
  c->base_image_seq_len = 256;
  c->max_image_seq_len = 4096;
  c->shift_terminal = 0.0;
  c->invert_sigmas = false;
}

/* Rejects a boolean option this implementation does not have, when it is true. */
static dit_status reject_option(const json_t *cfg, const char *key, const char *why, dit_error *err) {
  bool on = false;
  DIT_TRY(dit_json_bool_opt(cfg, key, &on, SCHED_WHAT, err));
  if (on)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: \"%s\": true is not supported (%s)", SCHED_WHAT, key,
                      why);
  return DIT_OK;
}

dit_status dit_flow_sched_config_from_json(const json_t *cfg, dit_flow_sched_config *out, dit_error *err) {
  if (!json_is_object(cfg)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: not a JSON object", SCHED_WHAT);
  dit_flow_sched_config c;
  dit_flow_sched_config_default(&c);
  const char *cls = NULL;
  DIT_TRY(dit_json_string_opt(cfg, "_class_name", &cls, SCHED_WHAT, err));
  if (cls && strcmp(cls, "FlowMatchEulerDiscreteScheduler") != 0)
    return dit_errorf(err, DIT_ERR_UNSUPPORTED,
                      "%s: scheduler class \"%s\" is not supported (only FlowMatchEulerDiscreteScheduler)",
                      SCHED_WHAT, cls);
  DIT_TRY(reject_option(cfg, "use_karras_sigmas", "Karras sigmas are not implemented", err));
  DIT_TRY(reject_option(cfg, "use_exponential_sigmas", "exponential sigmas are not implemented", err));
  DIT_TRY(reject_option(cfg, "use_beta_sigmas", "beta sigmas are not implemented", err));
  DIT_TRY(reject_option(cfg, "stochastic_sampling", "stochastic sampling is not implemented", err));

  int64_t v = c.num_train_timesteps;
  DIT_TRY(dit_json_int_opt(cfg, "num_train_timesteps", 1, 1000000, &v, SCHED_WHAT, err));
  c.num_train_timesteps = (int)v;
  DIT_TRY(dit_json_double_opt(cfg, "shift", &c.shift, SCHED_WHAT, err));
  if (!(c.shift > 0.0 && c.shift <= 1e6))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: \"shift\" = %g must be in (0, 1e6]", SCHED_WHAT, c.shift);
  DIT_TRY(dit_json_bool_opt(cfg, "use_dynamic_shifting", &c.use_dynamic_shifting, SCHED_WHAT, err));
  DIT_TRY(dit_json_double_opt(cfg, "base_shift", &c.base_shift, SCHED_WHAT, err));
  DIT_TRY(dit_json_double_opt(cfg, "max_shift", &c.max_shift, SCHED_WHAT, err));
  v = c.base_image_seq_len;
  DIT_TRY(dit_json_int_opt(cfg, "base_image_seq_len", 1, 1 << 30, &v, SCHED_WHAT, err));
  c.base_image_seq_len = (int)v;
  v = c.max_image_seq_len;
  DIT_TRY(dit_json_int_opt(cfg, "max_image_seq_len", 1, 1 << 30, &v, SCHED_WHAT, err));
  c.max_image_seq_len = (int)v;
  if (c.base_image_seq_len == c.max_image_seq_len)
    return dit_errorf(err, DIT_ERR_FORMAT,
                      "%s: \"base_image_seq_len\" and \"max_image_seq_len\" are both %d (the shift line "
                      "through them is undefined)",
                      SCHED_WHAT, c.base_image_seq_len);
  DIT_TRY(dit_json_double_opt(cfg, "shift_terminal", &c.shift_terminal, SCHED_WHAT, err));
  if (!(c.shift_terminal >= 0.0 && c.shift_terminal < 1.0))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: \"shift_terminal\" = %g must be in [0, 1)", SCHED_WHAT,
                      c.shift_terminal);
  DIT_TRY(dit_json_bool_opt(cfg, "invert_sigmas", &c.invert_sigmas, SCHED_WHAT, err));
  const char *tst = NULL;
  DIT_TRY(dit_json_string_opt(cfg, "time_shift_type", &tst, SCHED_WHAT, err));
  if (tst) {
    if (strcmp(tst, "exponential") == 0) {
      c.time_shift_type = DIT_TIME_SHIFT_EXPONENTIAL;
    } else if (strcmp(tst, "linear") == 0) {
      c.time_shift_type = DIT_TIME_SHIFT_LINEAR;
    } else {
      return dit_errorf(err, DIT_ERR_FORMAT,
                        "%s: \"time_shift_type\" = \"%s\" must be \"exponential\" or \"linear\"", SCHED_WHAT, tst);
    }
  }
  *out = c;
  return DIT_OK;
}

double dit_flow_calculate_shift(int image_seq_len, const dit_flow_sched_config *c) {
  double m = (c->max_shift - c->base_shift) / (double)(c->max_image_seq_len - c->base_image_seq_len);
  double b = c->base_shift - m * (double)c->base_image_seq_len;
  double p = (double)image_seq_len * m;
  return p + b;
}

double dit_flow_mu_calculate_shift(const dit_flow_sched_config *sc, int image_seq_len, int steps) {
  (void)steps;
  return dit_flow_calculate_shift(image_seq_len, sc);
}

double dit_flux2_empirical_mu(int image_seq_len, int steps) {
  const double a1 = 8.73809524e-05, b1 = 1.89833333;
  const double a2 = 0.00016927, b2 = 0.45666666;
  double seq = (double)image_seq_len;
  double p2 = a2 * seq;
  double m_200 = p2 + b2;
  if (image_seq_len > 4300) return m_200;
  double p1 = a1 * seq;
  double m_10 = p1 + b1;
  double a = (m_200 - m_10) / 190.0;
  double q = 200.0 * a;
  double b = m_200 - q;
  double r = a * (double)steps;
  return r + b;
}

/* torch's CPU linspace for float32: start + step * i for the first half, end - step *
 * (steps - 1 - i) for the second. torch's binary computes each as one fused multiply-add
 * (GCC contracts it in the AVX2/AVX-512 kernels); with two roundings the 28- and 50-step
 * Z-Image schedules differ from the reference by 1-2 ulp, with fmaf() they match exactly. */
void dit_torch_linspace_f32(float start, float end, int steps, float *out) {
  if (steps <= 0) return;
  if (steps == 1) {
    out[0] = start;
    return;
  }
  const float step = (end - start) / (float)(steps - 1);
  const int halfway = steps / 2;
  for (int i = 0; i < steps; i++) {
    if (i < halfway) {
      out[i] = fmaf(step, (float)i, start);
    } else {
      out[i] = fmaf(-step, (float)(steps - i - 1), end);
    }
  }
}

void dit_zimage_default_sigmas(int steps, float *out) {
  if (steps > 0) dit_torch_linspace_f32(1.0f, (float)(1.0 / (double)steps), steps, out);
}

/* np.linspace(start, stop, num) in float64: i * step + start, the last set to stop. */
static void np_linspace(double start, double stop, int num, double *out) {
  if (num == 1) {
    out[0] = start;
    return;
  }
  double step = (stop - start) / (double)(num - 1);
  for (int i = 0; i < num; i++) {
    double y = (double)i * step;
    out[i] = y + start;
  }
  out[num - 1] = stop;
}

void dit_flux2_default_sigmas(int steps, float *out) {
  if (steps <= 0) return;
  const double stop = 1.0 / (double)steps;
  const double step = steps > 1 ? (stop - 1.0) / (double)(steps - 1) : 0.0;
  for (int i = 0; i < steps; i++) {
    double y = (double)i * step;
    out[i] = (float)(y + 1.0);
  }
  if (steps > 1) out[steps - 1] = (float)stop;
}

/* ---- the shifts, in float32 (pipeline-provided sigmas) and float64 (own linspace) ---- */

static float static_shift_f32(float s, double shift) {
  float a = (float)shift * s;
  float b = (float)(shift - 1.0) * s;
  float den = 1.0f + b;
  return a / den;
}

static double static_shift_f64(double s, double shift) {
  double a = shift * s;
  double b = (shift - 1.0) * s;
  double den = 1.0 + b;
  return a / den;
}

/* time_shift(mu, 1.0, t): exp(mu) / (exp(mu) + (1/t - 1)) or mu / (mu + (1/t - 1)). */
static float time_shift_f32(float t, double mu, dit_time_shift_type type) {
  float k = type == DIT_TIME_SHIFT_EXPONENTIAL ? (float)exp(mu) : (float)mu;
  float inv = 1.0f / t;
  float r = inv - 1.0f;
  float den = k + r;
  return k / den;
}

static double time_shift_f64(double t, double mu, dit_time_shift_type type) {
  double k = type == DIT_TIME_SHIFT_EXPONENTIAL ? exp(mu) : mu;
  double inv = 1.0 / t;
  double r = inv - 1.0;
  double den = k + r;
  return k / den;
}

/* The scheduler's initial sigma_max / sigma_min (its 1000-entry table, float32). */
static void table_ends(const dit_flow_sched_config *c, double *smax, double *smin) {
  float n = (float)c->num_train_timesteps;
  float hi = n / n, lo = 1.0f / n;
  if (!c->use_dynamic_shifting) {
    hi = static_shift_f32(hi, c->shift);
    lo = static_shift_f32(lo, c->shift);
  }
  *smax = hi;
  *smin = lo;
}

/* Shift + terminal stretch of pipeline sigmas, in float32. */
static void schedule_f32(const dit_flow_sched_config *c, int steps, double mu, const float *in, float *s) {
  for (int i = 0; i < steps; i++)
    s[i] = c->use_dynamic_shifting ? time_shift_f32(in[i], mu, c->time_shift_type)
                                   : static_shift_f32(in[i], c->shift);
  if (c->shift_terminal != 0.0) {
    float scale = (1.0f - s[steps - 1]) / (float)(1.0 - c->shift_terminal);
    for (int i = 0; i < steps; i++) {
      float om = 1.0f - s[i];
      float q = om / scale;
      s[i] = 1.0f - q;
    }
  }
}

/* The scheduler's own schedule: float64 linspace of timesteps, shift, stretch, -> float32. */
static void schedule_f64(const dit_flow_sched_config *c, int steps, double mu, float *s, double *tmp) {
  double smax, smin, n = (double)c->num_train_timesteps;
  table_ends(c, &smax, &smin);
  np_linspace(smax * n, smin * n, steps, tmp);
  for (int i = 0; i < steps; i++) {
    double x = tmp[i] / n;
    tmp[i] = c->use_dynamic_shifting ? time_shift_f64(x, mu, c->time_shift_type) : static_shift_f64(x, c->shift);
  }
  if (c->shift_terminal != 0.0) {
    double scale = (1.0 - tmp[steps - 1]) / (1.0 - c->shift_terminal);
    for (int i = 0; i < steps; i++) {
      double om = 1.0 - tmp[i];
      double q = om / scale;
      tmp[i] = 1.0 - q;
    }
  }
  for (int i = 0; i < steps; i++) s[i] = (float)tmp[i];
}

dit_status dit_flow_sched_set_timesteps(const dit_flow_sched_config *c, int steps, double mu,
                                        const float *custom_sigmas, float *sigmas, float *timesteps,
                                        dit_error *err) {
  if (steps < 1 || steps > DIT_FLOW_MAX_STEPS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "scheduler: %d steps is outside [1, %d]", steps,
                      DIT_FLOW_MAX_STEPS);
  if (c->use_dynamic_shifting && !isfinite(mu))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "scheduler: mu = %g must be finite with dynamic shifting", mu);
  if (custom_sigmas) {
    for (int i = 0; i < steps; i++) {
      float x = custom_sigmas[i];
      if (!(x >= 0.0f && x <= 1.0f))
        return dit_errorf(err, DIT_ERR_INVALID_ARG, "scheduler: sigma[%d] = %g is outside [0, 1]", i, (double)x);
    }
  }
  float s[DIT_FLOW_MAX_STEPS];
  double tmp[DIT_FLOW_MAX_STEPS];
  if (custom_sigmas)
    schedule_f32(c, steps, mu, custom_sigmas, s);
  else
    schedule_f64(c, steps, mu, s, tmp);
  const float n = (float)c->num_train_timesteps;
  for (int i = 0; i < steps; i++) {
    if (c->invert_sigmas) s[i] = 1.0f - s[i];
    if (!isfinite(s[i]) && c->shift_terminal != 0.0 && steps == 1) /* 0 / 0 in the stretch, as in diffusers */
      return dit_errorf(err, DIT_ERR_INVALID_ARG, "scheduler: this model's schedule (shift_terminal %g) needs at "
                        "least 2 steps", c->shift_terminal);
    if (!isfinite(s[i]))
      return dit_errorf(err, DIT_ERR_NUMERIC, "scheduler: sigma %d of %d is not finite (mu = %g)", i, steps, mu);
  }
  for (int i = 0; i < steps; i++) {
    sigmas[i] = s[i];
    timesteps[i] = s[i] * n;
  }
  sigmas[steps] = c->invert_sigmas ? 1.0f : 0.0f;
  return DIT_OK;
}

void dit_flow_euler_step(float *sample, const float *model_out, size_t n, float sigma, float sigma_next) {
  const float dt = sigma_next - sigma;
  for (size_t i = 0; i < n; i++) {
    float d = dt * model_out[i];
    sample[i] = sample[i] + d;
  }
}

dit_status dit_flow_schedule_for(const dit_model_dir *dir, int steps, int image_seq_len,
                                 void (*default_sigmas)(int steps, float *out), dit_flow_mu_fn mu, float *sigmas,
                                 float *timesteps, dit_error *err) {
  json_t *cfg = NULL;
  DIT_TRY(dit_model_dir_component_config(dir, "scheduler", &cfg, err));
  dit_flow_sched_config sc;
  dit_status s = dit_flow_sched_config_from_json(cfg, &sc, err);
  json_decref(cfg);
  if (s != DIT_OK) return s;
  float *custom = malloc((size_t)steps * sizeof(float));
  if (!custom) return dit_errorf(err, DIT_ERR_NOMEM, "scheduler: out of memory");
  default_sigmas(steps, custom);
  s = dit_flow_sched_set_timesteps(&sc, steps, mu(&sc, image_seq_len, steps), custom, sigmas, timesteps, err);
  free(custom);
  return s;
}
