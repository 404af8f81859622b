/* LTX2TextConnectors (diffusers' pipelines/ltx2/connectors.py): from Gemma 3's stacked hidden
 * states to the text features of LTX-2's video and audio streams.
 *
 * LTX-2.0: each (sequence, layer) is normalized by its masked mean and range over the real
 * tokens (x 8), one shared projection (text_proj_in) feeds both connectors. LTX-2.3
 * (per_modality_projections): every token's layer vector is RMS-normalized, scaled by
 * sqrt(stream width / caption_channels) and projected per stream. Each connector then puts
 * the real tokens first and fills the rest with its learnable registers, and runs a few
 * transformer blocks (RMSNorm without weights, LTX2Attention with 1-D split RoPE over
 * positions / rope_base_seq_len, GELU-tanh MLP) and a final RMSNorm. */
#ifndef DIT_MODELS_LTX2_CONNECTORS_H
#define DIT_MODELS_LTX2_CONNECTORS_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/cost.h"
#include "core/error.h"

typedef struct dit_ltx2_connector_config {
  int heads, head_dim, layers;
  int registers;  /* num_learnable_registers, 0 for none */
  bool gated;     /* gated attention (LTX-2.3) */
} dit_ltx2_connector_config;

typedef struct dit_ltx2_connectors_config {
  int caption_channels;   /* C: the text encoder's width */
  int proj_in_factor;     /* F: its hidden states (layers + 1) */
  dit_ltx2_connector_config video, audio;
  int rope_base_seq_len;
  double rope_theta;
  bool rope_double_precision;
  bool per_modality;      /* LTX-2.3's per-stream projections */
  int video_hidden_dim, audio_hidden_dim; /* their widths (per_modality) */
  bool proj_bias;
} dit_ltx2_connectors_config;

typedef struct dit_ltx2_connectors dit_ltx2_connectors;

/* Loads component_dir/config.json and its weights (diffusers' names). */
dit_status dit_ltx2_connectors_load(dit_backend *be, const char *component_dir, dit_ltx2_connectors **out,
                                    dit_error *err);
void dit_ltx2_connectors_free(dit_ltx2_connectors *c);
const dit_ltx2_connectors_config *dit_ltx2_connectors_get_config(const dit_ltx2_connectors *c);
/* Output widths: the video and the audio connectors' (heads * head_dim). */
int dit_ltx2_connectors_video_dim(const dit_ltx2_connectors *c);
int dit_ltx2_connectors_audio_dim(const dit_ltx2_connectors *c);

/* hidden [B, S, C, F] F32 in the backend's memory (dit_gemma3_encode_all's output), mask
 * [B*S] host (1 = real token; LTX2Pipeline pads on the left). Writes, in the backend's
 * memory, video [B, S, video_dim] and audio [B, S, audio_dim] F32, and the mask the
 * transformer's cross-attention takes to out_mask [B*S] host (all 1 with registers; the
 * video features of masked rows are zero). The masked normalization runs on the host. */
dit_status dit_ltx2_connectors_forward(dit_ltx2_connectors *c, int B, int S, const float *hidden, const uint8_t *mask,
                                       float *video, float *audio, uint8_t *out_mask, dit_error *err);

/* One dit_ltx2_connectors_forward of B x S (core/cost.h): its FLOPs and what it allocates beyond
 * its output (the host features, the activation space, RoPE tables); *kept: of that, the
 * activation space, which stays with the connectors. */
dit_status dit_ltx2_connectors_cost(const dit_ltx2_connectors *c, int B, int S, dit_cost *out, size_t *kept,
                                    dit_error *err);

#endif
