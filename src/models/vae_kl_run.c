/* The forward machinery the AutoencoderKL decoder and encoder share (see vae_kl_internal.h):
 * activation buffers planned by a measuring pass, views into them, the op wrappers that
 * skip work while planning, the ResnetBlock2D and mid-block attention both halves use, and
 * the tiled forward pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/vae_kl_internal.h"

/* ---- views ---- */

dit_tensor vae_act2(const vae_run *r, void *p, int64_t d0, int64_t d1) {
  dit_tensor t = dit_tensor_2d(r->adt, p, d0, d1);
  t.device = r->dev;
  return t;
}

dit_tensor vae_act4(const vae_run *r, void *p, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  dit_tensor t = dit_tensor_4d(r->adt, p, d0, d1, d2, d3);
  t.device = r->dev;
  return t;
}

void *vae_elp(const vae_run *r, void *p, int64_t n) { return p ? (char *)p + (size_t)n * r->es : NULL; }

dit_status vae_need_bytes(vae_run *r, int i, size_t need, dit_error *err) {
  if (r->plan) {
    if (need > r->cap[i]) r->cap[i] = need;
  } else if (need > r->cap[i]) {
    return dit_errorf(err, DIT_ERR_INTERNAL, "vae: activation buffer %d holds %zu bytes, %zu needed", i, r->cap[i],
                      need);
  }
  return DIT_OK;
}

int vae_other(int used, int k) {
  int o = 0;
  for (int i = 0; i < 3; i++) {
    if (i == used) continue;
    if (o++ == k) return i;
  }
  return -1;
}

dit_status vae_view_at(vae_run *r, dit_tensor *t, int i, size_t off, int64_t c, int64_t h, int64_t w,
                       dit_error *err) {
  DIT_TRY(vae_need_bytes(r, i, (off + (size_t)c * (size_t)h * (size_t)w) * r->es, err));
  *t = vae_act4(r, vae_elp(r, r->buf[i], (int64_t)off), 1, c, h, w);
  return DIT_OK;
}

dit_status vae_view(vae_run *r, dit_tensor *t, int i, int64_t c, int64_t h, int64_t w, dit_error *err) {
  return vae_view_at(r, t, i, 0, c, h, w, err);
}

/* F32 [1, c, h, w] at the start of the in/out buffer (the host's input or output). */
static dit_status io_view(vae_run *r, dit_tensor *t, int64_t c, int64_t h, int64_t w, dit_error *err) {
  DIT_TRY(vae_need_bytes(r, VAE_IO_BUF, (size_t)c * (size_t)h * (size_t)w * sizeof(float), err));
  *t = dit_tensor_4d(DIT_F32, r->buf[VAE_IO_BUF], 1, c, h, w);
  t->device = r->dev;
  return DIT_OK;
}

dit_status vae_input(vae_run *r, dit_tensor *t, int i, const float *src, int64_t c, int64_t h, int64_t w,
                     dit_error *err) {
  DIT_TRY(vae_view(r, t, i, c, h, w, err));
  if (r->adt == DIT_F32) {
    if (!r->plan) VAE_STAGE(r->be->ops->upload(r->be, t->data, src, dit_tensor_nbytes(t), err), "upload input");
    return DIT_OK;
  }
  dit_tensor f; /* F32 from the host, converted on the device */
  DIT_TRY(io_view(r, &f, c, h, w, err));
  if (!r->plan) VAE_STAGE(r->be->ops->upload(r->be, f.data, src, dit_tensor_nbytes(&f), err), "upload input");
  VAE_STAGE(vae_copy(r, t, &f, err), "input to %s", dit_dtype_name(r->adt));
  return DIT_OK;
}

dit_status vae_output(vae_run *r, const dit_tensor *t, float *dst, dit_error *err) {
  dit_tensor y = *t;
  if (r->adt != DIT_F32) {
    DIT_TRY(io_view(r, &y, t->shape[1], t->shape[2], t->shape[3], err));
    VAE_STAGE(vae_copy(r, &y, t, err), "output to F32");
  }
  if (!r->plan) VAE_STAGE(r->be->ops->download(r->be, dst, y.data, dit_tensor_nbytes(&y), err), "download output");
  return DIT_OK;
}

