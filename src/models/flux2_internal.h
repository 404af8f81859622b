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

/* Flux2TransformerBlock (double stream). D = dim, hd = head_dim, F = mlp_hidden. No biases. */
typedef struct flux2_double_w {
  dit_tensor to_q, to_k, to_v;             /* attn.to_{q,k,v} [D, D] (image stream) */
  dit_tensor norm_q, norm_k;               /* attn.norm_{q,k} [hd] */
  dit_tensor add_q_proj, add_k_proj, add_v_proj; /* attn.add_{q,k,v}_proj [D, D] (text stream) */
  dit_tensor norm_added_q, norm_added_k;   /* [hd] */
  dit_tensor to_out_0;                     /* attn.to_out.0 [D, D] */
  dit_tensor to_add_out;                   /* attn.to_add_out [D, D] */
  dit_tensor ff_linear_in, ff_linear_out;  /* ff.linear_in [2F, D], ff.linear_out [D, F] */
  dit_tensor ffc_linear_in, ffc_linear_out; /* ff_context.* */
} flux2_double_w;

/* Flux2SingleTransformerBlock. */
typedef struct flux2_single_w {
  dit_tensor to_qkv_mlp_proj;              /* attn.to_qkv_mlp_proj [3D + 2F, D] */
  dit_tensor norm_q, norm_k;               /* [hd] */
  dit_tensor to_out;                       /* attn.to_out [D, D + F] */
} flux2_single_w;

typedef struct flux2_weights {
  dit_tensor t_linear_1, t_linear_2;       /* time_guidance_embed.timestep_embedder.linear_{1,2} [D, Tc], [D, D] */
  dit_tensor g_linear_1, g_linear_2;       /* ...guidance_embedder.* (guidance_embeds only) */
  dit_tensor mod_img, mod_txt;             /* double_stream_modulation_{img,txt}.linear [6D, D] */
  dit_tensor mod_single;                   /* single_stream_modulation.linear [3D, D] */
  dit_tensor x_embedder;                   /* [D, in_channels] */
  dit_tensor context_embedder;             /* [D, joint_attention_dim] */
  flux2_double_w *blocks;                  /* transformer_blocks [n_layers] */
  flux2_single_w *single;                  /* single_transformer_blocks [n_single_layers] */
  dit_tensor norm_out;                     /* norm_out.linear [2D, D] (scale, shift) */
  dit_tensor proj_out;                     /* [out_channels, D] */
} flux2_weights;

struct dit_flux2 {
  dit_backend *be;
  dit_flux2_config cfg;
  flux2_weights w;
  dit_model_weights mw; /* the checkpoint's files or the backend block w points into */
  dit_act_space as;   /* activation dtype, buffer and host scratch (RoPE tables, timesteps) */
  /* ids [text; image] x 4 whose RoPE tables are uploaded at rope_tab (valid when rope_ok) */
  float *rope_ids;
  int64_t rope_St, rope_Si;
  const void *rope_tab;
  bool rope_ok;
  dit_replay replay; /* the forward's ops as graphs (GPU backends) */
};

/* Reads and validates config.json (flux2.c). */
dit_status flux2_parse_config(const char *path, dit_flux2_config *c, dit_error *err);
/* Checks a config's read fields and fills the derived ones (flux2.c). */
dit_status flux2_check_config(dit_flux2_config *c, const char *what, dit_error *err);

#endif
