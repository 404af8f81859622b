/* libFuzzer target for the model-folder readers: the first input byte picks which file
 * the rest becomes, in a scratch model folder, and the matching reader runs on it:
 *   0 model_index.json (dit_model_dir_open + component lookups + dit_gen_defaults_for)
 *   1 transformer/config.json (Z-Image config)   2 text_encoder/config.json (Qwen3 load)
 *   3 vae/config.json (AutoencoderKL load)        4 scheduler_config.json (+ timesteps)
 *   5 a .safetensors.index.json next to one valid 8-byte-tensor shard (dit_weights_open)
 *   6 raw JSON (dit_json_parse + the typed getters)
 *   7 transformer/config.json (FLUX.2 config)      8 vae/config.json (FLUX.2 VAE load)
 *   9 transformer/config.json (FLUX.1 config)     10 text_encoder/config.json (CLIP text load)
 *  11 text_encoder_2/config.json (T5 encoder load)
 * Every outcome must be DIT_OK or an error with a message; the weights are absent for
 * 2, 3 and 9-11, so a config that parses ends in an I/O/format error naming the folder. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "ditrun.h"
#include "fuzz_util.h"
#include "io/json.h"
#include "io/model_dir.h"
#include "io/safetensors.h"
#include "models/clip_text.h"
#include "models/flux1.h"
#include "models/flux2.h"
#include "models/qwen3.h"
#include "models/t5.h"
#include "models/vae_flux2.h"
#include "models/vae_kl.h"
#include "models/zimage.h"
#include "models/zimage_internal.h"
#include "pipeline/scheduler.h"

/* A FLUX.1 transformer folder (no separate config). */
static dit_status flux1_load_dir(dit_backend *be, const char *dir, dit_flux2 **out, dit_error *err) {
  return dit_flux1_load(be, dir, NULL, out, err);
}

static void must_explain(dit_status s, const dit_error *err) {
  if (s != DIT_OK && !err->msg[0]) abort();
  if ((unsigned)s > DIT_ERR_INTERNAL || s == DIT_ERR_INTERNAL) abort();
}

static dit_backend *cfg_backend(void) {
  static dit_backend *be;
  if (!be) {
    dit_error err = {0};
    if (dit_backend_cpu_create(1, &be, &err) != DIT_OK) abort();
  }
  return be;
}

static void run_model_index(const char *dir) {
  dit_error err = {0};
  dit_model_dir *d = NULL;
  dit_status s = dit_model_dir_open(dir, &d, &err);
  must_explain(s, &err);
  if (s == DIT_OK) {
    char buf[4096];
    for (size_t i = 0; i < d->n_components; i++) {
      dit_error e2 = {0};
      s = dit_model_dir_component_path(d, d->components[i].name, buf, sizeof buf, &e2);
      must_explain(s, &e2);
    }
    dit_model_dir_close(d);
  }
  dit_ctx *ctx = NULL;
  if (dit_ctx_create(NULL, &ctx) != DIT_OK) abort();
  dit_gen_defaults def;
  s = dit_gen_defaults_for(ctx, dir, &def);
  if (s != DIT_OK && !dit_ctx_last_error(ctx)[0]) abort();
  dit_ctx_free(ctx);
}

/* The input parsed as JSON (named `what`), or NULL when it is not JSON (explained). */
static json_t *parse_input(const uint8_t *data, size_t size, const char *what) {
  dit_error err = {0};
  json_t *j = NULL;
  must_explain(dit_json_parse((const char *)data, size, what, &j, &err), &err);
  return j;
}

static void run_scheduler(const uint8_t *data, size_t size) {
  json_t *j = parse_input(data, size, "scheduler_config.json");
  if (!j) return;
  dit_error err = {0};
  dit_flow_sched_config c;
  dit_status s = dit_flow_sched_config_from_json(j, &c, &err);
  must_explain(s, &err);
  if (s == DIT_OK) {
    float sig[9], ts[8];
    dit_error e2 = {0};
    s = dit_flow_sched_set_timesteps(&c, 8, dit_flow_calculate_shift(256, &c), NULL, sig, ts, &e2);
    must_explain(s, &e2);
  }
  json_decref(j);
}