dit_status vae_zeros(vae_run *r, dit_tensor *t, int64_t c, int64_t rows, int64_t cols, dit_error *err) {
  DIT_TRY(vae_need_bytes(r, VAE_ZERO_BUF, r->es, err));
  *t = vae_act4(r, r->buf[VAE_ZERO_BUF], 1, c, rows, cols);
  for (int k = 0; k < 4; k++) t->stride[k] = 0;
  return DIT_OK;
}

/* ---- ops (skipped while planning) ---- */

dit_status vae_conv(vae_run *r, dit_tensor *y, const dit_tensor *x, const dit_tensor *w, const dit_tensor *b,
                    int stride, int pad, dit_error *err) {
  r->flops += 2.0 * (double)dit_tensor_numel(w) * (double)(y->shape[2] * y->shape[3]);
  return r->plan ? DIT_OK : dit_op_conv2d(r->be, y, x, w, b, stride, pad, err);
}

dit_status vae_gnorm(vae_run *r, dit_tensor *y, const dit_tensor *x, int groups, const dit_tensor *w,
                     const dit_tensor *b, bool silu, dit_error *err) {
  if (r->plan) return DIT_OK;
  if (groups == VAE_CHANNEL_RMS) return dit_op_channel_rms_norm(r->be, y, x, w, silu, err);
  return dit_op_group_norm(r->be, y, x, groups, w, b, DIT_VAE_KL_EPS, silu, err);
}

dit_status vae_add(vae_run *r, dit_tensor *y, const dit_tensor *a, const dit_tensor *b, dit_error *err) {
  return r->plan ? DIT_OK : dit_op_add(r->be, y, a, b, err);
}

static dit_status linear(vae_run *r, dit_tensor *y, const dit_tensor *x, const dit_tensor *w, const dit_tensor *b,
                         dit_error *err) {
  r->flops += 2.0 * (double)dit_tensor_numel(w) * (double)x->shape[0];
  return r->plan ? DIT_OK : dit_op_linear(r->be, y, x, w, b, DIT_ACT_NONE, err);
}

dit_status vae_copy(vae_run *r, dit_tensor *dst, const dit_tensor *src, dit_error *err) {
  return r->plan ? DIT_OK : dit_op_copy(r->be, dst, src, err);
}

/* ---- blocks ---- */

/* ResnetBlock2D. x in buffer x->buf; the output replaces *x. With a conv_shortcut the
 * shortcut is taken first, so the input can be normalised in place: three buffers of
 * (at most) max(cin, cout) channels. */
dit_status vae_resnet_fwd(vae_run *r, const vae_resnet *rn, int groups, vact *x, dit_error *err) {
  int a = vae_other(x->buf, 0), b = vae_other(x->buf, 1);
  int h = x->h, w = x->w;
  dit_tensor tx, t1, t2, ty;
  DIT_TRY(vae_view(r, &tx, x->buf, rn->cin, h, w, err));
  if (rn->cin != rn->cout) {
    DIT_TRY(vae_view(r, &t1, a, rn->cout, h, w, err));
    VAE_STAGE(vae_conv(r, &t1, &tx, &rn->short_w, &rn->short_b, 1, 0, err), "conv_shortcut");
    VAE_STAGE(vae_gnorm(r, &tx, &tx, groups, &rn->norm1_w, &rn->norm1_b, true, err), "norm1");
    DIT_TRY(vae_view(r, &t2, b, rn->cout, h, w, err));
    VAE_STAGE(vae_conv(r, &t2, &tx, &rn->conv1_w, &rn->conv1_b, 1, 1, err), "conv1");
    VAE_STAGE(vae_gnorm(r, &t2, &t2, groups, &rn->norm2_w, &rn->norm2_b, true, err), "norm2");
    DIT_TRY(vae_view(r, &ty, x->buf, rn->cout, h, w, err));
    VAE_STAGE(vae_conv(r, &ty, &t2, &rn->conv2_w, &rn->conv2_b, 1, 1, err), "conv2");
    VAE_STAGE(vae_add(r, &ty, &ty, &t1, err), "residual");
  } else {
    DIT_TRY(vae_view(r, &t1, a, rn->cin, h, w, err));
    VAE_STAGE(vae_gnorm(r, &t1, &tx, groups, &rn->norm1_w, &rn->norm1_b, true, err), "norm1");
    DIT_TRY(vae_view(r, &t2, b, rn->cout, h, w, err));
    VAE_STAGE(vae_conv(r, &t2, &t1, &rn->conv1_w, &rn->conv1_b, 1, 1, err), "conv1");
    VAE_STAGE(vae_gnorm(r, &t2, &t2, groups, &rn->norm2_w, &rn->norm2_b, true, err), "norm2");
    DIT_TRY(vae_view(r, &ty, a, rn->cout, h, w, err));
    VAE_STAGE(vae_conv(r, &ty, &t2, &rn->conv2_w, &rn->conv2_b, 1, 1, err), "conv2");
    VAE_STAGE(vae_add(r, &ty, &ty, &tx, err), "residual");
    x->buf = a;
  }
  x->c = rn->cout;
  return DIT_OK;
}

