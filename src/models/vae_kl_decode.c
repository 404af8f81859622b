/* AutoencoderKL decoder forward pass on the backend ops, with its activation plan and
 * the tiled decode.
 *
 * Memory: activations live in three ping-pong buffers plus one scratch for the mid
 * block's q, k, v, in the model's activation dtype (F32, or BF16 on a GPU: convolutions,
 * norms and the mid-block attention then read and write bf16, with fp32 accumulation and
 * statistics), and, for BF16, a small F32 buffer for the latent and the image on their way
 * to and from the host. The forward pass runs twice with the same code: first as a plan
 * (no op is called; every buffer records the largest tensor placed in it, and FLOPs are
 * counted), then for real in buffers of exactly those sizes. Each block takes its input
 * in one buffer and leaves its output in one buffer, so only a block's own temporaries
 * are alive at any time, never the whole stack of intermediates. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/vae_kl_internal.h"

#define NBUF 5     /* 0..2 ping-pong activations, 3 attention scratch, 4 F32 in/out (BF16 runs) */
#define ATTN_BUF 3
#define IO_BUF 4
#define MAX_IMAGE_SIDE 65536

typedef struct vae_run {
  dit_backend *be;
  dit_device dev;      /* tag of the backend's memory */
  bool plan;           /* measuring pass: record sizes and FLOPs, call no op */
  dit_dtype adt;       /* activation dtype */
  size_t es;           /* its element size */
  void *buf[NBUF];
  size_t cap[NBUF];    /* bytes */
  double flops;
} vae_run;

/* An activation [1, c, h, w] held in buffer `buf`. */
typedef struct vact {
  int buf, c, h, w;
} vact;

/* Activation descriptors over backend memory. */
static dit_tensor act2(const vae_run *r, void *p, int64_t d0, int64_t d1) {
  dit_tensor t = dit_tensor_2d(r->adt, p, d0, d1);
  t.device = r->dev;
  return t;
}

static dit_tensor act4(const vae_run *r, void *p, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  dit_tensor t = dit_tensor_4d(r->adt, p, d0, d1, d2, d3);
  t.device = r->dev;
  return t;
}

/* p advanced by n activation elements (NULL stays NULL while planning). */
static void *elp(const vae_run *r, void *p, int64_t n) { return p ? (char *)p + (size_t)n * r->es : NULL; }

/* Records (plan) or checks (real pass) that buffer i holds `need` bytes. */
static dit_status need_bytes(vae_run *r, int i, size_t need, dit_error *err) {
  if (r->plan) {
    if (need > r->cap[i]) r->cap[i] = need;
  } else if (need > r->cap[i]) {
    return dit_errorf(err, DIT_ERR_INTERNAL, "vae: activation buffer %d holds %zu bytes, %zu needed", i, r->cap[i],
                      need);
  }
  return DIT_OK;
}

/* The k-th (0 or 1) ping-pong buffer other than `used`. */
static int other(int used, int k) {
  int o = 0;
  for (int i = 0; i < 3; i++) {
    if (i == used) continue;
    if (o++ == k) return i;
  }
  return -1;
}

/* Descriptor of `n = c*h*w` activations at element offset `off` of buffer i, shape
 * [1, c, h, w]. The plan records the size; the real pass checks it (a mismatch is a bug). */
static dit_status view_at(vae_run *r, dit_tensor *t, int i, size_t off, int64_t c, int64_t h, int64_t w,
                          dit_error *err) {
  DIT_TRY(need_bytes(r, i, (off + (size_t)c * (size_t)h * (size_t)w) * r->es, err));
  *t = act4(r, elp(r, r->buf[i], (int64_t)off), 1, c, h, w);
  return DIT_OK;
}

/* F32 [1, c, h, w] at the start of the in/out buffer (the host's latent or image). */
static dit_status io_view(vae_run *r, dit_tensor *t, int64_t c, int64_t h, int64_t w, dit_error *err) {
  DIT_TRY(need_bytes(r, IO_BUF, (size_t)c * (size_t)h * (size_t)w * sizeof(float), err));
  *t = dit_tensor_4d(DIT_F32, r->buf[IO_BUF], 1, c, h, w);
  t->device = r->dev;
  return DIT_OK;
}

