/* The LTX-2 video VAE's internals shared by vae_ltx2.c (the decoder's config, weights, API),
 * vae_ltx2_conv.c (the pieces both directions run: causal convolutions, resnets, the
 * plan-then-run activation slots), vae_ltx2_decode.c and vae_ltx2_encode.c. Not part of the API. */
#ifndef DIT_MODELS_VAE_LTX2_INTERNAL_H
#define DIT_MODELS_VAE_LTX2_INTERNAL_H

#include <jansson.h>

#include "io/safetensors.h"
#include "models/model_weights.h"
#include "models/vae_ltx2.h"

#define LTX2_VAE_NORM_EPS 1e-8f /* PerChannelRMSNorm */

/* A convolution as stored: w [co, ci, k, k, k], b [co]. causal_pad: the decoder's causal conv
 * (replicate padding in time, the config's spatial padding); otherwise a plain Conv3d without
 * padding (the shortcut's 1x1x1). */
typedef struct ltx2_conv {
  int ci, co, k;
  dit_tensor w, b;
} ltx2_conv;

/* LTX2VideoResnetBlock3d: norm1, SiLU, conv1, norm2, SiLU, conv2, plus the input (through a
 * LayerNorm over the channels and a 1x1x1 conv_shortcut when cin != cout). */
typedef struct ltx2_resnet {
  int cin, cout;
  ltx2_conv conv1, conv2;
  dit_tensor norm3_w, norm3_b; /* [cin]; data NULL when cin == cout */
  ltx2_conv shortcut;          /* [cout, cin, 1, 1, 1] */
} ltx2_resnet;

/* LTX2VideoUpBlock3d: conv_in (a resnet, when the block's channels change), the upsampler
 * (conv then 3-D pixel shuffle of strides st, dropping the first st[0] - 1 frames; residual:
 * plus the input shuffled alike, its channels repeated), the resnets. */
typedef struct ltx2_up_block {
  bool has_conv_in;
  ltx2_resnet conv_in;
  bool has_up, residual;
  int st[3], factor;
  ltx2_conv up; /* [cin * st0 st1 st2 / factor, cin, 3, 3, 3] */
  int n_res;
  ltx2_resnet *res; /* into dit_vae_ltx2.pool */
} ltx2_up_block;

struct dit_vae_ltx2 {
  dit_backend *be;
  dit_vae_ltx2_config cfg;
  dit_weights *weights; /* the mapped checkpoint (CPU) */
  void *wblock;         /* every weight on a device backend */
  void *stats;          /* backend memory: [C] scale std / sf - 1, then [C] shift mean (F32) */
  ltx2_conv conv_in;
  int n_mid;
  ltx2_resnet *mid; /* into pool */
  ltx2_up_block up[DIT_VAE_LTX2_MAX_UP];
  ltx2_conv conv_out;
  ltx2_resnet *pool;
  dit_tensor mean_t, std_t; /* the stored latents_mean / latents_std (host, while loading) */
  void *act;                /* activation buffers (backend memory), act_bytes of them */
  size_t act_bytes;
};

/* Channels out of the mid block and of up block i (i < n_up), as the decoder computes them. */
int ltx2_vae_mid_channels(const dit_vae_ltx2_config *c);
int ltx2_vae_up_out_channels(const dit_vae_ltx2_config *c, int i);

/* dit_vae_ltx2_decode's checks of m and latents (ltx2_vae_check_latents), and of out too
 * (shapes, dtype, memory). */
dit_status ltx2_vae_check_latents(const dit_vae_ltx2 *m, const dit_tensor *latents, dit_error *err);
dit_status ltx2_vae_check_decode_io(const dit_vae_ltx2 *m, const dit_tensor *latents, const dit_tensor *out,
                                    dit_error *err);
/* One item's decode: x [1, C, F, H, W] (backend memory) into out [1, oc, T, Ho, Wo]. */
dit_status ltx2_vae_decode_item(dit_vae_ltx2 *m, const dit_tensor *x, dit_tensor *out, dit_error *err);
/* What ltx2_vae_decode_item of latents [1, C, F, H, W] takes: its slots' bytes (as
 * dit_backend_fit_slots lays them out) and its convolutions' FLOPs. */
dit_status ltx2_vae_item_cost(const dit_vae_ltx2 *m, int F, int H, int W, size_t *bytes, double *flops,
                              dit_error *err);

/* ---- config and weight-table helpers (vae_ltx2_conv.c) ---- */