/* The mid block's Attention: x + to_out(SDPA(to_q(n), to_k(n), to_v(n))) with
 * n = group_norm(x) seen as h*w tokens of c channels (one head of dim c). */
dit_status vae_attn_fwd(vae_run *r, const vae_attn *at, int groups, vact *x, dit_error *err) {
  int a = vae_other(x->buf, 0), b = vae_other(x->buf, 1);
  int64_t c = x->c, s = (int64_t)x->h * x->w;
  size_t n = (size_t)(c * s);
  dit_tensor tx, tn, tb, q, k, v;
  DIT_TRY(vae_view(r, &tx, x->buf, c, x->h, x->w, err));
  DIT_TRY(vae_view(r, &tn, a, c, x->h, x->w, err));
  VAE_STAGE(vae_gnorm(r, &tn, &tx, groups, &at->gn_w, &at->gn_b, false, err), "group_norm");
  /* tokens [s, c] in b: a transposed view of the [c, s] normalised map */
  DIT_TRY(vae_view(r, &tb, b, c, x->h, x->w, err));
  dit_tensor tok = vae_act2(r, tb.data, s, c);
  dit_tensor src = vae_act2(r, tn.data, s, c);
  src.stride[0] = 1;
  src.stride[1] = s;
  VAE_STAGE(vae_copy(r, &tok, &src, err), "to tokens");
  DIT_TRY(vae_view_at(r, &q, VAE_ATTN_BUF, 0, 1, s, c, err));
  DIT_TRY(vae_view_at(r, &k, VAE_ATTN_BUF, n, 1, s, c, err));
  DIT_TRY(vae_view_at(r, &v, VAE_ATTN_BUF, 2 * n, 1, s, c, err));
  dit_tensor q2 = vae_act2(r, q.data, s, c), k2 = vae_act2(r, k.data, s, c), v2 = vae_act2(r, v.data, s, c);
  VAE_STAGE(linear(r, &q2, &tok, &at->q_w, &at->q_b, err), "to_q");
  VAE_STAGE(linear(r, &k2, &tok, &at->k_w, &at->k_b, err), "to_k");
  VAE_STAGE(linear(r, &v2, &tok, &at->v_w, &at->v_b, err), "to_v");
  /* SDPA over [1, s, 1, c] (one head of dim c): the output goes to a (the normalised
   * map is consumed) */
  dit_tensor q4 = vae_act4(r, q.data, 1, s, 1, c), k4 = vae_act4(r, k.data, 1, s, 1, c),
             v4 = vae_act4(r, v.data, 1, s, 1, c), o4 = vae_act4(r, tn.data, 1, s, 1, c);
  r->flops += 4.0 * (double)s * (double)s * (double)c;
  if (!r->plan)
    VAE_STAGE(dit_op_attention(r->be, &o4, &q4, &k4, &v4, NULL, (float)(1.0 / sqrt((double)c)), false, err),
              "attention");
  dit_tensor o2 = vae_act2(r, tn.data, s, c);
  VAE_STAGE(linear(r, &tok, &o2, &at->o_w, &at->o_b, err), "to_out.0");
  /* back to [c, h, w] in a, plus the residual */
  dit_tensor back = vae_act2(r, tb.data, c, s);
  back.stride[0] = 1;
  back.stride[1] = c;
  dit_tensor dst = vae_act2(r, tn.data, c, s);
  VAE_STAGE(vae_copy(r, &dst, &back, err), "from tokens");
  VAE_STAGE(vae_add(r, &tn, &tn, &tx, err), "residual");
  x->buf = a;
  return DIT_OK;
}