static dit_status view(vae_run *r, dit_tensor *t, int i, int64_t c, int64_t h, int64_t w, dit_error *err) {
  return view_at(r, t, i, 0, c, h, w, err);
}

/* ---- ops (skipped while planning) ---- */

static dit_status conv(vae_run *r, dit_tensor *y, const dit_tensor *x, const dit_tensor *w, const dit_tensor *b,
                       int pad, dit_error *err) {
  r->flops += 2.0 * (double)dit_tensor_numel(w) * (double)(y->shape[2] * y->shape[3]);
  return r->plan ? DIT_OK : dit_op_conv2d(r->be, y, x, w, b, 1, pad, err);
}

static dit_status gnorm(vae_run *r, dit_tensor *y, const dit_tensor *x, int groups, const dit_tensor *w,
                        const dit_tensor *b, bool silu, dit_error *err) {
  return r->plan ? DIT_OK : dit_op_group_norm(r->be, y, x, groups, w, b, DIT_VAE_KL_EPS, silu, err);
}

static dit_status add(vae_run *r, dit_tensor *y, const dit_tensor *a, const dit_tensor *b, dit_error *err) {
  return r->plan ? DIT_OK : dit_op_add(r->be, y, a, b, err);
}

static dit_status linear(vae_run *r, dit_tensor *y, const dit_tensor *x, const dit_tensor *w, const dit_tensor *b,
                         dit_error *err) {
  r->flops += 2.0 * (double)dit_tensor_numel(w) * (double)x->shape[0];
  return r->plan ? DIT_OK : dit_op_linear(r->be, y, x, w, b, DIT_ACT_NONE, err);
}

static dit_status copy(vae_run *r, dit_tensor *dst, const dit_tensor *src, dit_error *err) {
  return r->plan ? DIT_OK : dit_op_copy(r->be, dst, src, err);
}

/* Adds "context: " to a failure's message and returns its status. */
#define STAGE(expr, ...)                      \
  do {                                        \
    dit_status stage_s_ = (expr);             \
    if (stage_s_ != DIT_OK) {                 \
      dit_error_prefix(err, __VA_ARGS__);     \
      return stage_s_;                        \
    }                                         \
  } while (0)

/* ---- blocks ---- */

/* ResnetBlock2D. x in buffer x->buf; the output replaces *x. With a conv_shortcut the
 * shortcut is taken first, so the input can be normalised in place: three buffers of
 * (at most) max(cin, cout) channels. */
static dit_status resnet_fwd(vae_run *r, const vae_resnet *rn, int groups, vact *x, dit_error *err) {
  int a = other(x->buf, 0), b = other(x->buf, 1);
  int h = x->h, w = x->w;
  dit_tensor tx, t1, t2, ty;
  DIT_TRY(view(r, &tx, x->buf, rn->cin, h, w, err));
  if (rn->cin != rn->cout) {
    DIT_TRY(view(r, &t1, a, rn->cout, h, w, err));
    STAGE(conv(r, &t1, &tx, &rn->short_w, &rn->short_b, 0, err), "conv_shortcut");
    STAGE(gnorm(r, &tx, &tx, groups, &rn->norm1_w, &rn->norm1_b, true, err), "norm1");
    DIT_TRY(view(r, &t2, b, rn->cout, h, w, err));
    STAGE(conv(r, &t2, &tx, &rn->conv1_w, &rn->conv1_b, 1, err), "conv1");
    STAGE(gnorm(r, &t2, &t2, groups, &rn->norm2_w, &rn->norm2_b, true, err), "norm2");
    DIT_TRY(view(r, &ty, x->buf, rn->cout, h, w, err));
    STAGE(conv(r, &ty, &t2, &rn->conv2_w, &rn->conv2_b, 1, err), "conv2");
    STAGE(add(r, &ty, &ty, &t1, err), "residual");
  } else {
    DIT_TRY(view(r, &t1, a, rn->cin, h, w, err));
    STAGE(gnorm(r, &t1, &tx, groups, &rn->norm1_w, &rn->norm1_b, true, err), "norm1");
    DIT_TRY(view(r, &t2, b, rn->cout, h, w, err));
    STAGE(conv(r, &t2, &t1, &rn->conv1_w, &rn->conv1_b, 1, err), "conv1");
    STAGE(gnorm(r, &t2, &t2, groups, &rn->norm2_w, &rn->norm2_b, true, err), "norm2");
    DIT_TRY(view(r, &ty, a, rn->cout, h, w, err));
    STAGE(conv(r, &ty, &t2, &rn->conv2_w, &rn->conv2_b, 1, err), "conv2");
    STAGE(add(r, &ty, &ty, &tx, err), "residual");
    x->buf = a;
  }
  x->c = rn->cout;
  return DIT_OK;
}

