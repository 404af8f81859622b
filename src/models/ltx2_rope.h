/* LTX-2's rotary positions (diffusers' LTX2AudioVideoRotaryPosEmbed and the connectors'
 * LTX2RotaryPosEmbed1d): patch boundaries in pixel / second units, their midpoints as fractions
 * of the base sizes, and the angles of LTX-2's "split" RoPE. */
#ifndef DIT_MODELS_LTX2_ROPE_H
#define DIT_MODELS_LTX2_ROPE_H

#include <stdbool.h>
#include <stdint.h>

/* prepare_video_coords for one item: coords [3, F*H*W, 2] (axis: frame, height, width; last:
 * [start, end)) of a latent grid of F x H x W (patch 1), in pixels scaled by scale[3] (the VAE's
 * (temporal, spatial, spatial) factors), the frame axis shifted by causal_offset - scale[0],
 * clamped at 0 and divided by fps (seconds). */
void dit_ltx2_video_coords(int F, int H, int W, const int scale[3], int causal_offset, float fps, float *coords);
/* prepare_audio_coords for one item: coords [1, N, 2] of N latent frames, in seconds (a latent
 * frame is `scale` mel frames of hop / sample_rate seconds; the first shifted by causal_offset). */
void dit_ltx2_audio_coords(int N, int scale, int causal_offset, int hop, int sample_rate, float *coords);

/* Angles of LTX-2's RoPE over `dims` position axes for N positions: pos [N, dims] (fractions of
 * the base sizes) -> angles [N, dim / 2], angle[n, pad + i * dims + d] = (2 * pos[n, d] - 1) *
 * theta^linspace(0, 1, dim / (2 * dims))[i] * pi / 2 (those powers in fp64 when f64, as
 * double_precision), with the pad = dim / 2 - dims * (dim / (2 * dims)) leading angles 0 (cos 1,
 * sin 0: diffusers' padding). Split RoPE gives head h the angles [h * D/2, (h + 1) * D/2). */
void dit_ltx2_rope_angles(const float *pos, int64_t N, int dims, int dim, double theta, bool f64, float *angles);
/* cos and sin of n angles (cos_out may not alias angles; sin_out may). */
void dit_ltx2_rope_cos_sin(const float *angles, int64_t n, float *cos_out, float *sin_out);

#endif