/* Upsample2D: nearest 2x, then a 3x3 conv, in bands of input rows so the 4x-sized
 * nearest copy is never alive whole (at 1024x1024 it would be a second 1 GiB buffer).
 * A band of n input rows is taken with one halo row on each side (where the image has
 * one), upsampled, convolved with zero padding, and the 2n rows whose 3x3 window lies
 * inside the band (or on the image border, where zero padding is right) are copied into
 * the output: the result is exactly the whole-image conv. Bands cost (n+2)/n in conv
 * work; n = max(32, h/8) keeps that <= 6%, and a latent of <= 32 rows is one band.
 * On a GPU an upsampled map of up to VAE_GPU_WHOLE_UPSAMPLE bytes is made whole: there the
 * band copies cost more than the memory saved (at 1024x1024, 5.2 of 49 ms with bands, H100). */
#define VAE_GPU_WHOLE_UPSAMPLE ((size_t)1 << 30)
dit_status vae_upsample_fwd(vae_run *r, const vae_up_block *ub, vact *x, dit_error *err) {
  int a = vae_other(x->buf, 0), b = vae_other(x->buf, 1);
  const int64_t c = x->c, h = x->h, w = x->w, co = ub->up_w.shape[0];
  int64_t n = h / 8 > 32 ? h / 8 : 32;
  if (r->dev != DIT_DEV_CPU && (size_t)(c * 4 * h * w) * r->es <= VAE_GPU_WHOLE_UPSAMPLE) n = h;
  if (n > h) n = h;
  dit_tensor tx, ty, xin, up, cv;
  DIT_TRY(vae_view(r, &tx, x->buf, c, h, w, err));
  DIT_TRY(vae_view(r, &ty, b, co, 2 * h, 2 * w, err));
  if (n == h) {
    DIT_TRY(vae_view(r, &up, a, c, 2 * h, 2 * w, err));
    if (!r->plan) VAE_STAGE(dit_op_upsample2x(r->be, &up, &tx, err), "upsample2x");
    VAE_STAGE(vae_conv(r, &ty, &up, &ub->up_w, &ub->up_b, 1, 1, err), "conv");
  }
  int64_t nb = n + 2; /* most input rows in one band */
  size_t o_up = (size_t)(c * nb * w), o_cv = o_up + (size_t)(c * 4 * nb * w);
  if (n < h) {
    DIT_TRY(vae_view_at(r, &xin, a, 0, c, nb, w, err));
    DIT_TRY(vae_view_at(r, &up, a, o_up, c, 2 * nb, 2 * w, err));
    DIT_TRY(vae_view_at(r, &cv, a, o_cv, co, 2 * nb, 2 * w, err));
  }
  for (int64_t i0 = 0; n < h && i0 < h; i0 += n) {
    int64_t i1 = i0 + n < h ? i0 + n : h;
    int64_t lo = i0 > 0 ? i0 - 1 : 0, hi = i1 < h ? i1 + 1 : h, rows = hi - lo;
    dit_tensor src = vae_act4(r, vae_elp(r, tx.data, lo * w), 1, c, rows, w);
    src.stride[0] = c * h * w;
    src.stride[1] = h * w;
    dit_tensor bin = vae_act4(r, xin.data, 1, c, rows, w);
    dit_tensor bup = vae_act4(r, up.data, 1, c, 2 * rows, 2 * w);
    dit_tensor bcv = vae_act4(r, cv.data, 1, co, 2 * rows, 2 * w);
    VAE_STAGE(vae_copy(r, &bin, &src, err), "band rows %lld..%lld", (long long)lo, (long long)hi);
    if (!r->plan) VAE_STAGE(dit_op_upsample2x(r->be, &bup, &bin, err), "upsample2x");
    VAE_STAGE(vae_conv(r, &bcv, &bup, &ub->up_w, &ub->up_b, 1, 1, err), "conv");
    /* keep output rows [2 i0, 2 i1): band rows from 2 (i0 - lo) */
    dit_tensor keep = vae_act4(r, vae_elp(r, bcv.data, 2 * (i0 - lo) * 2 * w), 1, co, 2 * (i1 - i0), 2 * w);
    keep.stride[0] = co * 2 * rows * 2 * w;
    keep.stride[1] = 2 * rows * 2 * w;
    dit_tensor dst = vae_act4(r, vae_elp(r, ty.data, 2 * i0 * 2 * w), 1, co, 2 * (i1 - i0), 2 * w);
    dst.stride[0] = co * 4 * h * w;
    dst.stride[1] = 4 * h * w;
    VAE_STAGE(vae_copy(r, &dst, &keep, err), "band output");
  }
  x->buf = b;
  x->c = (int)co;
  x->h *= 2;
  x->w *= 2;
  return DIT_OK;
}

