/* The Krea 2 pipeline against diffusers' Krea2Pipeline on the krea2-raw-tiny and
 * krea2-turbo-tiny fixtures: through dit_generate from the prompt (the template block, the
 * Qwen3-VL language model's tapped states, the text fusion, packed torch noise, Raw's
 * resolution-aware shift with guidance 4.5 on the empty negative prompt, Turbo's fixed shift
 * without guidance, the Qwen-Image VAE), the per-step latents within 1e-4 relative error and
 * the 8-bit image within one level of `image` x 255; the family's defaults; a size that is not
 * a multiple of 16 refused; bad folders through the CLI (exit 2, the problem named). */
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
  dt_check_reference_run(ctx, fixture, ref_file, rj, 1, 1e-4); /* the generator's bf16 round trip: RoPE in bf16 */
  json_decref(rj);
}


/* `ditrun generate` on a copy of the Turbo folder made wrong: exit 2 and the message names the
 * problem (heads not divisible by KV heads; a text-fusion block's tensor missing). */
static void test_cli_bad(const dt_args *a, const char *turbo) {
  char dir[4200], cmd[16384], log[4300], msg[4096];
  snprintf(dir, sizeof dir, "%s/krea2_bad", a->tmp);
  snprintf(log, sizeof log, "%s/krea2_bad.log", a->tmp);
  static const struct { const char *edit, *needle; } cases[] = {
      {"sed -i 's/\"num_key_value_heads\": 2/\"num_key_value_heads\": 3/' '%s/transformer/config.json'",
       "num_key_value_heads"},
      {"sed -i 's/\"num_refiner_text_blocks\": 2/\"num_refiner_text_blocks\": 3/' '%s/transformer/config.json'",
       "text_fusion.refiner_blocks.2."},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char edit[4600];
    snprintf(edit, sizeof edit, cases[i].edit, dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -rL '%s' '%s' && %s", dir, turbo, dir, edit);
    CHECK(dt_run(cmd, NULL) == 0);
    snprintf(cmd, sizeof cmd, "'%s/ditrun' generate -m '%s' -p x -W 64 -H 64 -q -o '%s/bad.png'", a->bin, dir, a->tmp);
    const int rc = dt_run(cmd, log);
    const long n = dt_read_file(log, msg, sizeof msg);
    CHECK_MSG(rc == 2 && n > 0 && strstr(msg, cases[i].needle), "case %zu: exit %d, %s", i, rc, n > 0 ? msg : "");
    printf("bad folder %zu: exit %d: %s", i, rc, n > 0 ? msg : "\n");
  }
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
  char raw[4096], turbo[4096];
  dt_model_dir(&a, a.data, "krea2-raw-tiny", raw, sizeof raw);
  dt_model_dir(&a, a.data, "krea2-turbo-tiny", turbo, sizeof turbo);
  dt_check_family_defaults(ctx, raw, "krea2", 28, 4.5);
  dt_check_family_defaults(ctx, turbo, "krea2", 8, 0.0);
  test_generate(ctx, raw);
  test_generate(ctx, turbo);
  test_cli_bad(&a, turbo);
  dit_ctx_free(ctx);
  return dt_finish();
}
