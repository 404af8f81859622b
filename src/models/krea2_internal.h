/* Krea 2 transformer internals shared by krea2.c (config, weights, load) and
 * krea2_forward.c (the forward). */
#ifndef DIT_MODELS_KREA2_INTERNAL_H
#define DIT_MODELS_KREA2_INTERNAL_H

#include "backend/replay.h"
#include "models/act_space.h"
#include "models/krea2.h"
#include "models/model_weights.h"

/* Krea2Attention: q [Hq*hd, D], k and v [Hkv*hd, D], gate and out [D, D], q/k norms [hd]. */
typedef struct krea2_attn_w {
  dit_tensor to_q, to_k, to_v, to_gate, to_out, norm_q, norm_k;
} krea2_attn_w;

/* A transformer block or a text-fusion block (no table). */
typedef struct krea2_block_w {
  dit_tensor norm1, norm2;
  krea2_attn_w attn;
  dit_tensor ff_gate, ff_up, ff_down;
  dit_tensor table; /* [6, D] scale_shift_table (transformer blocks only) */
} krea2_block_w;

typedef struct krea2_weights {
  dit_tensor img_in_w, img_in_b;
  dit_tensor time_1_w, time_1_b, time_2_w, time_2_b; /* time_embed.linear_1 / linear_2 */
  dit_tensor mod_w, mod_b;                           /* time_mod_proj [6D, D] */
  dit_tensor projector;                              /* text_fusion.projector [1, n_taps] */
  dit_tensor txt_norm, txt_1_w, txt_1_b, txt_2_w, txt_2_b;
  dit_tensor final_table, final_norm, final_w, final_b;
  krea2_block_w *layerwise, *refiner, *blocks;
} krea2_weights;

struct dit_krea2 {
  dit_backend *be;
  dit_krea2_config cfg;
  dit_model_weights mw;
  krea2_weights w;
  void *norms; /* backend block: every Krea2RMSNorm's 1 + weight in F32 (the norm tensors point here) */
  dit_act_space as;
  dit_replay replay; /* the blocks' forward recorded as a graph (GPU backends) */
  void *rope_key;    /* what the RoPE tables in the activation buffer were made from (NULL: none;
                        krea2_forward.c), so that the steps of one image compute them once */
  size_t rope_key_bytes;
};

#endif