dit_status vae_mid_fwd(vae_run *r, const vae_resnet res[2], const vae_attn *at, int groups, vact *x,
                       const char *half, dit_error *err) {
  VAE_STAGE(vae_resnet_fwd(r, &res[0], groups, x, err), "%s.mid_block.resnets.0", half);
  if (at) VAE_STAGE(vae_attn_fwd(r, at, groups, x, err), "%s.mid_block.attentions.0", half);
  VAE_STAGE(vae_resnet_fwd(r, &res[1], groups, x, err), "%s.mid_block.resnets.1", half);
  return DIT_OK;
}

/* ---- planning and buffers ---- */

void vae_run_free(vae_run *r) {
  for (int i = 0; i < VAE_NBUF; i++)
    if (r->buf[i]) r->be->ops->free(r->be, r->buf[i]);
  memset(r->buf, 0, sizeof r->buf);
}

dit_status vae_run_plan(vae_run *r, dit_backend *be, dit_dtype adt, vae_fwd_fn fwd, const void *model, int h, int w,
                        dit_error *err) {
  memset(r, 0, sizeof *r);
  r->be = be;
  r->dev = dit_backend_device(be);
  r->adt = adt;
  r->es = dit_dtype_size(adt);
  r->plan = true;
  r->fwd = fwd, r->h = h, r->w = w;
  return fwd(r, model, NULL, NULL, h, w, err);
}

dit_status vae_run_init(vae_run *r, dit_backend *be, dit_dtype adt, vae_fwd_fn fwd, const void *model, int h, int w,
                        const char *what, dit_error *err) {
  DIT_TRY(vae_run_plan(r, be, adt, fwd, model, h, w, err));
  r->plan = false;
  for (int i = 0; i < VAE_NBUF; i++) {
    if (!r->cap[i]) continue;
    void *p = NULL;
    dit_status s = r->be->ops->alloc(r->be, r->cap[i], &p, err);
    if (s != DIT_OK) {
      vae_run_free(r);
      dit_error_prefix(err, "%s: activation buffer of %.1f MiB for a %dx%d latent (tiling needs less)", what,
                       (double)r->cap[i] / 1048576.0, h, w);
      return s;
    }
    r->buf[i] = p;
  }
  if (r->buf[VAE_ZERO_BUF]) {
    static const float zero[2] = {0.0f, 0.0f}; /* all-zero bits: 0 in every float dtype */
    dit_status s = r->be->ops->upload(r->be, r->buf[VAE_ZERO_BUF], zero, r->es, err);
    if (s != DIT_OK) {
      vae_run_free(r);
      return s;
    }
  }
  return DIT_OK;
}

