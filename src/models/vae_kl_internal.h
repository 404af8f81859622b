/* AutoencoderKL internals shared by vae_kl.c (config, decoder weights, loading),
 * vae_kl_run.c (the activation plan, the blocks both halves share, tiling),
 * vae_kl_decode.c and vae_kl_encode.c (the two forward passes). Not part of the API. */
#ifndef DIT_MODELS_VAE_KL_INTERNAL_H
#define DIT_MODELS_VAE_KL_INTERNAL_H

#include "io/safetensors.h"
#include "models/vae_kl.h"

#define DIT_VAE_KL_EPS 1e-6f /* every GroupNorm of both halves (resnet_eps, conv_norm_out) */

/* ResnetBlock2D without time embedding: norm1 -> silu -> conv1 -> norm2 -> silu -> conv2,
 * plus the input (through a 1x1 conv_shortcut when cin != cout). */
typedef struct vae_resnet {
  int cin, cout;
  dit_tensor norm1_w, norm1_b; /* [cin] */
  dit_tensor conv1_w, conv1_b; /* [cout, cin, 3, 3], [cout] */
  dit_tensor norm2_w, norm2_b; /* [cout] */
  dit_tensor conv2_w, conv2_b; /* [cout, cout, 3, 3], [cout] */
  dit_tensor short_w, short_b; /* conv_shortcut [cout, cin, 1, 1], [cout]; data NULL when cin == cout */
} vae_resnet;

/* The mid block's Attention: group_norm, one head of dim c over the h*w tokens,
 * residual connection, rescale_output_factor 1. */
typedef struct vae_attn {
  int c;
  dit_tensor gn_w, gn_b; /* group_norm [c] */
  dit_tensor q_w, q_b;   /* to_q [c, c], [c] */
  dit_tensor k_w, k_b;   /* to_k [c, c], [c] */
  dit_tensor v_w, v_b;   /* to_v [c, c], [c] */
  dit_tensor o_w, o_b;   /* to_out.0 [c, c], [c] */
} vae_attn;

/* UpDecoderBlock2D: layers_per_block + 1 resnets, then (all but the last) Upsample2D:
 * nearest 2x and a 3x3 conv. */
typedef struct vae_up_block {
  int cin, cout, n_resnets;
  vae_resnet *resnets;  /* [n_resnets], points into dit_vae_kl.resnet_pool */
  bool upsample;
  dit_tensor up_w, up_b; /* upsamplers.0.conv [cout, cout, 3, 3], [cout] */
} vae_up_block;

/* DownEncoderBlock2D: layers_per_block resnets, then (all but the last) Downsample2D:
 * zero padding of one row and one column at the bottom and right, a 3x3 conv of stride 2. */
typedef struct vae_down_block {
  int cin, cout, n_resnets;
  vae_resnet *resnets; /* [n_resnets], points into dit_vae_kl_enc.resnet_pool */
  bool downsample;
  dit_tensor down_w, down_b; /* downsamplers.0.conv [cout, cout, 3, 3], [cout] */
} vae_down_block;

struct dit_vae_kl_enc {
  dit_backend *be;
  dit_vae_kl_config cfg;
  dit_dtype adt;
  dit_weights *weights;
  void *owned;
  void *wblock;
  dit_tensor conv_in_w, conv_in_b; /* encoder.conv_in [C0, in, 3, 3] */
  vae_down_block down[DIT_VAE_KL_MAX_LEVELS];
  vae_resnet *resnet_pool;
  vae_resnet mid_res[2];
  vae_attn mid_attn;
  dit_tensor norm_out_w, norm_out_b; /* encoder.conv_norm_out [C_top] */
  dit_tensor conv_out_w, conv_out_b; /* encoder.conv_out [2L, C_top, 3, 3] */
  dit_tensor qc_w, qc_b;             /* quant_conv [2L, 2L, 1, 1]; data NULL when unused */
};

struct dit_vae_kl {
  dit_backend *be;
  dit_vae_kl_config cfg;
  dit_dtype adt;         /* activation dtype of the decode: F32 (default), or BF16 on GPU backends */
  dit_weights *weights;  /* the mapped checkpoint (load) or NULL */
  void *owned;           /* the random-weights blob (create_random) or NULL */
  void *wblock;          /* device copy of every weight (non-host backends) or NULL */
  dit_tensor pq_w, pq_b; /* post_quant_conv [L, L, 1, 1], [L]; data NULL when unused */
  dit_tensor conv_in_w, conv_in_b; /* [C_top, L, 3, 3], [C_top] */
  vae_resnet mid_res[2];           /* mid_block.resnets.{0,1}, C_top -> C_top */
  vae_attn mid_attn;               /* mid_block.attentions.0 (when mid_block_add_attention) */
  vae_up_block up[DIT_VAE_KL_MAX_LEVELS]; /* up_blocks.i, i = 0 at the latent resolution */
  vae_resnet *resnet_pool;
  dit_tensor norm_out_w, norm_out_b; /* conv_norm_out [C0] */
  dit_tensor conv_out_w, conv_out_b; /* [out, C0, 3, 3], [out] */
  struct vae_run *keep;              /* GPU: the last decode's activation buffers (NULL: none) */
};

