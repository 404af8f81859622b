/* The pieces of the model runtime every family shares (see model_rt.h): the Qwen3 text
 * encoder slot and the sampler loop. */
#include "pipeline/model_rt.h"

#include "core/timer.h"

dit_status dit_text_encoder_ensure(const dit_model_rt *rt, dit_text_encoder *t, int rope_bf16, dit_error *err) {
  if (!t->te) {
    char path[4096];
    dit_status s = dit_model_dir_component_path(rt->dir, "tokenizer", path, sizeof path, err);
    if (s == DIT_OK) s = dit_tok_load(path, &t->tok, err);
    if (s == DIT_OK) s = dit_model_dir_component_path(rt->dir, "text_encoder", path, sizeof path, err);
    if (s == DIT_OK) s = dit_qwen3_load(rt->dev, path, &t->te, err);
    if (s != DIT_OK) {
      dit_text_encoder_release(rt, t, true);
      return s;
    }
  }
  return dit_qwen3_set_rope_freq_dtype(t->te, rope_bf16 ? DIT_BF16 : DIT_F32, err);
}

void dit_text_encoder_release(const dit_model_rt *rt, dit_text_encoder *t, bool force) {
  if (!force && (rt->keep & DIT_KEEP_TEXT_ENCODER)) return;
  dit_qwen3_free(t->te);
  dit_tok_free(t->tok);
  t->te = NULL;
  t->tok = NULL;
}

dit_status dit_sampler_run(const dit_model_rt *rt, const dit_gen_params *p, int steps, dit_denoise_fn step,
                           void *state, const float *latents, size_t n, dit_error *err) {
  for (int i = 0; i < steps; i++) {
    double t0 = dit_time_now();
    dit_status s = step(state, i, err);
    if (s != DIT_OK) {
      dit_error_prefix(err, "denoising step %d of %d", i + 1, steps);
      return s;
    }
    double dt = dit_time_now() - t0;
    dit_log(rt->ctx, DIT_LOG_DEBUG, "step %d/%d: %.3f s", i + 1, steps, dt);
    if (p->on_step && p->on_step(p->user, i, steps, latents, n, dt) != 0)
      return dit_errorf(err, DIT_ERR_CANCELLED, "cancelled by the step callback after step %d of %d", i + 1, steps);
  }
  return DIT_OK;
}