/* The mid block's Attention: x + to_out(SDPA(to_q(n), to_k(n), to_v(n))) with
 * n = group_norm(x) seen as h*w tokens of c channels (one head of dim c). */
static dit_status attn_fwd(vae_run *r, const vae_attn *at, int groups, vact *x, dit_error *err) {
  int a = other(x->buf, 0), b = other(x->buf, 1);
  int64_t c = x->c, s = (int64_t)x->h * x->w;
  size_t n = (size_t)(c * s);
  dit_tensor tx, tn, tb, q, k, v;
  DIT_TRY(view(r, &tx, x->buf, c, x->h, x->w, err));
  DIT_TRY(view(r, &tn, a, c, x->h, x->w, err));
  STAGE(gnorm(r, &tn, &tx, groups, &at->gn_w, &at->gn_b, false, err), "group_norm");
  /* tokens [s, c] in b: a transposed view of the [c, s] normalised map */
  DIT_TRY(view(r, &tb, b, c, x->h, x->w, err));
  dit_tensor tok = act2(r, tb.data, s, c);
  dit_tensor src = act2(r, tn.data, s, c);
  src.stride[0] = 1;
  src.stride[1] = s;
  STAGE(copy(r, &tok, &src, err), "to tokens");
  DIT_TRY(view_at(r, &q, ATTN_BUF, 0, 1, s, c, err));
  DIT_TRY(view_at(r, &k, ATTN_BUF, n, 1, s, c, err));
  DIT_TRY(view_at(r, &v, ATTN_BUF, 2 * n, 1, s, c, err));
  dit_tensor q2 = act2(r, q.data, s, c), k2 = act2(r, k.data, s, c),
             v2 = act2(r, v.data, s, c);
  STAGE(linear(r, &q2, &tok, &at->q_w, &at->q_b, err), "to_q");
  STAGE(linear(r, &k2, &tok, &at->k_w, &at->k_b, err), "to_k");
  STAGE(linear(r, &v2, &tok, &at->v_w, &at->v_b, err), "to_v");
  /* SDPA over [1, s, 1, c] (one head of dim c): the output goes to a (the normalised
   * map is consumed) */
  dit_tensor q4 = act4(r, q.data, 1, s, 1, c), k4 = act4(r, k.data, 1, s, 1, c),
             v4 = act4(r, v.data, 1, s, 1, c), o4 = act4(r, tn.data, 1, s, 1, c);
  r->flops += 4.0 * (double)s * (double)s * (double)c;
  if (!r->plan)
    STAGE(dit_op_attention(r->be, &o4, &q4, &k4, &v4, NULL, (float)(1.0 / sqrt((double)c)), false, err),
          "attention");
  dit_tensor o2 = act2(r, tn.data, s, c);
  STAGE(linear(r, &tok, &o2, &at->o_w, &at->o_b, err), "to_out.0");
  /* back to [c, h, w] in a, plus the residual */
  dit_tensor back = act2(r, tb.data, c, s);
  back.stride[0] = 1;
  back.stride[1] = c;
  dit_tensor dst = act2(r, tn.data, c, s);
  STAGE(copy(r, &dst, &back, err), "from tokens");
  STAGE(add(r, &tn, &tn, &tx, err), "residual");
  x->buf = a;
  return DIT_OK;
}