/* dit_vae_kl_load for any class of the AutoencoderKL family that shares its decoder
 * (config.json's _class_name must be `cls`, e.g. "AutoencoderKLFlux2"; its
 * decoder_block_out_channels, when set, replaces block_out_channels). Stored tensors
 * starting with one of extra_ignore (NULL-terminated, at most 13, may be NULL) are left
 * for the caller, who can read them through m->weights. */
dit_status vae_kl_load_class(dit_backend *be, const char *component_dir, const char *cls,
                             const char *const *extra_ignore, dit_vae_kl **out, dit_error *err);

/* Weight-table entries (vae_kl.c): a conv's weight [co, ci, k, k] and bias, a norm's scale
 * and bias [c], a linear's [co, ci] and bias, and a ResnetBlock2D's tensors under `base`. */
void vae_kl_resnet_init(vae_resnet *r, int cin, int cout);
void vae_kl_add_conv(dit_wtable *t, dit_tensor *w, dit_tensor *b, int co, int ci, int k, const char *name);
void vae_kl_add_vec(dit_wtable *t, dit_tensor *w, dit_tensor *b, int c, const char *name);
void vae_kl_add_resnet(dit_wtable *t, vae_resnet *r, const char *base);
/* The mid block's attention under `base` (e.g. "decoder.mid_block.attentions.0"). */
void vae_kl_add_attn(dit_wtable *t, vae_attn *a, const char *base);
/* Reads an AutoencoderKL-family config.json (class cls) into cfg. */
dit_status vae_kl_read_config(const char *path, const char *cls, dit_vae_kl_config *cfg, dit_error *err);
/* On a device backend, copies every weight of t into one allocation (*wblock), F32 conv
 * kernels and matrices as BF16 (the GPU runs a VAE in bf16), and drops the host copies
 * (*weights closed, *owned freed); nothing to do on the CPU. */
dit_status vae_kl_to_device(dit_backend *be, const dit_wtable *t, void **wblock, dit_weights **weights, void **owned,
                            dit_error *err);
/* Fills every entry of t with deterministic pseudo-random BF16 values (seed) in one malloc'd
 * blob (*owned), scaled so activations stay O(1), then (vae_kl_to_device) uploads them on a
 * device backend. */
dit_status vae_kl_fill_random(dit_backend *be, dit_wtable *t, uint64_t seed, void **wblock, dit_weights **weights,
                              void **owned, dit_error *err);
/* Frees what a decoder or an encoder holds besides its struct: the mapped files, the device
 * copy, the random blob, the resnet pool. */
void vae_kl_release(dit_backend *be, dit_weights *weights, void *wblock, void *owned, void *pool);

/* The LDM ("CompVis") naming of a single checkpoint file, vae_kl_ldm.c. */
/* true when w names its tensors the LDM way (decoder.mid.block_1.norm1.weight or
 * encoder.mid.block_1.norm1.weight exists). */
bool vae_kl_ldm_detect(const dit_weights *w);
/* Renames every entry of t (built with the diffusers names for a decoder or an encoder of
 * n_levels) to its LDM name; the attention's q/k/v/proj_out weights are then expected as the
 * 1x1 convolutions [C, C, 1, 1] LDM stores, unless w holds them as [C, C]. */
dit_status vae_kl_ldm_rename(dit_wtable *t, const dit_weights *w, int n_levels, dit_error *err);
/* After binding: the attention weights bound as [C, C, 1, 1] are described as [C, C]
 * (the same data), in their destinations and in t. */
void vae_kl_ldm_flatten(dit_wtable *t);

/* ---- the forward machinery both halves share (vae_kl_run.c) ----
 * Activations live in three ping-pong buffers plus one scratch for the mid block's q, k, v,
 * in the model's activation dtype, a small F32 buffer for the input and output on their way
 * to and from the host (non-F32 activations), and one zero element (the encoder's padding).
 * A forward pass runs twice with the same code: first as a plan (no op is called; every
 * buffer records the largest tensor placed in it, FLOPs are counted), then for real in
 * buffers of exactly those sizes. */
