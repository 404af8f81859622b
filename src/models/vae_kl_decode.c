/* AutoencoderKL decoder forward pass on the shared machinery of vae_kl_run.c (activation
 * plan, blocks, tiling): conv_in, the mid block, the up blocks with their banded nearest-2x
 * upsampling, and the tiled decode.
 *
 * Memory: each block takes its input in one buffer and leaves its output in one buffer, so
 * only a block's own temporaries are alive at any time, never the whole stack of
 * intermediates. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/vae_kl_internal.h"

#define MAX_IMAGE_SIDE 65536

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
static dit_status upsample_fwd(vae_run *r, const vae_up_block *ub, vact *x, dit_error *err) {
  int a = vae_other(x->buf, 0), b = vae_other(x->buf, 1);
  int64_t c = x->c, h = x->h, w = x->w;
  int64_t n = h / 8 > 32 ? h / 8 : 32;
  if (r->dev != DIT_DEV_CPU && (size_t)(c * 4 * h * w) * r->es <= VAE_GPU_WHOLE_UPSAMPLE) n = h;
  if (n > h) n = h;
  dit_tensor tx, ty, xin, up, cv;
  DIT_TRY(vae_view(r, &tx, x->buf, c, h, w, err));
  DIT_TRY(vae_view(r, &ty, b, ub->cout, 2 * h, 2 * w, err));
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
    DIT_TRY(vae_view_at(r, &cv, a, o_cv, ub->cout, 2 * nb, 2 * w, err));
  }
  for (int64_t i0 = 0; n < h && i0 < h; i0 += n) {
    int64_t i1 = i0 + n < h ? i0 + n : h;
    int64_t lo = i0 > 0 ? i0 - 1 : 0, hi = i1 < h ? i1 + 1 : h, rows = hi - lo;
    dit_tensor src = vae_act4(r, vae_elp(r, tx.data, lo * w), 1, c, rows, w);
    src.stride[0] = c * h * w;
    src.stride[1] = h * w;
    dit_tensor bin = vae_act4(r, xin.data, 1, c, rows, w);
    dit_tensor bup = vae_act4(r, up.data, 1, c, 2 * rows, 2 * w);
    dit_tensor bcv = vae_act4(r, cv.data, 1, ub->cout, 2 * rows, 2 * w);
    VAE_STAGE(vae_copy(r, &bin, &src, err), "band rows %lld..%lld", (long long)lo, (long long)hi);
    if (!r->plan) VAE_STAGE(dit_op_upsample2x(r->be, &bup, &bin, err), "upsample2x");
    VAE_STAGE(vae_conv(r, &bcv, &bup, &ub->up_w, &ub->up_b, 1, 1, err), "conv");
    /* keep output rows [2 i0, 2 i1): band rows from 2 (i0 - lo) */
    dit_tensor keep = vae_act4(r, vae_elp(r, bcv.data, 2 * (i0 - lo) * 2 * w), 1, ub->cout, 2 * (i1 - i0), 2 * w);
    keep.stride[0] = ub->cout * 2 * rows * 2 * w;
    keep.stride[1] = 2 * rows * 2 * w;
    dit_tensor dst = vae_act4(r, vae_elp(r, ty.data, 2 * i0 * 2 * w), 1, ub->cout, 2 * (i1 - i0), 2 * w);
    dst.stride[0] = ub->cout * 4 * h * w;
    dst.stride[1] = 4 * h * w;
    VAE_STAGE(vae_copy(r, &dst, &keep, err), "band output");
  }
  x->buf = b;
  x->c = ub->cout;
  x->h *= 2;
  x->w *= 2;
  return DIT_OK;
}

/* The whole decoder on one latent z [L, h, w] (host, contiguous) into out
 * [out_channels, f*h, f*w] (host, contiguous). Both are NULL while planning. */