/* Upsample2D: nearest 2x, then a 3x3 conv, in bands of input rows so the 4x-sized
 * nearest copy is never alive whole (at 1024x1024 it would be a second 1 GiB buffer).
 * A band of n input rows is taken with one halo row on each side (where the image has
 * one), upsampled, convolved with zero padding, and the 2n rows whose 3x3 window lies
 * inside the band (or on the image border, where zero padding is right) are copied into
 * the output: the result is exactly the whole-image conv. Bands cost (n+2)/n in conv
 * work; n = max(32, h/8) keeps that <= 6%, and a latent of <= 32 rows is one band. */
static dit_status upsample_fwd(vae_run *r, const vae_up_block *ub, vact *x, dit_error *err) {
  int a = other(x->buf, 0), b = other(x->buf, 1);
  int64_t c = x->c, h = x->h, w = x->w;
  int64_t n = h / 8 > 32 ? h / 8 : 32;
  if (n > h) n = h;
  dit_tensor tx, ty, xin, up, cv;
  DIT_TRY(view(r, &tx, x->buf, c, h, w, err));
  DIT_TRY(view(r, &ty, b, ub->cout, 2 * h, 2 * w, err));
  if (n == h) {
    DIT_TRY(view(r, &up, a, c, 2 * h, 2 * w, err));
    if (!r->plan) STAGE(dit_op_upsample2x(r->be, &up, &tx, err), "upsample2x");
    STAGE(conv(r, &ty, &up, &ub->up_w, &ub->up_b, 1, err), "conv");
  }
  int64_t nb = n + 2; /* most input rows in one band */
  size_t o_up = (size_t)(c * nb * w), o_cv = o_up + (size_t)(c * 4 * nb * w);
  if (n < h) {
    DIT_TRY(view_at(r, &xin, a, 0, c, nb, w, err));
    DIT_TRY(view_at(r, &up, a, o_up, c, 2 * nb, 2 * w, err));
    DIT_TRY(view_at(r, &cv, a, o_cv, ub->cout, 2 * nb, 2 * w, err));
  }
  for (int64_t i0 = 0; n < h && i0 < h; i0 += n) {
    int64_t i1 = i0 + n < h ? i0 + n : h;
    int64_t lo = i0 > 0 ? i0 - 1 : 0, hi = i1 < h ? i1 + 1 : h, rows = hi - lo;
    dit_tensor src = act4(r, elp(r, tx.data, lo * w), 1, c, rows, w);
    src.stride[0] = c * h * w;
    src.stride[1] = h * w;
    dit_tensor bin = act4(r, xin.data, 1, c, rows, w);
    dit_tensor bup = act4(r, up.data, 1, c, 2 * rows, 2 * w);
    dit_tensor bcv = act4(r, cv.data, 1, ub->cout, 2 * rows, 2 * w);
    STAGE(copy(r, &bin, &src, err), "band rows %lld..%lld", (long long)lo, (long long)hi);
    if (!r->plan) STAGE(dit_op_upsample2x(r->be, &bup, &bin, err), "upsample2x");
    STAGE(conv(r, &bcv, &bup, &ub->up_w, &ub->up_b, 1, err), "conv");
    /* keep output rows [2 i0, 2 i1): band rows from 2 (i0 - lo) */
    dit_tensor keep = act4(r, elp(r, bcv.data, 2 * (i0 - lo) * 2 * w), 1, ub->cout, 2 * (i1 - i0), 2 * w);
    keep.stride[0] = ub->cout * 2 * rows * 2 * w;
    keep.stride[1] = 2 * rows * 2 * w;
    dit_tensor dst = act4(r, elp(r, ty.data, 2 * i0 * 2 * w), 1, ub->cout, 2 * (i1 - i0), 2 * w);
    dst.stride[0] = ub->cout * 4 * h * w;
    dst.stride[1] = 4 * h * w;
    STAGE(copy(r, &dst, &keep, err), "band output");
  }
  x->buf = b;
  x->c = ub->cout;
  x->h *= 2;
  x->w *= 2;
  return DIT_OK;
}