#define VAE_NBUF 6
#define VAE_ATTN_BUF 3
#define VAE_IO_BUF 4
#define VAE_ZERO_BUF 5

typedef struct vae_run vae_run;
/* One forward pass of `model` on in [cin, h_in, w_in] (host F32) into out (host F32); h, w
 * are the LATENT sizes of the piece. in and out are NULL while planning. */
typedef dit_status (*vae_fwd_fn)(vae_run *r, const void *model, const float *in, float *out, int h, int w,
                                 dit_error *err);
struct vae_run {
  dit_backend *be;
  dit_device dev; /* tag of the backend's memory */
  bool plan;      /* measuring pass: record sizes and FLOPs, call no op */
  dit_dtype adt;  /* activation dtype */
  size_t es;      /* its element size */
  void *buf[VAE_NBUF];
  size_t cap[VAE_NBUF]; /* bytes */
  double flops;
  vae_fwd_fn fwd;   /* what the buffers were planned for (a kept run: vae_call.keep) */
  int h, w;
};

/* An activation [1, c, h, w] held in buffer `buf`. */
typedef struct vact {
  int buf, c, h, w;
} vact;

/* Adds "context: " to a failure's message and returns its status. */
#define VAE_STAGE(expr, ...)                  \
  do {                                        \
    dit_status stage_s_ = (expr);             \
    if (stage_s_ != DIT_OK) {                 \
      dit_error_prefix(err, __VA_ARGS__);     \
      return stage_s_;                        \
    }                                         \
  } while (0)

dit_tensor vae_act2(const vae_run *r, void *p, int64_t d0, int64_t d1);
dit_tensor vae_act4(const vae_run *r, void *p, int64_t d0, int64_t d1, int64_t d2, int64_t d3);
/* p advanced by n activation elements (NULL stays NULL while planning). */
void *vae_elp(const vae_run *r, void *p, int64_t n);
/* The k-th (0 or 1) ping-pong buffer other than `used`. */
int vae_other(int used, int k);
/* Records (plan) or checks (real pass) that buffer i holds `need` bytes. */
dit_status vae_need_bytes(vae_run *r, int i, size_t need, dit_error *err);
/* [1, c, h, w] at element offset off of buffer i (vae_view: offset 0). */
dit_status vae_view_at(vae_run *r, dit_tensor *t, int i, size_t off, int64_t c, int64_t h, int64_t w,
                       dit_error *err);
dit_status vae_view(vae_run *r, dit_tensor *t, int i, int64_t c, int64_t h, int64_t w, dit_error *err);
/* Host F32 [c, h, w] into an activation [1, c, h, w] in buffer i (converted on the device
 * when activations are not F32). */
dit_status vae_input(vae_run *r, dit_tensor *t, int i, const float *src, int64_t c, int64_t h, int64_t w,
                     dit_error *err);
/* An activation into host F32 memory (converted on the device first when not F32). */
dit_status vae_output(vae_run *r, const dit_tensor *t, float *dst, dit_error *err);
/* A [1, c, rows, cols] view of the zero element (all strides 0) for padding copies. */
dit_status vae_zeros(vae_run *r, dit_tensor *t, int64_t c, int64_t rows, int64_t cols, dit_error *err);

/* The ops (skipped while planning; conv and linear count FLOPs). */
dit_status vae_conv(vae_run *r, dit_tensor *y, const dit_tensor *x, const dit_tensor *w, const dit_tensor *b,
                    int stride, int pad, dit_error *err);
/* The blocks' norm: GroupNorm of `groups` (eps DIT_VAE_KL_EPS, affine w, b), or with groups =
 * VAE_CHANNEL_RMS the Qwen-Image VAE's RMS_norm over the channels of each pixel (scale w; b
 * unused); SiLU after it when silu. */
#define VAE_CHANNEL_RMS 0
dit_status vae_gnorm(vae_run *r, dit_tensor *y, const dit_tensor *x, int groups, const dit_tensor *w,
                     const dit_tensor *b, bool silu, dit_error *err);
dit_status vae_add(vae_run *r, dit_tensor *y, const dit_tensor *a, const dit_tensor *b, dit_error *err);
dit_status vae_copy(vae_run *r, dit_tensor *dst, const dit_tensor *src, dit_error *err);

/* ResnetBlock2D (the output replaces *x) and the mid block's attention. */
dit_status vae_resnet_fwd(vae_run *r, const vae_resnet *rn, int groups, vact *x, dit_error *err);
dit_status vae_attn_fwd(vae_run *r, const vae_attn *at, int groups, vact *x, dit_error *err);
/* Upsample2D (and the Qwen-Image VAE's spatial resample): nearest 2x then the 3x3 conv up_w
 * (its output channels up_w.shape[0]); the output replaces *x. */