size_t vae_run_bytes(const vae_run *r) {
  size_t b = 0;
  for (int i = 0; i < VAE_NBUF; i++) b += r->cap[i];
  return b;
}

/* ---- tiling ---- */

/* Tile starts along an axis of `len` latent pixels: the fewest tiles of `t` with
 * overlaps of at least `ov`, spread evenly. *starts is malloc'd. */
static dit_status axis_layout(int len, int t, int ov, int **starts, int *n, const char *what, dit_error *err) {
  int cnt = 1;
  if (t < len) cnt = (len - ov + (t - ov) - 1) / (t - ov);
  if (cnt < 2 && t < len) cnt = 2;
  int *s = malloc((size_t)cnt * sizeof *s);
  if (!s) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory for the tile layout", what);
  for (int i = 0; i < cnt; i++) s[i] = cnt == 1 ? 0 : (int)((int64_t)i * (len - t) / (cnt - 1));
  *starts = s;
  *n = cnt;
  return DIT_OK;
}

/* Blend weights along one axis of tile i (f*t output pixels): linear ramps across the
 * overlap with each neighbour, 1 elsewhere; the sum over tiles is 1 wherever two tiles
 * overlap exactly, and the blend divides by the sum anyway. */
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

void vae_tiling_free(vae_tiling *ts) {
  free(ts->ys);
  free(ts->xs);
  free(ts->tin);
  free(ts->tout);
  free(ts->wy);
  free(ts->wx);
  free(ts->wsum);
  memset(ts, 0, sizeof *ts);
}

dit_status vae_tiling_init(vae_tiling *ts, int h, int w, int th, int tw, int ov, int cin, int fi, int cout, int fo,
                           const char *what, dit_error *err) {
  memset(ts, 0, sizeof *ts);
  *ts = (vae_tiling){.h = h, .w = w, .th = th, .tw = tw, .cin = cin, .fi = fi, .cout = cout, .fo = fo};
  dit_status s = axis_layout(h, th, ov, &ts->ys, &ts->ny, what, err);
  if (s == DIT_OK) s = axis_layout(w, tw, ov, &ts->xs, &ts->nx, what, err);
  if (s != DIT_OK) {
    vae_tiling_free(ts);
    return s;
  }
  ts->tin = malloc((size_t)cin * fi * th * fi * tw * sizeof(float));
  ts->tout = malloc((size_t)cout * fo * th * fo * tw * sizeof(float));
  ts->wy = malloc((size_t)fo * th * sizeof(float));
  ts->wx = malloc((size_t)fo * tw * sizeof(float));
  ts->wsum = malloc((size_t)fo * h * fo * w * sizeof(float));
  if (!ts->tin || !ts->tout || !ts->wy || !ts->wx || !ts->wsum) {
    vae_tiling_free(ts);
    return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory for the tile buffers", what);
  }
  return DIT_OK;
}

