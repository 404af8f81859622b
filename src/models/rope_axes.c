/* Multi-axis rotary tables (see rope_axes.h). */
#include "models/rope_axes.h"

#include <math.h>

void dit_rope_axes_fill(int n_axes, const int *axes_dims, double theta, const float *ids, int64_t rows, float *cos_out,
                        float *sin_out) {
  double freq[DIT_ROPE_AXES_MAX_PAIRS];
  int half = 0;
  for (int ax = 0; ax < n_axes; ax++)
    for (int j = 0; j < axes_dims[ax] / 2 && half < DIT_ROPE_AXES_MAX_PAIRS; j++)
      freq[half++] = 1.0 / pow(theta, (double)(2 * j) / (double)axes_dims[ax]);
  for (int64_t r = 0; r < rows; r++) {
    const float *id = ids + (int64_t)n_axes * r;
    float *cr = cos_out + r * half, *sr = sin_out + r * half;
    int off = 0;
    for (int ax = 0; ax < n_axes; ax++) {
      const double pos = (double)id[ax];
      for (int j = 0; j < axes_dims[ax] / 2 && off + j < half; j++) {
        const double ang = pos * freq[off + j];
        cr[off + j] = (float)cos(ang);
        sr[off + j] = (float)sin(ang);
      }
      off += axes_dims[ax] / 2;
    }
  }
}