/* The whole decoder on one latent z [L, h, w] (host, contiguous) into out
 * [out_channels, f*h, f*w] (host, contiguous). Both may be NULL while planning. */
static dit_status decoder_fwd(vae_run *r, const dit_vae_kl *m, const float *z, float *out, int h, int w,
                              dit_error *err) {
  const dit_vae_kl_config *c = &m->cfg;
  int groups = c->norm_num_groups;
  vact x = {0, c->latent_channels, h, w};
  dit_tensor tx, ty;
  DIT_TRY(view(r, &tx, 0, x.c, h, w, err));
  if (r->adt == DIT_F32) {
    if (!r->plan) STAGE(r->be->ops->upload(r->be, tx.data, z, dit_tensor_nbytes(&tx), err), "upload z");
  } else { /* F32 from the host, converted on the device */
    dit_tensor zf;
    DIT_TRY(io_view(r, &zf, x.c, h, w, err));
    if (!r->plan) STAGE(r->be->ops->upload(r->be, zf.data, z, dit_tensor_nbytes(&zf), err), "upload z");
    STAGE(copy(r, &tx, &zf, err), "z to %s", dit_dtype_name(r->adt));
  }
  if (c->use_post_quant_conv) {
    DIT_TRY(view(r, &ty, 1, x.c, h, w, err));
    STAGE(conv(r, &ty, &tx, &m->pq_w, &m->pq_b, 0, err), "post_quant_conv");
    x.buf = 1;
    tx = ty;
  }
  int top = c->block_out_channels[c->n_levels - 1];
  int nb = other(x.buf, 0);
  DIT_TRY(view(r, &ty, nb, top, h, w, err));
  STAGE(conv(r, &ty, &tx, &m->conv_in_w, &m->conv_in_b, 1, err), "decoder.conv_in");
  x.buf = nb;
  x.c = top;
  STAGE(resnet_fwd(r, &m->mid_res[0], groups, &x, err), "decoder.mid_block.resnets.0");
  if (c->mid_block_add_attention) STAGE(attn_fwd(r, &m->mid_attn, groups, &x, err), "decoder.mid_block.attentions.0");
  STAGE(resnet_fwd(r, &m->mid_res[1], groups, &x, err), "decoder.mid_block.resnets.1");
  for (int i = 0; i < c->n_levels; i++) {
    const vae_up_block *ub = &m->up[i];
    for (int k = 0; k < ub->n_resnets; k++)
      STAGE(resnet_fwd(r, &ub->resnets[k], groups, &x, err), "decoder.up_blocks.%d.resnets.%d", i, k);
    if (ub->upsample) STAGE(upsample_fwd(r, ub, &x, err), "decoder.up_blocks.%d.upsamplers.0", i);
  }
  DIT_TRY(view(r, &tx, x.buf, x.c, x.h, x.w, err));
  STAGE(gnorm(r, &tx, &tx, groups, &m->norm_out_w, &m->norm_out_b, true, err), "decoder.conv_norm_out");
  nb = other(x.buf, 0);
  DIT_TRY(view(r, &ty, nb, c->out_channels, x.h, x.w, err));
  STAGE(conv(r, &ty, &tx, &m->conv_out_w, &m->conv_out_b, 1, err), "decoder.conv_out");
  if (r->adt != DIT_F32) {
    dit_tensor of;
    DIT_TRY(io_view(r, &of, c->out_channels, x.h, x.w, err));
    STAGE(copy(r, &of, &ty, err), "image to F32");
    ty = of;
  }
  if (!r->plan) STAGE(r->be->ops->download(r->be, out, ty.data, dit_tensor_nbytes(&ty), err), "download image");
  return DIT_OK;
}

/* ---- planning and buffers ---- */

static void run_free(vae_run *r) {
  for (int i = 0; i < NBUF; i++)
    if (r->buf[i]) r->be->ops->free(r->be, r->buf[i]);
  memset(r->buf, 0, sizeof r->buf);
}

