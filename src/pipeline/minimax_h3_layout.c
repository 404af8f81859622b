/* MiniMax-H3's packed layout (see minimax_h3_layout.h), in float64 with one rounding per operation as
 * numpy and torch compute it. */
#include "pipeline/minimax_h3_layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define FRAME_RESCALE (5.0 / 3.0)
#define SPATIAL_SCALE 32.0
#define MAX_SIDE 4096
#define MAX_FRAMES 4096
#define MAX_TEXT (1 << 20)

void dit_h3_spatial_grid(int dim, int patch, double sqrt_area, double *out) {
  const int n = dim / patch;
  const double ratio = (double)dim / sqrt_area, left = (1.0 - ratio) / 2.0, stop = left + ratio;
  const double step = (stop - left) / (double)n;
  for (int i = 0; i < n; i++) out[i] = ((double)i * step + left) * SPATIAL_SCALE;
}

void dit_h3_temporal_grid(int frames, double origin, double *out) {
  static const int per_latent[5] = {1, 4, 4, 4, 4};
  double sum = 0.0;
  for (int f = 0; f < frames; f++) {
    out[f] = origin + sum;
    sum += FRAME_RESCALE * (double)per_latent[f % 5];
  }
}

void dit_h3_layout_free(dit_h3_layout *l) {
  if (!l) return;
  free(l->positions), free(l->tags), free(l->text_index), free(l->audio_index), free(l->video_index);
  memset(l, 0, sizeof *l);
}

dit_status dit_h3_layout_make(const dit_h3_layout_in *in, dit_h3_layout *out, dit_error *err) {
  memset(out, 0, sizeof *out);
  if (!in || in->n_text < 1 || in->n_text > MAX_TEXT || in->frames < 1 || in->frames > MAX_FRAMES || in->lh < 1 ||
      in->lw < 1 || in->lh > MAX_SIDE || in->lw > MAX_SIDE || in->patch_h < 1 || in->patch_w < 1 ||
      in->audio_latents < 0 || in->audio_latents > MAX_FRAMES * 16 || in->audio_channels < 1 || in->audio_channels > 8)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 layout: sizes out of range");
  if (in->lh % in->patch_h || in->lw % in->patch_w)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 layout: %dx%d latents are not divisible by the %dx%d "
                      "patch", in->lh, in->lw, in->patch_h, in->patch_w);
  const int gh = in->lh / in->patch_h, gw = in->lw / in->patch_w;
  const int64_t per_frame = (int64_t)gh * gw, Na = (int64_t)in->audio_latents * in->audio_channels;
  const int64_t Nv = per_frame * in->frames, N = in->n_text, S = N + Na + Nv;
  out->S = S, out->n_text = N, out->n_audio = Na, out->n_video = Nv;
  out->positions = calloc((size_t)S * 3, sizeof(double));
  out->tags = malloc((size_t)S * sizeof(int32_t));
  out->text_index = malloc((size_t)N * sizeof(int32_t));
  out->audio_index = malloc((size_t)(Na ? Na : 1) * sizeof(int32_t));
  out->video_index = malloc((size_t)Nv * sizeof(int32_t));
  double *hg = malloc((size_t)(gh + gw + in->frames) * sizeof(double)), *wg = hg ? hg + gh : NULL;
  double *tg = hg ? wg + gw : NULL;
  if (!out->positions || !out->tags || !out->text_index || !out->audio_index || !out->video_index || !hg) {
    free(hg);
    dit_h3_layout_free(out);
    return dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3 layout: out of memory for %lld rows", (long long)S);
  }
  double *pos = out->positions;
  for (int64_t i = 0; i < N; i++) { /* text: (i, 0, 0) */
    pos[i * 3] = (double)i;
    out->tags[i] = 1, out->text_index[i] = (int32_t)i;
  }
  const double sqrt_area = sqrt((double)in->lh * (double)in->lw);
  dit_h3_spatial_grid(in->lh, in->patch_h, sqrt_area, hg);
  dit_h3_spatial_grid(in->lw, in->patch_w, sqrt_area, wg);
  for (int64_t k = 0; k < Na; k++) { /* audio: channel-major, (N + latent, 0, the width grid's first or last) */
    const int64_t r = N + k;
    pos[r * 3] = (double)N + (double)(k % in->audio_latents);
    pos[r * 3 + 2] = k < in->audio_latents ? wg[0] : wg[gw - 1];
    out->tags[r] = 2, out->audio_index[k] = (int32_t)r;
  }
  dit_h3_temporal_grid(in->frames, (double)N, tg);
  for (int64_t k = 0; k < Nv; k++) { /* video: frame-major, then row-major over (h, w) */
    const int64_t r = N + Na + k, f = k / per_frame, p = k % per_frame;
    pos[r * 3] = tg[f], pos[r * 3 + 1] = hg[p / gw], pos[r * 3 + 2] = wg[p % gw];
    out->tags[r] = 0, out->video_index[k] = (int32_t)r;
  }
  free(hg);
  return DIT_OK;
}
