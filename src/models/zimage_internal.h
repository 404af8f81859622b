/* Private parts of the Z-Image transformer shared by its source files: the weights
 * struct (fields named like the checkpoint), the model, the per-call geometry and the
 * activation plan. Not part of any public interface. */
#ifndef DIT_MODELS_ZIMAGE_INTERNAL_H
#define DIT_MODELS_ZIMAGE_INTERNAL_H

#include <stddef.h>

#include "models/act_space.h"
#include "models/model_weights.h"
#include "backend/replay.h"
#include "core/arena.h"
#include "io/safetensors.h"
#include "models/zimage.h"

/* One ZImageTransformerBlock. D = dim, hd = head_dim, Fd = ffn_dim, A = adaln_dim. */
typedef struct zimage_block_w {
  dit_tensor attention_to_q;        /* [D, D] */
  dit_tensor attention_to_k;        /* [D, D] */
  dit_tensor attention_to_v;        /* [D, D] */
  dit_tensor attention_to_out_0;    /* [D, D] */
  dit_tensor attention_norm_q;      /* [hd] (qk_norm only) */
  dit_tensor attention_norm_k;      /* [hd] (qk_norm only) */
  dit_tensor attention_norm1;       /* [D] */
  dit_tensor attention_norm2;       /* [D] */
  dit_tensor ffn_norm1;             /* [D] */
  dit_tensor ffn_norm2;             /* [D] */
  dit_tensor feed_forward_w1;       /* [Fd, D] */
  dit_tensor feed_forward_w2;       /* [D, Fd] */
  dit_tensor feed_forward_w3;       /* [Fd, D] */
  dit_tensor adaLN_modulation_0_w;  /* [4D, A] (modulated blocks only) */
  dit_tensor adaLN_modulation_0_b;  /* [4D] */
  dit_tensor attention_qkv;         /* [3D, D] over to_q, to_k, to_v where they lie back to back
                                       (uploaded or random weights): one GEMM; else data NULL */
  bool modulation;
} zimage_block_w;

typedef struct zimage_weights {
  dit_tensor t_embedder_mlp_0_w;    /* [1024, 256] */
  dit_tensor t_embedder_mlp_0_b;    /* [1024] */
  dit_tensor t_embedder_mlp_2_w;    /* [A, 1024] */
  dit_tensor t_embedder_mlp_2_b;    /* [A] */
  dit_tensor x_embedder_w;          /* all_x_embedder.2-1.weight [D, patch_dim] */
  dit_tensor x_embedder_b;          /* all_x_embedder.2-1.bias [D] */
  dit_tensor cap_embedder_0_w;      /* RMSNorm [cap_feat_dim] */
  dit_tensor cap_embedder_1_w;      /* [D, cap_feat_dim] */
  dit_tensor cap_embedder_1_b;      /* [D] */
  dit_tensor x_pad_token;           /* [1, D] */
  dit_tensor cap_pad_token;         /* [1, D] */
  zimage_block_w *noise_refiner;    /* [n_refiner_layers], modulated */
  zimage_block_w *context_refiner;  /* [n_refiner_layers], not modulated */
  zimage_block_w *layers;           /* [n_layers], modulated */
  dit_tensor final_adaLN_modulation_1_w; /* all_final_layer.2-1.adaLN_modulation.1.weight [D, A] */
  dit_tensor final_adaLN_modulation_1_b; /* [D] */
  dit_tensor final_linear_w;        /* all_final_layer.2-1.linear.weight [patch_dim, D] */
  dit_tensor final_linear_b;        /* [patch_dim] */
} zimage_weights;


/* Geometry of one forward call. */
typedef struct zimage_item {
  int64_t C, F, H, W;   /* latent */
  int64_t Ft, Ht, Wt;   /* token grid */
  int64_t n_img;        /* Ft*Ht*Wt image tokens */
  int64_t x_len;        /* n_img padded to SEQ_MULTI */
  int64_t cap_raw;      /* caption tokens */
  int64_t cap_len;      /* cap_raw padded to SEQ_MULTI */
} zimage_item;

typedef struct zimage_geom {
  int n;                /* batch */
  zimage_item *items;   /* [n] */
  int64_t Sx, Sc, Su;   /* padded batch lengths: image, caption, unified */
  int64_t S_max;        /* max of the three */
  bool x_ragged, c_ragged, u_ragged; /* lengths differ: a key mask is needed */
} zimage_geom;

struct dit_zimage {
  dit_backend *be;
  dit_zimage_config cfg;
  zimage_weights w;
  dit_model_weights mw; /* the checkpoint's files or the backend block w points into */
  dit_act_space as; /* activation dtype, buffer and host scratch (RoPE tables, masks, timesteps) */
  /* geometry whose tables are in `host` and uploaded into `act` (valid when tables_ok):
   * a sampler loop calls forward with the same shapes every step, and only the
   * timesteps change */
  zimage_item *tab_items;
  int tab_n;
  bool tables_ok;
  dit_replay replay; /* the forward's ops as graphs (GPU backends) */
  bool stack_qkv;    /* project q, k, v with one GEMM where the weights allow (default) */
};

/* Host-side tables of one call, laid out in one buffer (uploaded in one piece). */
typedef struct zimage_host_tables {
  float *x_cos, *x_sin;   /* [n, Sx, hd/2] */
  float *c_cos, *c_sin;   /* [n, Sc, hd/2] */
  float *u_cos, *u_sin;   /* [n, Su, hd/2] */
  uint8_t *x_mask, *c_mask, *u_mask; /* [n, S*] 1 = real token */
  float *t_scaled;        /* [n] t * t_scale */
  float *zeros;           /* [D] */
} zimage_host_tables;

/* Bytes of the table buffer for g. */
size_t zimage_host_bytes(const dit_zimage_config *c, const zimage_geom *g);
/* Points the tables into buf (zimage_host_bytes(c, g) bytes, 64-byte aligned). */
void zimage_table_layout(const dit_zimage_config *c, const zimage_geom *g, void *buf, zimage_host_tables *out);
/* Fills what depends on the geometry only: RoPE cos/sin of every position as diffusers'
 * RopeEmbedder builds them, key masks, zeros. */
void zimage_fill_tables(const dit_zimage_config *c, const zimage_geom *g, const zimage_host_tables *h);
/* t_scaled[i] = t[i] * t_scale (float32, as torch). */
void zimage_set_timesteps(const dit_zimage_config *c, int n, const float *t, const zimage_host_tables *h);

/* Reads and validates config.json (zimage.c). */
dit_status zimage_parse_config(const char *path, dit_zimage_config *c, dit_error *err);
/* Checks a config's read fields and fills the derived ones (zimage.c). */
dit_status zimage_check_config(dit_zimage_config *c, const char *what, dit_error *err);

#endif
