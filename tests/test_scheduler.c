/* FlowMatchEulerDiscreteScheduler against diffusers: every case of refs/scheduler_cases.json
 * and the sigmas/timesteps of the zimage-tiny and flux2-klein-tiny references, computed from
 * those folders' own scheduler_config.json. Tolerance: exact float32 equality (0 ulp) for
 * every sigma and timestep, exact double equality for mu. Also the Euler step, the
 * config validation and the bad-argument paths. */
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "io/json.h"
#include "pipeline/scheduler.h"
#include "testing.h"

static int64_t ulp_diff(float a, float b) {
  int32_t ia, ib;
  memcpy(&ia, &a, 4);
  memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return llabs((long long)ia - (long long)ib);
}

/* Compares n values against a JSON array of numbers (float32 values printed as doubles). */
static int64_t cmp_json(const float *got, const json_t *arr, int n, const char *what) {
  CHECK_MSG(json_array_size(arr) == (size_t)n, "%s: %zu reference values, expected %d", what,
            json_array_size(arr), n);
  int64_t worst = 0;
  for (int i = 0; i < n && i < (int)json_array_size(arr); i++) {
    float want = (float)json_number_value(json_array_get(arr, i));
    int64_t d = ulp_diff(got[i], want);
    if (d > worst) worst = d;
    CHECK_MSG(d == 0, "%s[%d]: got %.9g want %.9g (%lld ulp)", what, i, (double)got[i], (double)want,
              (long long)d);
  }
  return worst;
}

static dit_flow_sched_config load_config(const char *path) {
  dit_flow_sched_config c;
  dit_flow_sched_config_default(&c);
  json_t *j = NULL;
  dit_error err = {0};
  CHECK_MSG(dit_json_load_file(path, 1 << 20, &j, &err) == DIT_OK, "%s", err.msg);
  if (j) CHECK_MSG(dit_flow_sched_config_from_json(j, &c, &err) == DIT_OK, "%s: %s", path, err.msg);
  json_decref(j);
  return c;
}

static void check_cases(const char *data) {
  char path[1024];
  snprintf(path, sizeof path, "%s/refs/scheduler_cases.json", data);
  json_t *root = NULL;
  dit_error err = {0};
  CHECK_MSG(dit_json_load_file(path, 16 << 20, &root, &err) == DIT_OK, "%s", err.msg);
  if (!root) return;
  char cfgpath[1024];
  snprintf(cfgpath, sizeof cfgpath, "%s/models/zimage-tiny/scheduler/scheduler_config.json", data);
  dit_flow_sched_config zc = load_config(cfgpath);
  dit_flow_sched_config fc;
  CHECK_MSG(dit_flow_sched_config_from_json(json_object_get(root, "flux2_scheduler_config"), &fc, &err) == DIT_OK,
            "%s", err.msg);
  float in[DIT_FLOW_MAX_STEPS], sig[DIT_FLOW_MAX_STEPS + 1], ts[DIT_FLOW_MAX_STEPS];
  int n_cases = 0;
  int64_t worst = 0;
  size_t i;
  json_t *cs;
  json_array_foreach(json_object_get(root, "zimage"), i, cs) {
    int steps = (int)json_integer_value(json_object_get(cs, "steps"));
    char what[64];
    dit_zimage_default_sigmas(steps, in);
    CHECK(dit_flow_sched_set_timesteps(&zc, steps, 0.0, in, sig, ts, &err) == DIT_OK);
    snprintf(what, sizeof what, "zimage %d steps sigmas", steps);
    int64_t w = cmp_json(sig, json_object_get(cs, "sigmas"), steps + 1, what);
    if (w > worst) worst = w;
    snprintf(what, sizeof what, "zimage %d steps timesteps", steps);
    w = cmp_json(ts, json_object_get(cs, "timesteps"), steps, what);
    if (w > worst) worst = w;
    n_cases++;
  }
  json_array_foreach(json_object_get(root, "flux2"), i, cs) {
    int steps = (int)json_integer_value(json_object_get(cs, "steps"));
    int seq = (int)json_integer_value(json_object_get(cs, "image_seq_len"));
    double mu_ref = json_number_value(json_object_get(cs, "mu"));
    double mu = dit_flux2_empirical_mu(seq, steps);
    CHECK_MSG(mu == mu_ref, "flux2 seq %d steps %d: mu %.17g want %.17g", seq, steps, mu, mu_ref);
    char what[96];
    dit_flux2_default_sigmas(steps, in);
    CHECK(dit_flow_sched_set_timesteps(&fc, steps, mu, in, sig, ts, &err) == DIT_OK);
    snprintf(what, sizeof what, "flux2 seq %d, %d steps sigmas", seq, steps);
    int64_t w = cmp_json(sig, json_object_get(cs, "sigmas"), steps + 1, what);
    if (w > worst) worst = w;
    snprintf(what, sizeof what, "flux2 seq %d, %d steps timesteps", seq, steps);
    w = cmp_json(ts, json_object_get(cs, "timesteps"), steps, what);
    if (w > worst) worst = w;
    n_cases++;
  }
  CHECK_MSG(n_cases >= 19, "only %d cases", n_cases);
  printf("scheduler_cases.json: %d cases, worst difference %lld ulp (tolerance 0)\n", n_cases, (long long)worst);
  json_decref(root);
}

