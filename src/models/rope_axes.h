/* Multi-axis rotary tables as diffusers' FluxPosEmbed computes them (FLUX.1, FLUX.2 and
 * Krea 2 use the same module): every token carries one position per axis; axis i rotates
 * axes_dims[i] / 2 pairs with freq_j = 1 / theta^(2j / axes_dims[i]) in float64, angle =
 * float32(position) * freq_j in float64, cos / sin rounded to float32; the axes' pairs are
 * concatenated (row width = sum(axes_dims) / 2). */
#ifndef DIT_MODELS_ROPE_AXES_H
#define DIT_MODELS_ROPE_AXES_H

#include <stdint.h>

#define DIT_ROPE_AXES_MAX_PAIRS 256 /* sum(axes_dims) / 2 accepted (head dims up to 512) */

/* ids [rows, n_axes]; cos, sin [rows, sum(axes_dims) / 2]. The caller has checked that each
 * axes_dims[i] is even and their sum at most 2 * DIT_ROPE_AXES_MAX_PAIRS. */
void dit_rope_axes_fill(int n_axes, const int *axes_dims, double theta, const float *ids, int64_t rows, float *cos,
                        float *sin);

#endif