dit_status vae_tiling_run(vae_run *r, vae_fwd_fn fwd, const void *model, vae_tiling *ts, const float *in, float *out,
                          dit_error *err) {
  const size_t fi = (size_t)ts->fi, fo = (size_t)ts->fo;
  const size_t Hi = fi * ts->h, Wi = fi * ts->w, Ho = fo * ts->h, Wo = fo * ts->w;
  const size_t tih = fi * ts->th, tiw = fi * ts->tw, toh = fo * ts->th, tow = fo * ts->tw;
  memset(out, 0, (size_t)ts->cout * Ho * Wo * sizeof *out);
  memset(ts->wsum, 0, Ho * Wo * sizeof *ts->wsum);
  for (int iy = 0; iy < ts->ny; iy++) {
    for (int ix = 0; ix < ts->nx; ix++) {
      const int sy = ts->ys[iy], sx = ts->xs[ix];
      for (int ch = 0; ch < ts->cin; ch++)
        for (size_t y = 0; y < tih; y++)
          memcpy(ts->tin + ((size_t)ch * tih + y) * tiw, in + ((size_t)ch * Hi + fi * sy + y) * Wi + fi * sx,
                 tiw * sizeof(float));
      dit_status s = fwd(r, model, ts->tin, ts->tout, ts->th, ts->tw, err);
      if (s != DIT_OK) {
        dit_error_prefix(err, "tile (%d, %d)", sy, sx);
        return s;
      }
      axis_weights(ts->ys, ts->ny, iy, ts->th, ts->fo, ts->wy);
      axis_weights(ts->xs, ts->nx, ix, ts->tw, ts->fo, ts->wx);
      const size_t Y0 = fo * sy, X0 = fo * sx;
      for (size_t y = 0; y < toh; y++) {
        float *ws = ts->wsum + (Y0 + y) * Wo + X0;
        for (size_t x = 0; x < tow; x++) ws[x] += ts->wy[y] * ts->wx[x];
      }
      for (int ch = 0; ch < ts->cout; ch++)
        for (size_t y = 0; y < toh; y++) {
          float *dst = out + ((size_t)ch * Ho + Y0 + y) * Wo + X0;
          const float *src = ts->tout + ((size_t)ch * toh + y) * tow;
          const float wyv = ts->wy[y];
          for (size_t x = 0; x < tow; x++) dst[x] += wyv * ts->wx[x] * src[x];
        }
    }
  }
  for (int ch = 0; ch < ts->cout; ch++)
    for (size_t i = 0; i < Ho * Wo; i++) out[(size_t)ch * Ho * Wo + i] /= ts->wsum[i];
  return DIT_OK;
}

void vae_run_drop(vae_run *r) {
  if (!r) return;
  vae_run_free(r);
  free(r);
}

/* The run of c at th x tw: *c->keep when it was planned for the same, else new buffers
 * (kept in *c->keep when c keeps them). */
static dit_status run_for(const vae_call *c, int th, int tw, vae_run *local, vae_run **out, dit_error *err) {
  vae_run *k = c->keep ? *c->keep : NULL;
  if (k && k->be == c->be && k->adt == c->adt && k->fwd == c->fwd && k->h == th && k->w == tw) {
    *out = k;
    return DIT_OK;
  }
  if (c->keep) {
    vae_run_drop(k);
    *c->keep = NULL;
    k = malloc(sizeof *k);
    if (!k) return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory", c->what);
  }
  vae_run *r = k ? k : local;
  dit_status s = vae_run_init(r, c->be, c->adt, c->fwd, c->model, th, tw, c->what, err);
  if (s != DIT_OK) {
    free(k);
    return s;
  }
  if (c->keep) *c->keep = k;
  *out = r;
  return DIT_OK;
}

dit_status vae_run_call(const vae_call *c, const float *in, float *out, dit_error *err) {
  const bool tiled = c->tile > 0 && (c->tile < c->h || c->tile < c->w);
  const int th = tiled && c->tile < c->h ? c->tile : c->h, tw = tiled && c->tile < c->w ? c->tile : c->w;
  const size_t in_n = (size_t)c->cin * c->fi * c->h * c->fi * c->w, out_n = (size_t)c->cout * c->fo * c->h * c->fo * c->w;
  vae_run local, *rp = NULL;
  DIT_TRY(run_for(c, th, tw, &local, &rp, err));
  vae_run r = *rp; /* the buffers; planning state reset below */
  r.plan = false;
  vae_tiling ts;
  memset(&ts, 0, sizeof ts);
  dit_status s = tiled ? vae_tiling_init(&ts, c->h, c->w, th, tw, c->tile / 4, c->cin, c->fi, c->cout, c->fo, c->what,
                                         err)
                       : DIT_OK;
  for (int b = 0; s == DIT_OK && b < c->nb; b++) {
    const float *ib = in + (size_t)b * in_n;
    float *ob = out + (size_t)b * out_n;
    s = tiled ? vae_tiling_run(&r, c->fwd, c->model, &ts, ib, ob, err) : c->fwd(&r, c->model, ib, ob, c->h, c->w, err);
  }
  vae_tiling_free(&ts);
  if (!c->keep) vae_run_free(&r);
  else if (s != DIT_OK) { /* an op may have failed half way: start afresh next time */
    vae_run_drop(*c->keep);
    *c->keep = NULL;
  }
  if (s != DIT_OK) dit_error_prefix(err, "%s", c->what);
  return s;
}