/* Compares n floats with a fixture tensor exactly. */
static void cmp_tensor(const char *file, const char *name, const float *got, int n) {
  float *ref = NULL;
  int64_t shape[8];
  int ndim = 0;
  CHECK_MSG(dt_load_f32(file, name, &ref, shape, &ndim) == 0, "%s: %s", file, name);
  if (!ref) return;
  CHECK_MSG(ndim == 1 && shape[0] == n, "%s: %s has %lld values, expected %d", file, name, (long long)shape[0], n);
  int bad = 0;
  for (int i = 0; i < n && i < shape[0]; i++) {
    if (ulp_diff(got[i], ref[i]) != 0) bad++;
    CHECK_MSG(ulp_diff(got[i], ref[i]) == 0, "%s %s[%d]: got %.9g want %.9g", file, name, i, (double)got[i],
              (double)ref[i]);
  }
  printf("%s: %d values, %d differ\n", name, n, bad);
  free(ref);
}

static void check_fixtures(const char *data) {
  char dir[512], path[1024];
  float in[8], sig[9], ts[8];
  dit_error err = {0};
  /* Z-Image: 128x96 -> 16x12 latents -> (16/2)*(12/2) = 48 tokens; mu unused (static shift). */
  snprintf(dir, sizeof dir, "%s/models/zimage-tiny", data);
  snprintf(path, sizeof path, "%s/scheduler/scheduler_config.json", dir);
  dit_flow_sched_config zc = load_config(path);
  CHECK(!zc.use_dynamic_shifting && zc.shift == 3.0);
  snprintf(path, sizeof path, "%s/reference.safetensors", dir);
  double mu = dit_flow_calculate_shift(48, &zc);
  const struct { const char *prefix; int steps; } zcases[2] = {{"turbo", 4}, {"cfg", 3}};
  for (int k = 0; k < 2; k++) {
    char name[64];
    dit_zimage_default_sigmas(zcases[k].steps, in);
    CHECK(dit_flow_sched_set_timesteps(&zc, zcases[k].steps, mu, in, sig, ts, &err) == DIT_OK);
    snprintf(name, sizeof name, "%s_sigmas", zcases[k].prefix);
    cmp_tensor(path, name, sig, zcases[k].steps + 1);
    snprintf(name, sizeof name, "%s_timesteps", zcases[k].prefix);
    cmp_tensor(path, name, ts, zcases[k].steps);
  }
  /* FLUX.2 klein: 48 packed tokens, 4 steps, empirical mu. */
  snprintf(dir, sizeof dir, "%s/models/flux2-klein-tiny", data);
  snprintf(path, sizeof path, "%s/scheduler/scheduler_config.json", dir);
  dit_flow_sched_config fc = load_config(path);
  CHECK(fc.use_dynamic_shifting && fc.time_shift_type == DIT_TIME_SHIFT_EXPONENTIAL);
  snprintf(path, sizeof path, "%s/reference.safetensors", dir);
  dit_flux2_default_sigmas(4, in);
  CHECK(dit_flow_sched_set_timesteps(&fc, 4, dit_flux2_empirical_mu(48, 4), in, sig, ts, &err) == DIT_OK);
  cmp_tensor(path, "sigmas", sig, 5);
  cmp_tensor(path, "timesteps", ts, 4);
}

/* Known values: calculate_shift's line and the scheduler's own (no custom sigmas) path. */
static void check_formulas(void) {
  dit_flow_sched_config c;
  dit_flow_sched_config_default(&c);
  CHECK(dit_flow_calculate_shift(256, &c) == 0.5);
  CHECK(fabs(dit_flow_calculate_shift(4096, &c) - 1.15) < 1e-15);
  /* static shift 1, own linspace: sigmas = linspace(1, 1/1000, n) */
  float sig[5], ts[4];
  dit_error err = {0};
  CHECK(dit_flow_sched_set_timesteps(&c, 4, 0.0, NULL, sig, ts, &err) == DIT_OK);
  CHECK(sig[0] == 1.0f && sig[4] == 0.0f && ts[0] == 1000.0f);
  CHECK(sig[3] == (float)0.001 && ts[3] == (float)0.001 * 1000.0f);
  CHECK(fabsf(sig[1] - (float)(1.0 - 0.999 / 3)) <= 1e-7f);
  c.invert_sigmas = true;
  CHECK(dit_flow_sched_set_timesteps(&c, 4, 0.0, NULL, sig, ts, &err) == DIT_OK);
  CHECK(sig[0] == 0.0f && sig[4] == 1.0f && ts[0] == 0.0f);
  c.invert_sigmas = false;
  c.shift_terminal = 0.1; /* stretched so the last sigma is exactly the terminal value */
  CHECK(dit_flow_sched_set_timesteps(&c, 4, 0.0, NULL, sig, ts, &err) == DIT_OK);
  CHECK(fabsf(sig[3] - 0.1f) < 1e-7f && sig[0] == 1.0f);
  /* Euler: x + (s1 - s0) * v with float32 roundings */
  float x[3] = {1.0f, -2.0f, 0.5f}, v[3] = {0.25f, 4.0f, -1.0f};
  dit_flow_euler_step(x, v, 3, 1.0f, 0.75f);
  CHECK(x[0] == 0.9375f && x[1] == -3.0f && x[2] == 0.75f);
  float y = 0.3f, w = 0.7f;
  float dt = 0.1f - 0.9f;
  float want = y + dt * w;
  dit_flow_euler_step(&y, &w, 1, 0.9f, 0.1f);
  CHECK(y == want);
}