/* Plans an h x w decode and allocates its buffers. On failure nothing stays allocated. */
static dit_status run_init(vae_run *r, const dit_vae_kl *m, int h, int w, dit_error *err) {
  memset(r, 0, sizeof *r);
  r->be = m->be;
  r->dev = dit_backend_device(m->be);
  r->adt = m->adt;
  r->es = dit_dtype_size(m->adt);
  r->plan = true;
  DIT_TRY(decoder_fwd(r, m, NULL, NULL, h, w, err));
  r->plan = false;
  for (int i = 0; i < NBUF; i++) {
    if (!r->cap[i]) continue;
    void *p = NULL;
    dit_status s = r->be->ops->alloc(r->be, r->cap[i], &p, err);
    if (s != DIT_OK) {
      run_free(r);
      dit_error_prefix(err, "vae decode: activation buffer of %.1f MiB for a %dx%d latent (tiled decode needs less)",
                       (double)r->cap[i] / 1048576.0, h, w);
      return s;
    }
    r->buf[i] = p;
  }
  return DIT_OK;
}

static size_t run_bytes(const vae_run *r) {
  size_t b = 0;
  for (int i = 0; i < NBUF; i++) b += r->cap[i];
  return b;
}

dit_status dit_vae_kl_cost_of(const dit_vae_kl *m, int h, int w, dit_vae_kl_cost *out, dit_error *err) {
  if (!m || !out || h < 1 || w < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae cost: bad arguments");
  vae_run r;
  memset(&r, 0, sizeof r);
  r.be = m->be;
  r.dev = dit_backend_device(m->be);
  r.adt = m->adt;
  r.es = dit_dtype_size(m->adt);
  r.plan = true;
  DIT_TRY(decoder_fwd(&r, m, NULL, NULL, h, w, err));
  out->flops = r.flops;
  out->act_bytes = run_bytes(&r);
  return DIT_OK;
}

/* ---- tiling ---- */

/* Tile starts along an axis of `len` latent pixels: the fewest tiles of `t` with
 * overlaps of at least `ov`, spread evenly. *starts is malloc'd. */
static dit_status axis_layout(int len, int t, int ov, int **starts, int *n, dit_error *err) {
  int cnt = 1;
  if (t < len) cnt = (len - ov + (t - ov) - 1) / (t - ov);
  if (cnt < 2 && t < len) cnt = 2;
  int *s = malloc((size_t)cnt * sizeof *s);
  if (!s) return dit_errorf(err, DIT_ERR_NOMEM, "vae decode: out of memory for the tile layout");
  for (int i = 0; i < cnt; i++) s[i] = cnt == 1 ? 0 : (int)((int64_t)i * (len - t) / (cnt - 1));
  *starts = s;
  *n = cnt;
  return DIT_OK;
}

/* Blend weights along one axis of tile i (f*t pixels): linear ramps across the overlap
 * with each neighbour, 1 elsewhere; the sum over tiles is 1 wherever two tiles overlap
 * exactly, and the decode divides by the sum anyway. */
static void axis_weights(const int *st, int n, int i, int t, int f, float *wt) {
  double lp = i > 0 ? (double)f * (st[i - 1] + t - st[i]) : 0.0;
  double rp = i < n - 1 ? (double)f * (st[i] + t - st[i + 1]) : 0.0;
  int len = f * t;
  for (int p = 0; p < len; p++) {
    double wl = lp > 0 ? fmin(1.0, (p + 0.5) / lp) : 1.0;
    double wr = rp > 0 ? fmin(1.0, (len - p - 0.5) / rp) : 1.0;
    wt[p] = (float)fmin(wl, wr);
  }
}

typedef struct tiled_state {
  int ny, nx, *ys, *xs;
  float *zt, *ot, *wy, *wx, *wsum;
} tiled_state;

static void tiled_free(tiled_state *t) {
  free(t->ys);
  free(t->xs);
  free(t->zt);
  free(t->ot);
  free(t->wy);
  free(t->wx);
  free(t->wsum);
}

/* Decodes one batch item z [L, h, w] into img [oc, H, W] tile by tile (th x tw latent). */
static dit_status tiled_decode(vae_run *r, const dit_vae_kl *m, tiled_state *ts, const float *z, float *img, int h,
                               int w, int th, int tw, dit_error *err) {
  const dit_vae_kl_config *c = &m->cfg;
  int f = 1 << (c->n_levels - 1), oc = c->out_channels, L = c->latent_channels;
  size_t H = (size_t)f * h, W = (size_t)f * w, fth = (size_t)f * th, ftw = (size_t)f * tw;
  memset(img, 0, (size_t)oc * H * W * sizeof *img);
  memset(ts->wsum, 0, H * W * sizeof *ts->wsum);
  for (int iy = 0; iy < ts->ny; iy++) {
    for (int ix = 0; ix < ts->nx; ix++) {
      int sy = ts->ys[iy], sx = ts->xs[ix];
      for (int ch = 0; ch < L; ch++)
        for (int y = 0; y < th; y++)
          memcpy(ts->zt + ((size_t)ch * th + y) * tw, z + ((size_t)ch * h + sy + y) * w + sx, (size_t)tw * sizeof(float));
      dit_status s = decoder_fwd(r, m, ts->zt, ts->ot, th, tw, err);
      if (s != DIT_OK) {
        dit_error_prefix(err, "tile (%d, %d)", sy, sx);
        return s;
      }
      axis_weights(ts->ys, ts->ny, iy, th, f, ts->wy);
      axis_weights(ts->xs, ts->nx, ix, tw, f, ts->wx);
      size_t Y0 = (size_t)f * sy, X0 = (size_t)f * sx;
      for (size_t y = 0; y < fth; y++) {
        float *ws = ts->wsum + (Y0 + y) * W + X0;
        for (size_t x = 0; x < ftw; x++) ws[x] += ts->wy[y] * ts->wx[x];
      }
      for (int ch = 0; ch < oc; ch++)
        for (size_t y = 0; y < fth; y++) {
          float *dst = img + ((size_t)ch * H + Y0 + y) * W + X0;
          const float *src = ts->ot + ((size_t)ch * fth + y) * ftw;
          float wyv = ts->wy[y];
          for (size_t x = 0; x < ftw; x++) dst[x] += wyv * ts->wx[x] * src[x];
        }
    }
  }
  for (int ch = 0; ch < oc; ch++)
    for (size_t i = 0; i < H * W; i++) img[(size_t)ch * H * W + i] /= ts->wsum[i];
  return DIT_OK;
}

static dit_status tiled_init(tiled_state *ts, const dit_vae_kl_config *c, int h, int w, int th, int tw, int ov,
                             dit_error *err) {
  memset(ts, 0, sizeof *ts);
  int f = 1 << (c->n_levels - 1);
  DIT_TRY(axis_layout(h, th, ov, &ts->ys, &ts->ny, err));
  DIT_TRY(axis_layout(w, tw, ov, &ts->xs, &ts->nx, err));
  ts->zt = malloc((size_t)c->latent_channels * th * tw * sizeof(float));
  ts->ot = malloc((size_t)c->out_channels * f * th * f * tw * sizeof(float));
  ts->wy = malloc((size_t)f * th * sizeof(float));
  ts->wx = malloc((size_t)f * tw * sizeof(float));
  ts->wsum = malloc((size_t)f * h * f * w * sizeof(float));
  if (!ts->zt || !ts->ot || !ts->wy || !ts->wx || !ts->wsum)
    return dit_errorf(err, DIT_ERR_NOMEM, "vae decode: out of memory for the tile buffers");
  return DIT_OK;
}

/* ---- the entry point ---- */

static dit_status check_args(const dit_vae_kl *m, const dit_tensor *z, const dit_tensor *img, int tile,
                             dit_error *err) {
  if (!m || !z || !img) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae decode: NULL argument");
  const dit_vae_kl_config *c = &m->cfg;
  char a[128], b[128];
  if (z->dtype != DIT_F32 || z->ndim != 4 || z->shape[0] < 1 || z->shape[1] != c->latent_channels ||
      z->shape[2] < 1 || z->shape[3] < 1 || !dit_tensor_is_contiguous(z) || !z->data || z->device != DIT_DEV_CPU)
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "vae decode: z must be a contiguous host F32 [B, %d, h, w] tensor, got %s %s",
                      c->latent_channels, dit_dtype_name(z->dtype), dit_shape_str(z->shape, z->ndim, a, sizeof a));
  int64_t f = (int64_t)1 << (c->n_levels - 1);
  if (z->shape[2] * f > MAX_IMAGE_SIDE || z->shape[3] * f > MAX_IMAGE_SIDE || z->shape[0] > 4096)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae decode: z %s decodes to more than %d pixels per side",
                      dit_shape_str(z->shape, z->ndim, a, sizeof a), MAX_IMAGE_SIDE);
  int64_t want[4] = {z->shape[0], c->out_channels, z->shape[2] * f, z->shape[3] * f};
  if (img->dtype != DIT_F32 || !dit_tensor_has_shape(img, 4, want) || !dit_tensor_is_contiguous(img) ||
      !img->data || img->device != DIT_DEV_CPU)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae decode: img must be a contiguous host F32 %s tensor, got %s %s",
                      dit_shape_str(want, 4, a, sizeof a), dit_dtype_name(img->dtype),
                      dit_shape_str(img->shape, img->ndim, b, sizeof b));
  if (tile < 0 || (tile > 0 && tile < 4))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae decode: tile = %d must be 0 (untiled) or at least 4 latent pixels",
                      tile);
  return DIT_OK;
}

