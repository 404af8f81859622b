/* LTX2Pipeline's sampling helpers on host latents: the packed layouts of the video and audio
 * latents, and the guidance: the transformer's velocities turned into x0
 * predictions, the CFG, spatio-temporal guidance (STG) and modality-isolation deltas added in
 * x0 space, the result rescaled towards the conditional prediction's spread (guidance_rescale),
 * and turned back into the velocity the Euler step takes. Video and audio each have their own
 * scales. */
#ifndef DIT_PIPELINE_LTX2_SAMPLE_H
#define DIT_PIPELINE_LTX2_SAMPLE_H

#include <stddef.h>

typedef struct dit_ltx2_guidance {
  float cfg;       /* guidance_scale (1: off) */
  float stg;       /* stg_scale (0: off) */
  float modality;  /* modality_scale (1: off) */
  float rescale;   /* guidance_rescale (0: off) */
} dit_ltx2_guidance;

/* LTX2Pipeline's defaults: video CFG 3, STG 1, modality 3, rescale 0.7; audio CFG 7 and the
 * video's others. */
void dit_ltx2_guidance_defaults(dit_ltx2_guidance *video, dit_ltx2_guidance *audio);

/* v_out[n] = the guided velocity for one item of latents x[n] at sigma (> 0) from the
 * conditional velocity v_cond and, each NULL when its term is off, the unconditional (CFG),
 * the STG-perturbed and the modality-isolated ones. v_out may alias none of the inputs but
 * v_cond. Returns -1 (nothing written) when sigma <= 0 or the rescale meets a zero spread. */
int dit_ltx2_guide(const dit_ltx2_guidance *g, size_t n, const float *x, float sigma, const float *v_cond,
                   const float *v_uncond, const float *v_stg, const float *v_iso, float *v_out);

/* Video latents [C, F, H, W] (one item, channel-major: how torch.randn draws them) as the
 * transformer's tokens [F*H*W, C] (_pack_latents with patch 1), and back (_unpack_latents). */
void dit_ltx2_pack_video(const float *in, int C, int F, int H, int W, float *out);
void dit_ltx2_unpack_video(const float *in, int C, int F, int H, int W, float *out);
/* Audio latents [C, L, M] (channels, latent frames, latent mel bins) as tokens [L, C*M]
 * (_pack_audio_latents without patches), and back. */
void dit_ltx2_pack_audio(const float *in, int C, int L, int M, float *out);
void dit_ltx2_unpack_audio(const float *in, int C, int L, int M, float *out);

#endif