/* Integer array `key` of exactly n entries in [1, max], or `def` (n entries) when absent. */
dit_status ltx2_json_ints_n(const json_t *j, const char *key, size_t n, int64_t max, const int *def, int *out,
                            const char *what, dit_error *err);
/* `key` as a boolean (every one of n entries) or an array of exactly n booleans; def when absent. */
dit_status ltx2_json_bools_n(const json_t *j, const char *key, size_t n, bool def, bool *out, const char *what,
                             dit_error *err);
/* A strides list: n of "spatial" (1, 2, 2), "temporal" (2, 1, 1), "spatiotemporal" (2, 2, 2) from
 * array `key` (absent: all "spatiotemporal"). */
dit_status ltx2_json_strides(const json_t *j, const char *key, size_t n, int st[][3], const char *what,
                             dit_error *err);
/* latents_mean / latents_std (bound or not: data NULL) as C host floats: 0 and 1 where absent. */
void ltx2_latent_stats(const dit_tensor *mean_t, const dit_tensor *std_t, size_t C, float *mean, float *std);
void ltx2_add_conv(dit_wtable *t, ltx2_conv *cv, int co, int ci, int k, const char *base, const char *suffix);
void ltx2_add_resnet(dit_wtable *t, ltx2_resnet *r, int cin, int cout, const char *base);

/* ---- a forward pass over activation slots (vae_ltx2_conv.c) ----
 * Activations live in slots of one backend buffer: two for the running activation (a block
 * writes its output in place or into the other one), the norm outputs, the padded input of a
 * convolution, a convolution's output, the resnet shortcut and a residual. A pass runs twice with
 * the same code: first as a plan (no op is called; each slot records the largest tensor placed
 * in it), then for real in a buffer of that size (kept for the next call). */
enum { LTX2_S_A, LTX2_S_B, LTX2_S_TMP, LTX2_S_PAD, LTX2_S_H, LTX2_S_SC, LTX2_S_R, LTX2_NSLOT };

typedef struct ltx2_vrun {
  dit_backend *be;
  dit_device dev;
  bool plan;
  bool causal, reflect; /* the convolutions' padding: in time (causal or centered), in space */
  float eps;            /* the shortcut's LayerNorm */
  size_t need[LTX2_NSLOT];
  char *slot[LTX2_NSLOT];
  double flops;         /* the plan pass adds up its convolutions' */
} ltx2_vrun;

/* An activation [1, c, f, h, w] in slot `slot`. */
typedef struct ltx2_act {
  int slot, c, f, h, w;
} ltx2_act;

/* Calls a backend op on the real pass only. */
#define LTX2_OP(r, call)              \
  do {                                \
    if (!(r)->plan) DIT_TRY(call);    \
  } while (0)

static inline int ltx2_other(int slot) { return slot == LTX2_S_A ? LTX2_S_B : LTX2_S_A; }

/* [1, c, f, h, w] F32 at the start of slot i (the plan records its size; data NULL then). */
dit_status ltx2_vview(ltx2_vrun *r, dit_tensor *t, int i, int64_t c, int64_t f, int64_t h, int64_t w, dit_error *err);
dit_tensor ltx2_vview_of(const ltx2_act *a, const ltx2_vrun *r);
/* A strided view of base's data from element off: nd dims of shape with element strides st. */
dit_tensor ltx2_vstrided(const dit_tensor *base, int64_t off, int nd, const int64_t *shape, const int64_t *st);
/* dst (base_d from od, strides sd) = src (base_s from os, strides ss), nd dims of shape. */
dit_status ltx2_vcopy(ltx2_vrun *r, const dit_tensor *base_d, int64_t od, const dit_tensor *base_s, int64_t os, int nd,
                      const int64_t *shape, const int64_t *sd, const int64_t *ss, dit_error *err);
/* LTX2VideoCausalConv3d (stride 1) on x [1, ci, F, H, W] into y (slot ys) [1, co, F, H, W]. */
dit_status ltx2_vconv(ltx2_vrun *r, const ltx2_conv *cv, const dit_tensor *x, int ys, dit_tensor *y, dit_error *err);
/* LTX2VideoResnetBlock3d on *a: in place, or into the other running slot when the channels change. */
dit_status ltx2_vresnet(ltx2_vrun *r, const ltx2_resnet *rn, ltx2_act *a, dit_error *err);
/* fwd(r, ctx) planned, the slots fitted into *act (*act_bytes, grown when needed), then run. */
dit_status ltx2_vrun_pass(ltx2_vrun *r, dit_status (*fwd)(ltx2_vrun *r, void *ctx, dit_error *err), void *ctx,
                          void **act, size_t *act_bytes, dit_error *err);

#endif