dit_status vae_upsample_fwd(vae_run *r, const vae_up_block *ub, vact *x, dit_error *err);
/* mid_block: resnet, attention (when at is not NULL), resnet. */
dit_status vae_mid_fwd(vae_run *r, const vae_resnet res[2], const vae_attn *at, int groups, vact *x,
                       const char *half, dit_error *err);

/* Plans fwd on an h x w (latent) piece and allocates its buffers (nothing stays allocated
 * on failure); vae_run_plan only plans (sizes and FLOPs). */
dit_status vae_run_plan(vae_run *r, dit_backend *be, dit_dtype adt, vae_fwd_fn fwd, const void *model, int h, int w,
                        dit_error *err);
dit_status vae_run_init(vae_run *r, dit_backend *be, dit_dtype adt, vae_fwd_fn fwd, const void *model, int h, int w,
                        const char *what, dit_error *err);
void vae_run_free(vae_run *r);
size_t vae_run_bytes(const vae_run *r);

/* Tiled forward: the input [cin, fi*h, fi*w] is cut into th x tw (latent) tiles whose
 * neighbours overlap by at least ov latent pixels (the fewest tiles, spread evenly); each
 * tile's output [cout, fo*th, fo*tw] is blended into out [cout, fo*h, fo*w] with weights
 * that ramp linearly across each overlap, normalised by their sum. */
typedef struct vae_tiling {
  int h, w, th, tw, cin, fi, cout, fo;
  int ny, nx, *ys, *xs;
  float *tin, *tout, *wy, *wx, *wsum;
} vae_tiling;
dit_status vae_tiling_init(vae_tiling *ts, int h, int w, int th, int tw, int ov, int cin, int fi, int cout, int fo,
                           const char *what, dit_error *err);
dit_status vae_tiling_run(vae_run *r, vae_fwd_fn fwd, const void *model, vae_tiling *ts, const float *in, float *out,
                          dit_error *err);
void vae_tiling_free(vae_tiling *ts);

/* A whole call: nb items of in [cin, fi*h, fi*w] (host, back to back) through fwd into out
 * [cout, fo*h, fo*w] (host), each in one piece or, when tile > 0 is smaller than h or w, in
 * tiles of tile x tile latent pixels overlapping by tile / 4; buffers planned once for the
 * piece size. what names the call in messages. */
typedef struct vae_call {
  dit_backend *be;
  dit_dtype adt;
  vae_fwd_fn fwd;
  const void *model;
  int nb, h, w, tile, cin, fi, cout, fo;
  const char *what;
  vae_run **keep; /* NULL, or where the buffers stay between calls of the same size (a GPU
                     decoder's: allocating and freeing ~1 GiB per 1024x1024 decode costs ms) */
} vae_call;
/* Frees a kept run's buffers and the run (NULL: nothing). */
void vae_run_drop(vae_run *r);
dit_status vae_run_call(const vae_call *c, const float *in, float *out, dit_error *err);
/* What vae_run_call(c) costs (core/cost.h): the FLOPs of every piece and its planned buffers
 * plus the tile buffers; nothing runs (in and out are the caller's). */
dit_status vae_call_cost(const vae_call *c, dit_cost *out, dit_error *err);

/* A decoder call's z [B, zc, h, w] and img [B, oc, f h, f w]: contiguous host F32, at most
 * VAE_MAX_IMAGE_SIDE pixels a side and 4096 items; tile 0 or >= 4. DIT_ERR_INVALID_ARG naming
 * what is wrong. */
#define VAE_MAX_IMAGE_SIDE 65536
dit_status vae_check_decode_io(const dit_tensor *z, const dit_tensor *img, int zc, int oc, int64_t f, int tile,
                               dit_error *err);

/* A decoder's activation dtype *adt set to dt (checked against be); a change drops the kept
 * buffers (*keep). */
dit_status vae_set_act_dtype(dit_backend *be, dit_dtype *adt, vae_run **keep, dit_dtype dt, dit_error *err);
/* A decode's call (as vae_run_call) between the NaN/Inf checks of z and of the image
 * (DIT_ERR_NUMERIC naming the first such element). */
dit_status vae_decode_checked(const vae_call *call, const dit_tensor *z, dit_tensor *img, dit_error *err);

/* Index of the first non-finite value of x[0..n), or n. */
size_t vae_first_nonfinite(const float *x, size_t n);

#endif
