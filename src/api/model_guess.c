/* dit_model_dir_for_file (see ditrun.h): the configuration folder ditrun ships for the
 * model a single transformer file belongs to, told from its tensor names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/ctx.h"
#include "io/safetensors.h"

#ifndef DIT_MODELS_DIR
#define DIT_MODELS_DIR "models"
#endif

/* Whether w holds name, bare or under ComfyUI's prefix. */
static bool has(const dit_weights *w, const char *name) {
  char p[256];
  snprintf(p, sizeof p, "model.diffusion_model.%s", name);
  return dit_weights_find(w, name) || dit_weights_find(w, p);
}

/* The shipped folder's name for w, or NULL with *family set to what it is when known. */
static const char *folder_of(const dit_weights *w, const char **family) {
  *family = NULL;
  if (has(w, "noise_refiner.0.attention.qkv.weight") || has(w, "noise_refiner.0.attention.to_q.weight") ||
      has(w, "noise_refiner.0.attention.qkv.weight.1"))
    return "z-image-turbo";
  if (has(w, "double_stream_modulation_img.lin.weight") || has(w, "double_stream_modulation_img.linear.weight")) {
    *family = "FLUX.2";
    return NULL;
  }
  if (has(w, "double_blocks.0.img_mod.lin.weight") || has(w, "transformer_blocks.0.norm1.linear.weight"))
    return has(w, "guidance_in.in_layer.weight") || has(w, "time_text_embed.guidance_embedder.linear_1.weight")
               ? "flux1-dev"
               : "flux1-schnell";
  return NULL;
}

static dit_status dir_for_file(const char *weights, char *dir, size_t len, dit_error *err) {
  dit_weights *w = NULL;
  DIT_TRY(dit_weights_open(weights, NULL, &w, err));
  const char *family, *name = folder_of(w, &family);
  dit_weights_close(w);
  if (!name && family)
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "%s is a %s transformer; ditrun ships no folder for it yet: give -m (the model's "
                      "diffusers folder; its configs and tokenizer are enough)", weights, family);
  if (!name)
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "%s: not a transformer ditrun can tell the model of (Z-Image, FLUX.1); give -m", weights);
  const char *root = getenv("DITRUN_MODELS");
  if (!root || !*root) root = DIT_MODELS_DIR;
  if ((size_t)snprintf(dir, len, "%s/%s", root, name) >= len)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "the models folder path is too long: %s", root);
  char idx[4200];
  struct stat st;
  snprintf(idx, sizeof idx, "%s/model_index.json", dir);
  if (stat(idx, &st) != 0)
    return dit_errorf(err, DIT_ERR_IO, "%s is a %s model, but its folder %s is missing (DITRUN_MODELS names the "
                      "folder that holds ditrun's models/)", weights, name, dir);
  return DIT_OK;
}

dit_status dit_model_dir_for_file(dit_ctx *ctx, const char *weights, char *dir, size_t len) {
  dit_error *err = &ctx->err;
  dit_error_clear(err);
  if (!weights || !dir || !len) return dit_errorf(err, DIT_ERR_INVALID_ARG, "dit_model_dir_for_file: no file or buffer");
  dir[0] = 0;
  return dir_for_file(weights, dir, len, err);
}