/* Index of the first non-finite value of x[0..n), or n. */
static size_t first_nonfinite(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return i;
  return n;
}

dit_status dit_vae_kl_set_act_dtype(dit_vae_kl *m, dit_dtype dt, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae: no model");
  DIT_TRY(dit_backend_check_act_dtype(m->be, dt, "vae", err));
  m->adt = dt;
  return DIT_OK;
}

dit_status dit_vae_kl_decode(dit_vae_kl *m, const dit_tensor *z, dit_tensor *img, int tile, dit_error *err) {
  DIT_TRY(check_args(m, z, img, tile, err));
  const dit_vae_kl_config *c = &m->cfg;
  int nb = (int)z->shape[0], h = (int)z->shape[2], w = (int)z->shape[3];
  size_t zn = (size_t)dit_tensor_numel(z), in = (size_t)dit_tensor_numel(img);
  size_t bad = first_nonfinite(z->data, zn);
  if (bad < zn) return dit_errorf(err, DIT_ERR_NUMERIC, "vae decode: the latent z holds NaN/Inf (element %zu)", bad);
  bool tiled = tile > 0 && (tile < h || tile < w);
  int th = tiled && tile < h ? tile : h, tw = tiled && tile < w ? tile : w;
  vae_run r;
  DIT_TRY(run_init(&r, m, th, tw, err));
  tiled_state ts;
  memset(&ts, 0, sizeof ts);
  dit_status s = tiled ? tiled_init(&ts, c, h, w, th, tw, tile / 4, err) : DIT_OK;
  for (int b = 0; s == DIT_OK && b < nb; b++) {
    const float *zb = (const float *)z->data + (size_t)b * (zn / (size_t)nb);
    float *ib = (float *)img->data + (size_t)b * (in / (size_t)nb);
    s = tiled ? tiled_decode(&r, m, &ts, zb, ib, h, w, th, tw, err) : decoder_fwd(&r, m, zb, ib, h, w, err);
  }
  tiled_free(&ts);
  run_free(&r);
  if (s != DIT_OK) {
    dit_error_prefix(err, "vae decode");
    return s;
  }
  bad = first_nonfinite(img->data, in);
  if (bad < in)
    return dit_errorf(err, DIT_ERR_NUMERIC, "vae decode: the decoded image holds NaN/Inf (element %zu)", bad);
  return DIT_OK;
}
