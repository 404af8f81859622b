/* LTX-2 pipeline (diffusers LTX2Pipeline, text to video with sound; LTX-2.0 and 2.3). Mirrors
 * LTX2Pipeline.__call__ for one prompt and one clip: the prompt (stripped) and, under
 * guidance, the negative prompt ("" by default) tokenized to max_sequence_length with left
 * padding, Gemma 3's stacked hidden states, the text connectors over [negative, positive],
 * torch-CPU noise (video [C, F, H, W] then audio [C, L, M] from one generator, packed), the
 * schedule (np.linspace sigmas shifted by calculate_shift over the video tokens), per step the
 * transformer's conditional + unconditional batch, its spatio-temporal-guidance (STG) run and
 * its modality-isolated run, the guidance of ltx2_sample.h and the Euler step of both streams,
 * then the video VAE (denormalized latents) and the audio VAE + vocoder. The family's row is
 * dit_family_ltx2; dit_ltx2_generate_with is its generate with the pipeline's own options. */
#ifndef DIT_PIPELINE_LTX2_PIPELINE_H
#define DIT_PIPELINE_LTX2_PIPELINE_H

#include "pipeline/family.h"
#include "pipeline/family_bench.h"
#include "pipeline/ltx2_sample.h"

#define DIT_LTX2_MAX_STG_BLOCKS 16

/* LTX2Pipeline's arguments beyond dit_gen_params. */
typedef struct dit_ltx2_opts {
  dit_ltx2_guidance video, audio; /* video.cfg is replaced by dit_gen_params.guidance */
  int stg_blocks[DIT_LTX2_MAX_STG_BLOCKS]; /* spatio_temporal_guidance_blocks */
  int n_stg_blocks;
  /* when not NULL: the decoded video [3, T, H, W] in model space (malloc'd), as the VAE gave it */
  float **video_out;
} dit_ltx2_opts;

/* The pipeline's defaults: ltx2_sample.h's scales, STG at block 28 (the pipeline's default;
 * a transformer of 28 blocks or fewer runs without STG). */
void dit_ltx2_opts_default(dit_ltx2_opts *o);

/* "ltx2" (LTX-2.0) and "ltx23" (LTX-2.3) (ltx2_bench.c). */
extern const dit_bench_variant dit_ltx2_bench[];

/* LTX2Pipeline's audio latent frames for `frames` video frames at fps: the clip's duration at
 * the audio VAE's rate (sample_rate / hop / 4 latent frames a second), rounded half to even
 * as Python's round; at least 1. */
int dit_ltx2_audio_latent_frames(int frames, double fps, int sample_rate, int hop);

/* The family's generate_clip with options o (p resolved as dit_model_generate_clip does). */
dit_status dit_ltx2_generate_with(const dit_model_rt *rt, void *state, const dit_gen_params *p, const dit_ltx2_opts *o,
                                  dit_clip *out, dit_gen_stats *st, dit_error *err);

#endif
