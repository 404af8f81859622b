/* The pieces of the model runtime every family shares (see model_rt.h): the component slots,
 * the Qwen3 text encoder and the sampler loop. */
#include "pipeline/model_rt.h"

#include <stdlib.h>

#include "core/timer.h"
#include "models/model_weights.h"
#include "pipeline/pipeline_common.h"

dit_status dit_component_get(const dit_model_rt *rt, dit_components *c, int slot, void **obj, dit_error *err) {
  if (!c->obj[slot]) DIT_TRY(c->kind[slot]->load(rt, &c->obj[slot], err));
  *obj = c->obj[slot];
  return DIT_OK;
}

dit_status dit_components_retune(const dit_model_rt *rt, dit_components *c, dit_error *err) {
  const dit_component_kind *k = c->kind[DIT_SLOT_TRANSFORMER];
  if (!c->obj[DIT_SLOT_TRANSFORMER] || !k || !k->retune) return DIT_OK;
  dit_status s = k->retune(rt, c->obj[DIT_SLOT_TRANSFORMER], err);
  if (s != DIT_OK) dit_error_prefix(err, "%s", k->stage);
  return s;
}

void dit_component_done(const dit_model_rt *rt, dit_components *c, int slot) {
  /* the stage's kernels' working memory leaves the resident set, kept component or not */
  dit_backend_trim(rt->dev);
  if (rt->host != rt->dev) dit_backend_trim(rt->host);
  if (rt->keep & c->kind[slot]->keep_bit) return;
  if (c->obj[slot]) {
    c->kind[slot]->free(c->obj[slot]);
    dit_heap_trim(); /* what it held leaves the resident set before the next stage */
  }
  c->obj[slot] = NULL;
}

void dit_components_close(dit_components *c) {
  for (int i = 0; i < DIT_N_SLOTS; i++) {
    if (c->obj[i]) c->kind[i]->free(c->obj[i]);
    c->obj[i] = NULL;
  }
}

dit_status dit_components_start(const dit_model_rt *rt, dit_components *c, const dit_component_kind *transformer,
                                const dit_component_kind *vae, dit_error *err) {
  return dit_components_start_with(rt, c, &dit_qwen3_text_encoder, transformer, vae, err);
}

dit_status dit_components_start_with(const dit_model_rt *rt, dit_components *c, const dit_component_kind *text,
                                     const dit_component_kind *transformer, const dit_component_kind *vae,
                                     dit_error *err) {
  c->kind[DIT_SLOT_TEXT] = text;
  c->kind[DIT_SLOT_TRANSFORMER] = transformer;
  c->kind[DIT_SLOT_VAE] = vae;
  return dit_components_open(rt, c, err);
}

dit_status dit_component_source(const dit_model_rt *rt, const char *name, dit_component_src *src, dit_error *err) {
  DIT_TRY(dit_model_dir_component_path(rt->dir, name, src->path, sizeof src->path, err));
  src->is_file = dit_model_dir_component_file(rt->dir, name) != NULL;
  src->cfg = src->is_file ? dit_model_dir_component_config_path(rt->dir, name, src->cfg_buf, sizeof src->cfg_buf) : NULL;
  return DIT_OK;
}

void dit_components_state_close(void *state) {
  if (!state) return;
  dit_components_close(state);
  free(state);
}

dit_status dit_components_open(const dit_model_rt *rt, dit_components *c, dit_error *err) {
  for (int i = 0; i < DIT_N_SLOTS; i++) {
    if (!c->kind[i] || c->kind[i]->lazy || !(rt->keep & c->kind[i]->keep_bit)) continue;
    void *obj;
    dit_status s = dit_component_get(rt, c, i, &obj, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "%s", c->kind[i]->stage);
      dit_components_close(c);
      return s;
    }
  }
  return DIT_OK;
}

static void text_encoder_free(void *obj) {
  dit_text_encoder *t = obj;
  if (!t) return;
  dit_qwen3_free(t->te);
  dit_tok_free(t->tok);
  free(t);
}

static dit_status text_encoder_load(const dit_model_rt *rt, void **obj, dit_error *err) {
  dit_text_encoder *t = calloc(1, sizeof *t);
  if (!t) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  char path[4096];
  dit_status s = dit_model_dir_component_path(rt->dir, "tokenizer", path, sizeof path, err);
  if (s == DIT_OK) s = dit_tok_load(path, &t->tok, err);
  dit_component_src src;
  if (s == DIT_OK) s = dit_component_source(rt, "text_encoder", &src, err);
  if (s == DIT_OK && !src.is_file) s = dit_model_config_path("qwen3", src.path, path, sizeof path, err);
  if (s == DIT_OK && src.is_file && !src.cfg)
    s = dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: a single Qwen3 text encoder file needs the model folder's "
                   "text_encoder/config.json", src.path);
  if (s == DIT_OK) s = dit_qwen3_load_from(rt->dev, src.path, src.is_file ? src.cfg : path, &t->te, err);
  if (s != DIT_OK) {
    text_encoder_free(t);
    t = NULL;
  }
  *obj = t;
  return s;
}

const dit_component_kind dit_qwen3_text_encoder = {"text encoder", DIT_KEEP_TEXT_ENCODER, text_encoder_load,
                                                   text_encoder_free, false, NULL};

dit_status dit_text_encoder_get(const dit_model_rt *rt, dit_components *c, int rope_bf16, dit_text_encoder **out,
                                dit_error *err) {
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_TEXT, &obj, err));
  *out = obj;
  return dit_qwen3_set_rope_freq_dtype((*out)->te, rope_bf16 ? DIT_BF16 : DIT_F32, err);
}

dit_status dit_sampler_run(const dit_model_rt *rt, const dit_gen_params *p, int steps, dit_denoise_fn step,
                           void *state, const float *latents, size_t n, dit_error *err) {
  dit_stage_begin(p, "denoising");
  for (int i = 0; i < steps; i++) {
    double t0 = dit_time_now();
    dit_status s = step(state, i, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "denoising step %d of %d", i + 1, steps);
      return s;
    }
    double dt = dit_time_now() - t0;
    if (rt) dit_log(rt->ctx, DIT_LOG_DEBUG, "step %d/%d: %.3f s", i + 1, steps, dt);
    if (p && p->on_step && p->on_step(p->user, i, steps, latents, n, dt) != 0)
      return dit_errorf(err, DIT_ERR_CANCELLED, "cancelled by the step callback after step %d of %d", i + 1, steps);
  }
  return DIT_OK;
}
