/* Private parts of the FLUX.2 transformer shared by flux2.c (config, weights, load) and
 * flux2_forward.c (the forward pass): the weights struct, named like the checkpoint,
 * and the model. Not part of any public interface. */
#ifndef DIT_MODELS_FLUX2_INTERNAL_H
#define DIT_MODELS_FLUX2_INTERNAL_H

#include <stddef.h>

#include "models/act_space.h"
#include "models/model_weights.h"
#include "backend/replay.h"
#include "io/safetensors.h"
#include "models/flux2.h"

/* A linear layer's weight [N, K] and bias [N] (bias.data NULL: none, FLUX.2 throughout). */
typedef struct flux_lin {
  dit_tensor w, b;
} flux_lin;

/* A double-stream block. D = dim, hd = head_dim, F = mlp_hidden. Names: diffusers'. */
typedef struct flux2_double_w {
  flux_lin mod_img, mod_txt;               /* FLUX.1: norm1.linear, norm1_context.linear [6D, D] */
  flux_lin to_q, to_k, to_v;               /* attn.to_{q,k,v} [D, D] (image stream) */
  dit_tensor norm_q, norm_k;               /* attn.norm_{q,k} [hd] */
  flux_lin add_q_proj, add_k_proj, add_v_proj; /* attn.add_{q,k,v}_proj [D, D] (text stream) */
  dit_tensor norm_added_q, norm_added_k;   /* [hd] */
  flux_lin to_out_0;                       /* attn.to_out.0 [D, D] */
  flux_lin to_add_out;                     /* attn.to_add_out [D, D] */
  flux_lin ff_in, ff_out;                  /* FLUX.2 ff.linear_in [2F, D] (SwiGLU halves), ff.linear_out [D, F];
                                              FLUX.1 ff.net.0.proj [F, D] (tanh-GELU), ff.net.2 [D, F] */
  flux_lin ffc_in, ffc_out;                /* ff_context.* */
  flux_lin img_qkv, txt_qkv;               /* FLUX.1 single file: fused [3D, D] rows (to_q/k/v and
                                              add_*_proj are row views of them) */
} flux2_double_w;

/* A single-stream block. */
typedef struct flux2_single_w {
  flux_lin mod;                            /* FLUX.1: norm.linear [3D, D] */
  dit_tensor to_qkv_mlp_proj;              /* FLUX.2: attn.to_qkv_mlp_proj [3D + 2F, D] */
  flux_lin qkv;                            /* FLUX.1 with fused q, k, v rows [3D, D] (a single file's
                                              linear1 rows), else w.data NULL and to_q/k/v are used */
  flux_lin to_q, to_k, to_v;               /* FLUX.1: attn.to_{q,k,v} [D, D] */
  flux_lin proj_mlp;                       /* FLUX.1: proj_mlp [F, D] */
  dit_tensor norm_q, norm_k;               /* [hd] */
  flux_lin to_out;                         /* FLUX.2 attn.to_out, FLUX.1 proj_out [D, D + F] */
  flux_lin linear1;                        /* FLUX.1 single file: [3D + F, D] (qkv and proj_mlp are row views) */
} flux2_single_w;

typedef struct flux2_weights {
  flux_lin t_linear_1, t_linear_2;         /* timestep_embedder.linear_{1,2} [D, Tc], [D, D] */
  flux_lin g_linear_1, g_linear_2;         /* guidance_embedder.* (guidance_embeds only) */
  flux_lin p_linear_1, p_linear_2;         /* FLUX.1: text_embedder.linear_{1,2} [D, pooled_dim], [D, D] */
  dit_tensor mod_img, mod_txt;             /* FLUX.2: double_stream_modulation_{img,txt}.linear [6D, D] */
  dit_tensor mod_single;                   /* FLUX.2: single_stream_modulation.linear [3D, D] */
  flux_lin x_embedder;                     /* [D, in_channels] */
  flux_lin context_embedder;               /* [D, joint_attention_dim] */
  flux2_double_w *blocks;                  /* transformer_blocks [n_layers] */
  flux2_single_w *single;                  /* single_transformer_blocks [n_single_layers] */
  flux_lin norm_out;                       /* norm_out.linear [2D, D] (scale, shift; the reverse when
                                              norm_out_shift_first: a FLUX.1 single file's final_layer) */
  bool norm_out_shift_first;
  flux_lin proj_out;                       /* [out_channels, D] */
} flux2_weights;

