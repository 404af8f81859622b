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
    if (ub->upsample) VAE_STAGE(vae_upsample_fwd(r, ub, &x, err), "decoder.up_blocks.%d.upsamplers.0", i);
  }
  DIT_TRY(vae_view(r, &tx, x.buf, x.c, x.h, x.w, err));
  VAE_STAGE(vae_gnorm(r, &tx, &tx, groups, &m->norm_out_w, &m->norm_out_b, true, err), "decoder.conv_norm_out");
  nb = vae_other(x.buf, 0);
  DIT_TRY(vae_view(r, &ty, nb, c->out_channels, x.h, x.w, err));
  VAE_STAGE(vae_conv(r, &ty, &tx, &m->conv_out_w, &m->conv_out_b, 1, 1, err), "decoder.conv_out");
  return vae_output(r, &ty, out, err);
}

/* The decoder's call on nb latents of h x w (buffers kept in *keep when not NULL). */
static vae_call decode_call(const dit_vae_kl *m, int nb, int h, int w, int tile, vae_run **keep) {
  const dit_vae_kl_config *c = &m->cfg;
  return (vae_call){m->be, m->adt, decoder_fwd, m, nb, h, w, tile, c->latent_channels, 1, c->out_channels,
                    1 << (c->n_levels - 1), "vae decode", keep};
}

dit_status dit_vae_kl_cost_of(const dit_vae_kl *m, int h, int w, int tile, dit_cost *out, dit_error *err) {
  if (!m || !out || h < 1 || w < 1 || tile < 0) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae cost: bad arguments");
  const vae_call call = decode_call(m, 1, h, w, tile, NULL);
  return vae_call_cost(&call, out, err);
}

/* ---- the entry point ---- */

static dit_status check_args(const dit_vae_kl *m, const dit_tensor *z, const dit_tensor *img, int tile,
                             dit_error *err) {
  if (!m || !z || !img) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae decode: NULL argument");
  const dit_vae_kl_config *c = &m->cfg;
  return vae_check_decode_io(z, img, c->latent_channels, c->out_channels, (int64_t)1 << (c->n_levels - 1), tile, err);
}

dit_status dit_vae_kl_set_act_dtype(dit_vae_kl *m, dit_dtype dt, dit_error *err) {
  if (!m) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae: no model");
  return vae_set_act_dtype(m->be, &m->adt, &m->keep, dt, err);
}

dit_status dit_vae_kl_decode(dit_vae_kl *m, const dit_tensor *z, dit_tensor *img, int tile, dit_error *err) {
  DIT_TRY(check_args(m, z, img, tile, err));
  int nb = (int)z->shape[0], h = (int)z->shape[2], w = (int)z->shape[3];
  /* on a GPU the activation buffers stay for the next decode of the same size */
  const vae_call call = decode_call(m, nb, h, w, tile, dit_backend_is_host(m->be) ? NULL : &m->keep);
  return vae_decode_checked(&call, z, img, err);
}