dit_status vae_call_cost(const vae_call *c, dit_cost *out, dit_error *err) {
  const bool tiled = c->tile > 0 && (c->tile < c->h || c->tile < c->w);
  const int th = tiled && c->tile < c->h ? c->tile : c->h, tw = tiled && c->tile < c->w ? c->tile : c->w;
  vae_run r;
  DIT_TRY(vae_run_plan(&r, c->be, c->adt, c->fwd, c->model, th, tw, err));
  out->act_bytes = vae_run_bytes(&r);
  double pieces = 1;
  if (tiled) {
    vae_tiling ts;
    DIT_TRY(vae_tiling_init(&ts, c->h, c->w, th, tw, c->tile / 4, c->cin, c->fi, c->cout, c->fo, c->what, err));
    pieces = (double)ts.ny * ts.nx;
    const size_t fi = (size_t)c->fi, fo = (size_t)c->fo;
    out->act_bytes += sizeof(float) * ((size_t)c->cin * fi * th * fi * tw + (size_t)c->cout * fo * th * fo * tw +
                                       fo * th + fo * tw + fo * c->h * fo * c->w);
    vae_tiling_free(&ts);
  }
  out->flops = r.flops * pieces * c->nb;
  return DIT_OK;
}

size_t vae_first_nonfinite(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return i;
  return n;
}

dit_status vae_check_decode_io(const dit_tensor *z, const dit_tensor *img, int zc, int oc, int64_t f, int tile,
                               dit_error *err) {
  char a[128], b[128];
  if (z->dtype != DIT_F32 || z->ndim != 4 || z->shape[0] < 1 || z->shape[1] != zc || z->shape[2] < 1 ||
      z->shape[3] < 1 || !dit_tensor_is_contiguous(z) || !z->data || z->device != DIT_DEV_CPU)
    return dit_errorf(err, DIT_ERR_INVALID_ARG,
                      "vae decode: z must be a contiguous host F32 [B, %d, h, w] tensor, got %s %s", zc,
                      dit_dtype_name(z->dtype), dit_shape_str(z->shape, z->ndim, a, sizeof a));
  if (z->shape[2] * f > VAE_MAX_IMAGE_SIDE || z->shape[3] * f > VAE_MAX_IMAGE_SIDE || z->shape[0] > 4096)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae decode: z %s decodes to more than %d pixels per side",
                      dit_shape_str(z->shape, z->ndim, a, sizeof a), VAE_MAX_IMAGE_SIDE);
  const int64_t want[4] = {z->shape[0], oc, z->shape[2] * f, z->shape[3] * f};
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

dit_status vae_set_act_dtype(dit_backend *be, dit_dtype *adt, vae_run **keep, dit_dtype dt, dit_error *err) {
  DIT_TRY(dit_backend_check_act_dtype(be, dt, "vae", err));
  if (dt != *adt) {
    vae_run_drop(*keep);
    *keep = NULL;
  }
  *adt = dt;
  return DIT_OK;
}

dit_status vae_decode_checked(const vae_call *call, const dit_tensor *z, dit_tensor *img, dit_error *err) {
  const size_t zn = (size_t)dit_tensor_numel(z), in = (size_t)dit_tensor_numel(img);
  size_t bad = vae_first_nonfinite(z->data, zn);
  if (bad < zn) return dit_errorf(err, DIT_ERR_NUMERIC, "vae decode: the latent z holds NaN/Inf (element %zu)", bad);
  DIT_TRY(vae_run_call(call, z->data, img->data, err));
  bad = vae_first_nonfinite(img->data, in);
  if (bad < in)
    return dit_errorf(err, DIT_ERR_NUMERIC, "vae decode: the decoded image holds NaN/Inf (element %zu)", bad);
  return DIT_OK;
}