static dit_status decoder_fwd(vae_run *r, const void *model, const float *z, float *out, int h, int w,
                              dit_error *err) {
  const dit_vae_kl *m = model;
  const dit_vae_kl_config *c = &m->cfg;
  int groups = c->norm_num_groups;
  vact x = {0, c->latent_channels, h, w};
  dit_tensor tx, ty;
  DIT_TRY(vae_input(r, &tx, 0, z, x.c, h, w, err));
  if (c->use_post_quant_conv) {
    DIT_TRY(vae_view(r, &ty, 1, x.c, h, w, err));
    VAE_STAGE(vae_conv(r, &ty, &tx, &m->pq_w, &m->pq_b, 1, 0, err), "post_quant_conv");
    x.buf = 1;
    tx = ty;
  }
  int top = c->block_out_channels[c->n_levels - 1];
  int nb = vae_other(x.buf, 0);
  DIT_TRY(vae_view(r, &ty, nb, top, h, w, err));
  VAE_STAGE(vae_conv(r, &ty, &tx, &m->conv_in_w, &m->conv_in_b, 1, 1, err), "decoder.conv_in");
  x.buf = nb;
  x.c = top;
  DIT_TRY(vae_mid_fwd(r, m->mid_res, c->mid_block_add_attention ? &m->mid_attn : NULL, groups, &x, "decoder", err));
  for (int i = 0; i < c->n_levels; i++) {
    const vae_up_block *ub = &m->up[i];
    for (int k = 0; k < ub->n_resnets; k++)
      VAE_STAGE(vae_resnet_fwd(r, &ub->resnets[k], groups, &x, err), "decoder.up_blocks.%d.resnets.%d", i, k);
    if (ub->upsample) VAE_STAGE(upsample_fwd(r, ub, &x, err), "decoder.up_blocks.%d.upsamplers.0", i);
  }
  DIT_TRY(vae_view(r, &tx, x.buf, x.c, x.h, x.w, err));
  VAE_STAGE(vae_gnorm(r, &tx, &tx, groups, &m->norm_out_w, &m->norm_out_b, true, err), "decoder.conv_norm_out");
  nb = vae_other(x.buf, 0);
  DIT_TRY(vae_view(r, &ty, nb, c->out_channels, x.h, x.w, err));
  VAE_STAGE(vae_conv(r, &ty, &tx, &m->conv_out_w, &m->conv_out_b, 1, 1, err), "decoder.conv_out");
  return vae_output(r, &ty, out, err);
}

dit_status dit_vae_kl_cost_of(const dit_vae_kl *m, int h, int w, dit_vae_kl_cost *out, dit_error *err) {
  if (!m || !out || h < 1 || w < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae cost: bad arguments");
  vae_run r;
  DIT_TRY(vae_run_plan(&r, m->be, m->adt, decoder_fwd, m, h, w, err));
  out->flops = r.flops;
  out->act_bytes = vae_run_bytes(&r);
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

dit_status dit_vae_kl_set_act_dtype(dit_vae_kl *m, dit_dtype dt, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae: no model");
  DIT_TRY(dit_backend_check_act_dtype(m->be, dt, "vae", err));
  if (dt != m->adt) {
    vae_run_drop(m->keep);
    m->keep = NULL;
  }
  m->adt = dt;
  return DIT_OK;
}

dit_status dit_vae_kl_decode(dit_vae_kl *m, const dit_tensor *z, dit_tensor *img, int tile, dit_error *err) {
  DIT_TRY(check_args(m, z, img, tile, err));
  const dit_vae_kl_config *c = &m->cfg;
  int nb = (int)z->shape[0], h = (int)z->shape[2], w = (int)z->shape[3];
  size_t zn = (size_t)dit_tensor_numel(z), in = (size_t)dit_tensor_numel(img);
  size_t bad = vae_first_nonfinite(z->data, zn);
  if (bad < zn) return dit_errorf(err, DIT_ERR_NUMERIC, "vae decode: the latent z holds NaN/Inf (element %zu)", bad);
  /* on a GPU the activation buffers stay for the next decode of the same size */
  const vae_call call = {m->be, m->adt, decoder_fwd, m, nb, h, w, tile, c->latent_channels, 1, c->out_channels,
                         1 << (c->n_levels - 1), "vae decode", dit_backend_is_host(m->be) ? NULL : &m->keep};
  DIT_TRY(vae_run_call(&call, z->data, img->data, err));
  bad = vae_first_nonfinite(img->data, in);
  if (bad < in)
    return dit_errorf(err, DIT_ERR_NUMERIC, "vae decode: the decoded image holds NaN/Inf (element %zu)", bad);
  return DIT_OK;
}
