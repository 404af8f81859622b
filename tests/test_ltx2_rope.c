/* LTX-2's rotary positions against diffusers (fixtures models/ltx2-tiny and ltx23-tiny): the
 * video and audio patch boundaries the pipeline hands its transformer (video_coords [B, 3, N, 2]
 * and audio_coords [B, 1, N, 2] of the first transformer call), from the latent geometry the
 * call names, the transformer config's VAE factors, causal offset, hop and sample rate, and the
 * frame rate. They are exact (a few float32 operations in the same order): the bound is 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "io/json.h"
#include "models/ltx2_rope.h"
#include "testing.h"

static void check_fixture(const dt_args *a, const char *name) {
  char dir[1024], ref[1200], cfgp[1200], sub[128];
  snprintf(sub, sizeof sub, "models/%s", name);
  dt_path(dir, sizeof dir, a->data, sub);
  json_t *rj = dt_load_reference(dir, ref, sizeof ref);
  if (!rj) return;
  dt_path(cfgp, sizeof cfgp, dir, "transformer/config.json");
  json_t *cfg = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_json_load_file(cfgp, 1 << 20, &cfg, &e) == DIT_OK, "%s", e.msg);
  const json_t *call = json_array_get(json_object_get(rj, "calls"), 0);
  size_t k;
  json_t *c;
  json_array_foreach(json_object_get(rj, "calls"), k, c) {
    if (!strcmp(json_string_value(json_object_get(c, "stage")), "transformer")) {
      call = c;
      break;
    }
  }
  float *vc = NULL, *ac = NULL;
  int64_t vs[8], as[8];
  int vn = 0, an = 0;
  if (cfg && !dt_load_f32(ref, "transformer.0.video_coords", &vc, vs, &vn) &&
      !dt_load_f32(ref, "transformer.0.audio_coords", &ac, as, &an)) {
    const int F = dt_json_int(call, "num_frames"), H = dt_json_int(call, "height"), W = dt_json_int(call, "width");
    const int NA = dt_json_int(call, "audio_num_frames");
    const float fps = (float)json_number_value(json_object_get(call, "fps"));
    const json_t *sf = json_object_get(cfg, "vae_scale_factors");
    const int scale[3] = {(int)json_integer_value(json_array_get(sf, 0)), (int)json_integer_value(json_array_get(sf, 1)),
                          (int)json_integer_value(json_array_get(sf, 2))};
    const int co = dt_json_int(cfg, "causal_offset");
    const int64_t N = (int64_t)F * H * W;
    CHECK(vn == 4 && vs[1] == 3 && vs[2] == N && vs[3] == 2 && an == 4 && as[1] == 1 && as[2] == NA);
    float *v = malloc((size_t)(6 * N) * sizeof *v), *au = malloc((size_t)(2 * NA) * sizeof *au);
    if (v && au && vs[2] == N && as[2] == NA) {
      dit_ltx2_video_coords(F, H, W, scale, co, fps, v);
      dit_ltx2_audio_coords(NA, dt_json_int(cfg, "audio_scale_factor"), co, dt_json_int(cfg, "audio_hop_length"),
                            dt_json_int(cfg, "audio_sampling_rate"), au);
      bool same = true;
      for (int b = 0; b < (int)vs[0]; b++) { /* every batch item (CFG repeats them) */
        same = same && !memcmp(v, vc + (size_t)b * 6 * N, (size_t)(6 * N) * sizeof *v);
        same = same && !memcmp(au, ac + (size_t)b * 2 * NA, (size_t)(2 * NA) * sizeof *au);
      }
      CHECK_MSG(same, "%s: the video or audio coordinates differ from the pipeline's", name);
      printf("%s: video coords of %dx%dx%d latents at %g fps and audio coords of %d frames: bit for bit\n", name, F, H,
             W, fps, NA);
    }
    free(v);
    free(au);
  }
  free(vc);
  free(ac);
  json_decref(cfg);
  json_decref(rj);
}

static void test_ltx20(const dt_args *a) { check_fixture(a, "ltx2-tiny"); }
static void test_ltx23(const dt_args *a) { check_fixture(a, "ltx23-tiny"); }

/* The angle layout: pad zeros first, then frequency-major, axis-minor. */
static void test_angles(const dt_args *a) {
  (void)a;
  const float pos[3] = {0.25f, 0.5f, 1.0f};
  float ang[7];
  dit_ltx2_rope_angles(pos, 1, 3, 14, 10000.0, true, ang); /* dim 14: 2 frequencies x 3 axes + 1 pad */
  CHECK(ang[0] == 0.0f);
  CHECK(ang[1] == (0.25f * 2 - 1) * (float)(M_PI / 2) && ang[3] == (1.0f * 2 - 1) * (float)(M_PI / 2));
  CHECK(ang[4] == (0.25f * 2 - 1) * (float)(10000.0 * M_PI / 2) && ang[5] == 0.0f);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_ltx20, test_ltx23, test_angles};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
