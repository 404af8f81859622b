/* The LTX-2 transformer's weights and buffers, shared by its loader (ltx2.c) and its forward
 * pass (ltx2_forward.c). */
#ifndef DIT_MODELS_LTX2_INTERNAL_H
#define DIT_MODELS_LTX2_INTERNAL_H

#include "io/safetensors.h"
#include "models/act_space.h"
#include "models/ltx2.h"
#include "models/ltx2_attn.h"
#include "models/model_weights.h"

/* LTX2AdaLayerNormSingle: timestep -> sinusoid(256) -> linear_1, SiLU, linear_2 (the embedded
 * timestep) -> SiLU, linear -> n * dim modulation values. */
typedef struct ltx2_adaln {
  int n, dim;
  dit_tensor l1, l1_b, l2, l2_b, lin, lin_b;
} ltx2_adaln;

typedef struct ltx2_ff {
  dit_tensor w1, b1, w2, b2; /* [4D, D], [4D], [D, 4D], [D] */
} ltx2_ff;

/* One stream's half of a block. */
typedef struct ltx2_half {
  dit_ltx2_attn attn1, attn2, cross; /* self, text, and the cross-modal attention whose queries are this stream's */
  ltx2_ff ff;
  dit_tensor table;        /* scale_shift_table [6 or 9, D] */
  dit_tensor prompt_table; /* prompt_scale_shift_table [2, D] (2.3) */
  dit_tensor ca_table;     /* *_a2v_cross_attn_scale_shift_table [5, D] */
} ltx2_half;

typedef struct ltx2_block {
  ltx2_half v, a;
} ltx2_block;

/* One stream's model-level weights. */
typedef struct ltx2_stream {
  int D;                   /* inner width */
  dit_tensor proj_in, proj_in_b, proj_out, proj_out_b;
  dit_tensor cap1, cap1_b, cap2, cap2_b; /* caption projection (2.0) */
  ltx2_adaln time, ca_scale_shift, ca_gate, prompt;
  dit_tensor table;        /* scale_shift_table [2, D] (the output's shift, scale) */
} ltx2_stream;

/* The RoPE tables of the last call's geometry (one backend block): they depend on the latent
 * grid, the frame rate and the audio length only, so the steps of a video share them. */
typedef struct ltx2_rope_cache {
  bool valid;
  int frames, height, width, audio_frames;
  float fps;
  void *block;
  dit_tensor rope[2][2], crope[2][2]; /* [stream][cos, sin]: self-attention, cross-modal */
} ltx2_rope_cache;

struct dit_ltx2 {
  dit_backend *be;
  dit_ltx2_config cfg;
  dit_model_weights w;
  dit_act_space as;
  ltx2_stream v, a;
  ltx2_block *blocks;
  ltx2_rope_cache rope;
};

#endif
