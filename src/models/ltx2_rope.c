/* LTX-2's rotary positions (see ltx2_rope.h), in the order and precision diffusers computes them. */
#include "models/ltx2_rope.h"

#include <math.h>

void dit_ltx2_video_coords(int F, int H, int W, const int scale[3], int causal_offset, float fps, float *coords) {
  const int64_t N = (int64_t)F * H * W;
  for (int f = 0; f < F; f++)
    for (int h = 0; h < H; h++)
      for (int w = 0; w < W; w++) {
        const int64_t n = ((int64_t)f * H + h) * W + w;
        const float g[3] = {(float)f, (float)h, (float)w};
        for (int a = 0; a < 3; a++) {
          float s = g[a] * (float)scale[a], e = (g[a] + 1.0f) * (float)scale[a];
          if (a == 0) {
            s = fmaxf(s + (float)causal_offset - (float)scale[0], 0.0f) / fps;
            e = fmaxf(e + (float)causal_offset - (float)scale[0], 0.0f) / fps;
          }
          coords[((int64_t)a * N + n) * 2] = s;
          coords[((int64_t)a * N + n) * 2 + 1] = e;
        }
      }
}

void dit_ltx2_audio_coords(int N, int scale, int causal_offset, int hop, int sample_rate, float *coords) {
  for (int i = 0; i < N; i++) {
    float s = fmaxf((float)i * (float)scale + (float)causal_offset - (float)scale, 0.0f);
    float e = fmaxf(((float)i + 1.0f) * (float)scale + (float)causal_offset - (float)scale, 0.0f);
    coords[2 * i] = s * (float)hop / (float)sample_rate;
    coords[2 * i + 1] = e * (float)hop / (float)sample_rate;
  }
}

void dit_ltx2_rope_angles(const float *pos, int64_t N, int dims, int dim, double theta, bool f64, float *angles) {
  const int nf = dim / (2 * dims), half = dim / 2, pad = half - nf * dims;
  const double step = nf > 1 ? 1.0 / (double)(nf - 1) : 0.0;
  for (int i = 0; i < nf; i++) {
    /* torch.linspace: start + i * step over the first half, end - (n - 1 - i) * step after */
    const double t = i < nf / 2 ? (double)i * step : 1.0 - (double)(nf - 1 - i) * step;
    const float fi = f64 ? (float)(pow(theta, t) * M_PI / 2.0) : powf((float)theta, (float)t) * (float)M_PI / 2.0f;
    for (int64_t n = 0; n < N; n++)
      for (int d = 0; d < dims; d++)
        angles[n * half + pad + i * dims + d] = (pos[n * dims + d] * 2.0f - 1.0f) * fi;
  }
  for (int64_t n = 0; n < N; n++)
    for (int i = 0; i < pad; i++) angles[n * half + i] = 0.0f;
}

void dit_ltx2_rope_cos_sin(const float *angles, int64_t n, float *cos_out, float *sin_out) {
  for (int64_t i = 0; i < n; i++) {
    const float a = angles[i];
    cos_out[i] = cosf(a);
    sin_out[i] = sinf(a);
  }
}
