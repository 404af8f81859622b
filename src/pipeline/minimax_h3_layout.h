/* MiniMax-H3's packed sequence for text to video + audio (diffusers' MiniMaxH3PrepareLayoutStep without
 * keyframes): [text N | audio channels x Na (channel 0's rows, then channel 1's) | video F x (h/ph) x (w/pw)],
 * with each row's (t, h, w) RoPE coordinates in float64 as the pipeline builds them, its modality tag and
 * the three index lists the transformer takes (models/minimax_h3.h). */
#ifndef DIT_PIPELINE_MINIMAX_H3_LAYOUT_H
#define DIT_PIPELINE_MINIMAX_H3_LAYOUT_H

#include <stdint.h>

#include "core/error.h"

typedef struct dit_h3_layout_in {
  int n_text;                /* text rows */
  int frames, lh, lw;        /* latent frames and latent height / width */
  int patch_h, patch_w;      /* the transformer's spatial patch */
  int audio_latents;         /* audio latents per channel */
  int audio_channels;        /* channels the soundtrack is packed over (2: stereo) */
} dit_h3_layout_in;

typedef struct dit_h3_layout {
  int64_t S, n_text, n_audio, n_video;
  double *positions;         /* [S, 3] */
  int32_t *tags;             /* [S]: text 1, audio 2, video 0 */
  int32_t *text_index, *audio_index, *video_index;
} dit_h3_layout;

/* Builds the layout (every array malloc'd; dit_h3_layout_free). DIT_ERR_INVALID_ARG for sizes out of range
 * or latents not divisible by the patch. */
dit_status dit_h3_layout_make(const dit_h3_layout_in *in, dit_h3_layout *out, dit_error *err);
void dit_h3_layout_free(dit_h3_layout *l);

/* The grids the layout is made of: one spatial axis of n = dim / patch coordinates (np.linspace(left, left
 * + ratio, n, endpoint=False) * 32, ratio = dim / sqrt_area, left = (1 - ratio) / 2), and the rotary time of
 * `frames` latent frames from origin (spans 5/3 x (1, 4, 4, 4, 4) repeating, summed in order). */
void dit_h3_spatial_grid(int dim, int patch, double sqrt_area, double *out);
void dit_h3_temporal_grid(int frames, double origin, double *out);

#endif
