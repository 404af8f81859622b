/* LTX2Pipeline's sampling helpers (see ltx2_sample.h): the latents' layouts, and the guidance in
 * diffusers' order of float32 operations. */
#include "pipeline/ltx2_sample.h"

#include <math.h>
#include <stdlib.h>

void dit_ltx2_guidance_defaults(dit_ltx2_guidance *video, dit_ltx2_guidance *audio) {
  *video = (dit_ltx2_guidance){3.0f, 1.0f, 3.0f, 0.7f};
  *audio = (dit_ltx2_guidance){7.0f, 1.0f, 3.0f, 0.7f};
}

/* torch.std (unbiased) of n values, accumulated in double. */
static double std_of(const float *v, size_t n) {
  double mean = 0.0, ss = 0.0;
  for (size_t i = 0; i < n; i++) mean += v[i];
  mean /= (double)n;
  for (size_t i = 0; i < n; i++) ss += ((double)v[i] - mean) * ((double)v[i] - mean);
  return sqrt(ss / (double)(n > 1 ? n - 1 : 1));
}

int dit_ltx2_guide(const dit_ltx2_guidance *g, size_t n, const float *x, float sigma, const float *v_cond,
                   const float *v_uncond, const float *v_stg, const float *v_iso, float *v_out) {
  if (!(sigma > 0.0f) || !n) return -1;
  float *x0 = malloc(2 * n * sizeof *x0);
  if (!x0) return -1;
  float *gd = x0 + n;
  for (size_t i = 0; i < n; i++) {
    const float c = x[i] - v_cond[i] * sigma; /* convert_velocity_to_x0 */
    float acc = c;
    if (v_uncond) acc = acc + (g->cfg - 1.0f) * (c - (x[i] - v_uncond[i] * sigma));
    if (v_stg) acc = acc + g->stg * (c - (x[i] - v_stg[i] * sigma));
    if (v_iso) acc = acc + (g->modality - 1.0f) * (c - (x[i] - v_iso[i] * sigma));
    x0[i] = c;
    gd[i] = acc;
  }
  if (g->rescale > 0.0f) { /* rescale_noise_cfg(guided, conditional) over the whole item */
    const double sd_cfg = std_of(gd, n);
    if (!(sd_cfg > 0.0)) {
      free(x0);
      return -1;
    }
    const float ratio = (float)std_of(x0, n) / (float)sd_cfg;
    for (size_t i = 0; i < n; i++) gd[i] = g->rescale * (gd[i] * ratio) + (1.0f - g->rescale) * gd[i];
  }
  for (size_t i = 0; i < n; i++) v_out[i] = (x[i] - gd[i]) / sigma; /* convert_x0_to_velocity */
  free(x0);
  return 0;
}

void dit_ltx2_pack_video(const float *in, int C, int F, int H, int W, float *out) {
  const size_t N = (size_t)F * H * W;
  for (int c = 0; c < C; c++)
    for (size_t t = 0; t < N; t++) out[t * (size_t)C + (size_t)c] = in[(size_t)c * N + t];
}

void dit_ltx2_unpack_video(const float *in, int C, int F, int H, int W, float *out) {
  const size_t N = (size_t)F * H * W;
  for (int c = 0; c < C; c++)
    for (size_t t = 0; t < N; t++) out[(size_t)c * N + t] = in[t * (size_t)C + (size_t)c];
}

void dit_ltx2_pack_audio(const float *in, int C, int L, int M, float *out) {
  for (int c = 0; c < C; c++)
    for (int l = 0; l < L; l++)
      for (int m = 0; m < M; m++) out[((size_t)l * C + c) * M + m] = in[((size_t)c * L + l) * M + m];
}

void dit_ltx2_unpack_audio(const float *in, int C, int L, int M, float *out) {
  for (int c = 0; c < C; c++)
    for (int l = 0; l < L; l++)
      for (int m = 0; m < M; m++) out[((size_t)c * L + l) * M + m] = in[((size_t)l * C + c) * M + m];
}