static void run_raw_json(const uint8_t *data, size_t size) {
  json_t *j = parse_input(data, size, "fuzz.json");
  if (!j) return;
  int64_t iv, arr[8];
  double dv;
  bool bv;
  const char *sv;
  size_t n;
  static const char *const keys[] = {"a", "hidden_size", "_class_name", "shape", ""};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
    dit_error e = {0};
    must_explain(dit_json_int_opt(j, keys[k], -5, 1 << 20, &iv, "f", &e), &e);
    must_explain(dit_json_double_opt(j, keys[k], &dv, "f", &e), &e);
    must_explain(dit_json_bool_opt(j, keys[k], &bv, "f", &e), &e);
    must_explain(dit_json_string_opt(j, keys[k], &sv, "f", &e), &e);
    must_explain(dit_json_int_array(j, keys[k], 0, 100, arr, 8, &n, "f", &e), &e);
  }
  json_decref(j);
}

static void run_index(const char *dir, const uint8_t *data, size_t size) {
  /* one shard: {"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} + 8 bytes */
  static const char hdr[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  uint8_t shard[8 + sizeof hdr - 1 + 8];
  uint64_t n = sizeof hdr - 1;
  for (int i = 0; i < 8; i++) shard[i] = (uint8_t)(n >> (8 * i));
  memcpy(shard + 8, hdr, n);
  memset(shard + 8 + n, 0, 8);
  fz_write("idx/a.safetensors", shard, sizeof shard);
  fz_write("idx/model.safetensors.index.json", data, size);
  char path[512];
  snprintf(path, sizeof path, "%s/idx", dir);
  dit_error err = {0};
  dit_weights *w = NULL;
  dit_status s = dit_weights_open(path, NULL, &w, &err);
  must_explain(s, &err);
  if (s == DIT_OK) {
    for (size_t i = 0; i < w->n_tensors; i++) {
      dit_tensor t;
      dit_error e2 = {0};
      must_explain(dit_weights_tensor(w, w->tensors[i], &t, &e2), &e2);
    }
    dit_weights_close(w);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *dir = fz_dir();
  unsigned which = data[0] % 12;
  data++;
  size--;
  char path[512];
  dit_error err = {0};
  dit_status s;
  switch (which) {
  case 0:
    fz_write("model_index.json", data, size);
    run_model_index(dir);
    break;
  /* a component config written as SUB/config.json, then its loader run on SUB */
#define LOAD_CASE(n, sub, type, load, unload)                                          \
  case n: {                                                                            \
    fz_write(sub "/config.json", data, size);                                          \
    snprintf(path, sizeof path, "%s/" sub, dir);                                       \
    type *m = NULL;                                                                    \
    s = load(cfg_backend(), path, &m, &err);                                           \
    must_explain(s, &err);                                                             \
    if (m) unload(m);                                                                  \
    break;                                                                             \
  }
  LOAD_CASE(1, "transformer", dit_zimage, dit_zimage_load, dit_zimage_free)
  LOAD_CASE(2, "text_encoder", dit_qwen3, dit_qwen3_load, dit_qwen3_free)
  LOAD_CASE(3, "vae", dit_vae_kl, dit_vae_kl_load, dit_vae_kl_free)
  LOAD_CASE(7, "flux2", dit_flux2, dit_flux2_load, dit_flux2_free)
  LOAD_CASE(8, "vae2", dit_vae_flux2, dit_vae_flux2_load, dit_vae_flux2_free)
  LOAD_CASE(9, "flux1", dit_flux2, flux1_load_dir, dit_flux2_free)
  LOAD_CASE(10, "clip", dit_clip_text, dit_clip_text_load, dit_clip_text_free)
  LOAD_CASE(11, "t5", dit_t5, dit_t5_load, dit_t5_free)
#undef LOAD_CASE
  case 4:
    run_scheduler(data, size);
    break;
  case 5:
    run_index(dir, data, size);
    break;
  case 6:
    run_raw_json(data, size);
    break;
  }
  return 0;
}
