/* Pieces every pipeline shares: the NaN/Inf guard that names the stage, the decoder
 * output's postprocessing to 8-bit RGB (as diffusers' VaeImageProcessor does), and the stage
 * times. */
#ifndef DIT_PIPELINE_COMMON_H
#define DIT_PIPELINE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/ctx.h"

/* DIT_ERR_NUMERIC naming `stage` and the first non-finite element, or DIT_OK. */
dit_status dit_check_finite(const float *x, size_t n, const char *stage, dit_error *err);

/* img [3, H, W] decoder output in model space -> out (malloc'd 8-bit RGB, H x W):
 * (x / 2 + 0.5).clamp(0, 1), then round(x * 255) half to even. NaN/Inf is an error
 * naming the VAE stage. On failure out is untouched. */
dit_status dit_image_from_decoder(const float *img, int H, int W, dit_image *out, dit_error *err);
/* The same for a video's frames: vid [3, T, H, W] -> *rgb (malloc'd, T frames of H x W x 3). */
dit_status dit_frames_from_decoder(const float *vid, int T, int H, int W, uint8_t **rgb, dit_error *err);

/* p->on_stage(p->user, stage) when the caller set it. */
void dit_stage_begin(const dit_gen_params *p, const char *stage);

/* The stage times of one generate from the clock at its start, after the text encoder,
 * after the transformer's load, after the loop and at its end. */
void dit_fill_stats(dit_gen_stats *st, const double t[5], int steps);
/* diffusers' _pack_latents with 2 x 2 patches (FluxPipeline, Krea2Pipeline): a latent [C, 2 lh,
 * 2 lw] as lh * lw tokens of 4 C channels ordered (c, dy, dx); and back. */
void dit_pack_latents_2x2(const float *chw, int C, int lh, int lw, float *tokens);
void dit_unpack_latents_2x2(const float *tokens, int C, int lh, int lw, float *chw);

#endif
