/* The FLUX.1 pipeline against diffusers' FluxPipeline on the flux1-dev-tiny and
 * flux1-schnell-tiny fixtures: through dit_generate from the prompt (both tokenizers, CLIP
 * pooled output, T5 hidden states, packed torch noise, the dynamic (dev) or static
 * (schnell) shift, embedded guidance for dev), the per-step latents within 1e-4 relative
 * error and the final 8-bit image within one level of `image` x 255; the family's
 * defaults; a size that is not a multiple of 16 refused. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ditrun.h"
#include "fixture.h"
#include "testing.h"

static void test_generate(dit_ctx *ctx, const char *fixture) {
  char ref_file[4096];
  json_t *rj = dt_load_reference(fixture, ref_file, sizeof ref_file);
  if (!rj) {
    CHECK_MSG(0, "%s: no reference", fixture);
    return;
  }
  dt_check_reference_run(ctx, fixture, ref_file, rj, 0, 1e-4);
  json_decref(rj);
}


int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  dit_ctx_params cp;
  dit_ctx_params_default(&cp);
  dit_ctx *ctx = NULL;
  if (dit_ctx_create(&cp, &ctx) != DIT_OK) {
    CHECK_MSG(0, "no context");
    return dt_finish();
  }
  char dev[4096], schnell[4096];
  dt_model_dir(&a, a.data, "flux1-dev-tiny", dev, sizeof dev);
  snprintf(schnell, sizeof schnell, "%s/models/flux1-schnell-tiny", a.data);
  dt_check_family_defaults(ctx, dev, "flux1", 28, 3.5);
  dt_check_family_defaults(ctx, schnell, "flux1", 4, 0.0);
  test_generate(ctx, dev);
  test_generate(ctx, schnell);
  dit_ctx_free(ctx);
  return dt_finish();
}
