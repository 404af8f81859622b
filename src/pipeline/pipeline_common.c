/* Shared pipeline pieces (see pipeline_common.h). */
#include "pipeline/pipeline_common.h"

#include <math.h>
#include <stdlib.h>

#include "core/timer.h"
#include "io/png.h"

dit_status dit_check_finite(const float *x, size_t n, const char *stage, dit_error *err) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i]))
      return dit_errorf(err, DIT_ERR_NUMERIC, "%s: non-finite value (%g) at element %zu", stage, (double)x[i], i);
  return DIT_OK;
}

dit_status dit_frames_from_decoder(const float *vid, int T, int H, int W, uint8_t **rgb_out, dit_error *err) {
  const size_t npix = (size_t)H * W, nall = (size_t)T * npix;
  DIT_TRY(dit_check_finite(vid, 3 * nall, "VAE decode", err));
  float *hwc = malloc(3 * npix * sizeof(float));
  uint8_t *rgb = malloc(3 * nall);
  dit_status s = hwc && rgb ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "image postprocessing: out of memory");
  for (int t = 0; t < T && s == DIT_OK; t++) {
    for (int c = 0; c < 3; c++)
      for (size_t k = 0; k < npix; k++) {
        float v = vid[(size_t)c * nall + (size_t)t * npix + k] / 2.0f + 0.5f;
        hwc[k * 3 + c] = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
      }
    s = dit_image_to_u8(hwc, 3 * npix, rgb + (size_t)t * 3 * npix, err);
  }
  free(hwc);
  if (s != DIT_OK) {
    free(rgb);
    return s;
  }
  *rgb_out = rgb;
  return DIT_OK;
}

dit_status dit_image_from_decoder(const float *img, int H, int W, dit_image *out, dit_error *err) {
  uint8_t *rgb = NULL;
  DIT_TRY(dit_frames_from_decoder(img, 1, H, W, &rgb, err));
  out->width = W;
  out->height = H;
  out->rgb = rgb;
  return DIT_OK;
}

void dit_fill_stats(dit_gen_stats *st, const double t[5], int steps) {
  st->encode_seconds = t[1] - t[0];
  st->load_seconds = t[2] - t[1];
  st->denoise_seconds = t[3] - t[2];
  st->decode_seconds = t[4] - t[3];
  st->total_seconds = t[4] - t[0];
  st->steps = steps;
  st->peak_rss_bytes = dit_peak_rss_bytes();
}

void dit_pack_latents_2x2(const float *chw, int C, int lh, int lw, float *tokens) {
  const size_t h = 2 * (size_t)lh, w = 2 * (size_t)lw, Ct = 4 * (size_t)C;
  for (size_t y = 0; y < (size_t)lh; y++)
    for (size_t x = 0; x < (size_t)lw; x++)
      for (size_t c = 0; c < (size_t)C; c++)
        for (size_t dy = 0; dy < 2; dy++)
          for (size_t dx = 0; dx < 2; dx++)
            tokens[(y * (size_t)lw + x) * Ct + c * 4 + dy * 2 + dx] = chw[(c * h + 2 * y + dy) * w + 2 * x + dx];
}

void dit_unpack_latents_2x2(const float *tokens, int C, int lh, int lw, float *chw) {
  const size_t h = 2 * (size_t)lh, w = 2 * (size_t)lw, Ct = 4 * (size_t)C;
  for (size_t y = 0; y < (size_t)lh; y++)
    for (size_t x = 0; x < (size_t)lw; x++)
      for (size_t c = 0; c < (size_t)C; c++)
        for (size_t dy = 0; dy < 2; dy++)
          for (size_t dx = 0; dx < 2; dx++)
            chw[(c * h + 2 * y + dy) * w + 2 * x + dx] = tokens[(y * (size_t)lw + x) * Ct + c * 4 + dy * 2 + dx];
}

void dit_stage_begin(const dit_gen_params *p, const char *stage) {
  if (p && p->on_stage) p->on_stage(p->user, stage);
}