struct dit_flux2 {
  dit_backend *be;
  dit_flux2_config cfg;
  flux2_weights w;
  dit_model_weights mw; /* the checkpoint's files or the backend block w points into */
  bool bfl_names;       /* FLUX.1 loaded from a single file: its table holds BFL's names (flux1.c) */
  dit_lowrank *view_terms; /* bfl_names: the low-rank terms of the fused tensors' row views (flux1.c) */
  dit_act_space as;   /* activation dtype, buffer and host scratch (RoPE tables, timesteps) */
  /* ids [text; image] x 4 whose RoPE tables are uploaded at rope_tab (valid when rope_ok) */
  float *rope_ids;
  int64_t rope_St, rope_Si;
  const void *rope_tab;
  bool rope_ok;
  dit_replay replay; /* the forward's ops as graphs (GPU backends) */
};

/* ComfyUI saves a transformer with this prefix on every name. */
#define FLUX_COMFY_PREFIX "model.diffusion_model."

/* The renames both FLUX generations share, first in their tables: BFL's q/k RMSNorm scales
 * as diffusers names (listed before the block prefixes are renamed, so `within` tells a
 * double block's from a single block's both ways: diffusers names them alike), then the
 * block prefixes. */
/* The diffusers names whose two row halves lie in the other order in BFL's checkpoints (the
 * final modulation: scale then shift in diffusers, shift then scale in BFL's files), for the
 * remaps' `swapped` lists. */
#define FLUX_BFL_SWAPPED {"norm_out.linear.weight", NULL}
#define FLUX_BFL_BLOCK_RENAMES                                                     \
  {".img_attn.norm.query_norm.scale", ".attn.norm_q.weight", "double_blocks."},     \
      {".img_attn.norm.key_norm.scale", ".attn.norm_k.weight", "double_blocks."},   \
      {".txt_attn.norm.query_norm.scale", ".attn.norm_added_q.weight", "double_blocks."}, \
      {".txt_attn.norm.key_norm.scale", ".attn.norm_added_k.weight", "double_blocks."},   \
      {".norm.query_norm.scale", ".attn.norm_q.weight", "single_blocks."},          \
      {".norm.key_norm.scale", ".attn.norm_k.weight", "single_blocks."},           \
      {"double_blocks.", "transformer_blocks.", NULL},                              \
      {"single_blocks.", "single_transformer_blocks.", NULL}

/* Sets m's LoRAs (models/lora.h) over the tensors list names, with orig the original names'
 * remap (NULL: none); flux2.c. */
dit_status flux2_set_loras(dit_flux2 *m, void (*list)(dit_flux2 *, dit_wtable *), const dit_wremap *orig,
                           const dit_lora *l, int n, dit_error *err);
/* A model on be with no weights yet (flux2.c). */
dit_flux2 *flux2_new_model(dit_backend *be);
/* Allocates the block arrays of m->cfg (flux2.c). */
dit_status flux2_alloc_blocks(dit_flux2 *m, dit_error *err);
/* Range checks of a caller-made config's read fields (flux2.c); who names it. */
dit_status flux2_check_sizes(const dit_flux2_config *c, const char *who, dit_error *err);
/* Reads and validates config.json (flux2.c). */
dit_status flux2_parse_config(const char *path, dit_flux2_config *c, dit_error *err);
/* Checks a config's read fields and fills the derived ones (flux2.c). */
dit_status flux2_check_config(dit_flux2_config *c, const char *what, dit_error *err);

#endif