static void expect_cfg_error(const char *text, dit_status want, const char *needle) {
  json_t *j = json_loads(text, 0, NULL);
  CHECK(j != NULL);
  dit_flow_sched_config c;
  dit_error err = {0};
  dit_status s = dit_flow_sched_config_from_json(j, &c, &err);
  CHECK_MSG(s == want && strstr(err.msg, needle), "%s -> %d \"%s\" (want %d with \"%s\")", text, s, err.msg,
            want, needle);
  json_decref(j);
}

static void check_errors(void) {
  static const struct { const char *text; dit_status want; const char *needle; } bad_cfgs[] = {
      {"{\"use_karras_sigmas\": true}", DIT_ERR_UNSUPPORTED, "use_karras_sigmas"},
      {"{\"use_exponential_sigmas\": true}", DIT_ERR_UNSUPPORTED, "use_exponential_sigmas"},
      {"{\"use_beta_sigmas\": true}", DIT_ERR_UNSUPPORTED, "use_beta_sigmas"},
      {"{\"stochastic_sampling\": true}", DIT_ERR_UNSUPPORTED, "stochastic_sampling"},
      {"{\"_class_name\": \"DDIMScheduler\"}", DIT_ERR_UNSUPPORTED, "DDIMScheduler"},
      {"{\"time_shift_type\": \"cubic\"}", DIT_ERR_FORMAT, "time_shift_type"},
      {"{\"shift\": -1}", DIT_ERR_FORMAT, "shift"},
      {"{\"shift\": \"3\"}", DIT_ERR_FORMAT, "shift"},
      {"{\"num_train_timesteps\": 0}", DIT_ERR_FORMAT, "num_train_timesteps"},
      {"{\"shift_terminal\": 1.0}", DIT_ERR_FORMAT, "shift_terminal"},
      {"{\"base_image_seq_len\": 4096}", DIT_ERR_FORMAT, "max_image_seq_len"},
      {"[1, 2]", DIT_ERR_FORMAT, "not a JSON object"},
  };
  for (size_t i = 0; i < sizeof bad_cfgs / sizeof bad_cfgs[0]; i++)
    expect_cfg_error(bad_cfgs[i].text, bad_cfgs[i].want, bad_cfgs[i].needle);
  /* null and false are fine: the defaults */
  json_t *j = json_loads("{\"shift_terminal\": null, \"use_karras_sigmas\": false, \"shift\": 2}", 0, NULL);
  dit_flow_sched_config c;
  dit_error err = {0};
  CHECK(dit_flow_sched_config_from_json(j, &c, &err) == DIT_OK && c.shift == 2.0 && c.shift_terminal == 0.0);
  json_decref(j);

  float sig[3] = {9, 9, 9}, ts[2] = {9, 9};
  CHECK(dit_flow_sched_set_timesteps(&c, 0, 0.0, NULL, sig, ts, &err) == DIT_ERR_INVALID_ARG);
  CHECK(dit_flow_sched_set_timesteps(&c, DIT_FLOW_MAX_STEPS + 1, 0.0, NULL, sig, ts, &err) == DIT_ERR_INVALID_ARG);
  float bad[2] = {1.0f, NAN};
  CHECK(dit_flow_sched_set_timesteps(&c, 2, 0.0, bad, sig, ts, &err) == DIT_ERR_INVALID_ARG);
  CHECK(strstr(err.msg, "sigma[1]") != NULL);
  CHECK(sig[0] == 9 && ts[0] == 9); /* untouched */
  c.use_dynamic_shifting = true;
  CHECK(dit_flow_sched_set_timesteps(&c, 2, NAN, NULL, sig, ts, &err) == DIT_ERR_INVALID_ARG);
  CHECK(strstr(err.msg, "mu") != NULL);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  check_cases(a.data);
  check_fixtures(a.data);
  check_formulas();
  check_errors();
  return dt_finish();
}
