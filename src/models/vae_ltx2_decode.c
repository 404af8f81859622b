/* The LTX-2 video VAE decoder's forward pass (see vae_ltx2.h) on one item [1, C, F, H, W],
 * over the activation slots of vae_ltx2_internal.h. The pixel shuffles (upsamplers, the final
 * unpatchify) are strided copies. */
#include "models/vae_ltx2_internal.h"

/* dst [1, c, F s0 - (s0 - 1), H s1, W s2] = the 3-D pixel shuffle of src [1, c S, F, H, W]
 * (channel c S + i0 s1 s2 + i1 s2 + i2 to frame f s0 + i0, row h s1 + i1, column w s2 + i2),
 * without the first s0 - 1 frames. Dims (c, i0, i1, i2, f, h, w): f = 0 keeps i0 = s0 - 1 only. */
static dit_status shuffle(ltx2_vrun *r, const dit_tensor *dst, const dit_tensor *src, const int s[3], dit_error *err) {
  const int64_t c = dst->shape[1], F = src->shape[2], H = src->shape[3], W = src->shape[4];
  const int64_t S = (int64_t)s[0] * s[1] * s[2], fhw = F * H * W, H2 = H * s[1], W2 = W * s[2], fs = H2 * W2;
  const int64_t F2 = dst->shape[2];
  const int64_t ss[7] = {S * fhw, (int64_t)s[1] * s[2] * fhw, s[2] * fhw, fhw, H * W, W, 1};
  const int64_t ds[7] = {F2 * fs, fs, W2, 1, s[0] * fs, s[1] * W2, s[2]};
  DIT_TRY(ltx2_vcopy(r, dst, 0, src, (s[0] - 1) * ss[1], 7, (int64_t[]){c, 1, s[1], s[2], 1, H, W}, ds, ss, err));
  if (F > 1)
    DIT_TRY(ltx2_vcopy(r, dst, fs, src, H * W, 7, (int64_t[]){c, s[0], s[1], s[2], F - 1, H, W}, ds, ss, err));
  return DIT_OK;
}

/* LTX2VideoUpsampler3d on *a, into the other running slot. */
static dit_status upsampler(ltx2_vrun *r, const ltx2_up_block *u, ltx2_act *a, dit_error *err) {
  const int S = u->st[0] * u->st[1] * u->st[2];
  dit_tensor x = ltx2_vview_of(a, r), h, y, res;
  DIT_TRY(ltx2_vconv(r, &u->up, &x, LTX2_S_H, &h, err));
  ltx2_act o = {ltx2_other(a->slot), u->up.co / S, a->f * u->st[0] - (u->st[0] - 1), a->h * u->st[1], a->w * u->st[2]};
  DIT_TRY(ltx2_vview(r, &y, o.slot, o.c, o.f, o.h, o.w, err));
  DIT_TRY(shuffle(r, &y, &h, u->st, err));
  if (u->residual) { /* the input shuffled alike (a->c / S channels), repeated over y's channels */
    const int cr = a->c / S;
    DIT_TRY(ltx2_vview(r, &res, LTX2_S_TMP, cr, o.f, o.h, o.w, err));
    DIT_TRY(shuffle(r, &res, &x, u->st, err));
    const int64_t blk = (int64_t)cr * o.f * o.h * o.w;
    for (int k = 0; k < o.c / cr; k++) {
      dit_tensor yk = res;
      yk.data = y.data ? (float *)y.data + k * blk : NULL;
      LTX2_OP(r, dit_op_add(r->be, &yk, &yk, &res, err));
    }
  }
  *a = o;
  return DIT_OK;
}

/* out [1, oc, F, H p, W p] from y [1, oc p p, F, H, W]: channel c p p + a p + b to column w p + a,
 * row h p + b. Dims (c, b, a, f, h, w). */
static dit_status unpatchify(ltx2_vrun *r, const dit_tensor *out, const dit_tensor *y, int p, dit_error *err) {
  const int64_t c = out->shape[1], F = y->shape[2], H = y->shape[3], W = y->shape[4], fhw = F * H * W;
  const int64_t Hp = H * p, Wp = W * p;
  const int64_t ss[6] = {(int64_t)p * p * fhw, fhw, p * fhw, H * W, W, 1};
  const int64_t ds[6] = {F * Hp * Wp, Wp, 1, Hp * Wp, p * Wp, p};
  return ltx2_vcopy(r, out, 0, y, 0, 6, (int64_t[]){c, p, p, F, H, W}, ds, ss, err);
}

typedef struct dec_ctx {
  const dit_vae_ltx2 *m;
  const dit_tensor *x;
  dit_tensor *out;
} dec_ctx;

static dit_status forward(ltx2_vrun *r, void *ctx, dit_error *err) {
  const dec_ctx *d = ctx;
  const dit_vae_ltx2 *m = d->m;
  dit_tensor t, h;
  DIT_TRY(ltx2_vconv(r, &m->conv_in, d->x, LTX2_S_A, &t, err));
  ltx2_act a = {LTX2_S_A, m->conv_in.co, (int)t.shape[2], (int)t.shape[3], (int)t.shape[4]};
  for (int k = 0; k < m->n_mid; k++) DIT_TRY(ltx2_vresnet(r, &m->mid[k], &a, err));
  for (int i = 0; i < m->cfg.n_up; i++) {
    const ltx2_up_block *u = &m->up[i];
    if (u->has_conv_in) DIT_TRY(ltx2_vresnet(r, &u->conv_in, &a, err));
    if (u->has_up) DIT_TRY(upsampler(r, u, &a, err));
    for (int k = 0; k < u->n_res; k++) DIT_TRY(ltx2_vresnet(r, &u->res[k], &a, err));
  }
  dit_tensor xa = ltx2_vview_of(&a, r);
  DIT_TRY(ltx2_vview(r, &t, LTX2_S_TMP, a.c, a.f, a.h, a.w, err));
  LTX2_OP(r, dit_op_pixel_norm(r->be, &t, &xa, LTX2_VAE_NORM_EPS, true, err));
  DIT_TRY(ltx2_vconv(r, &m->conv_out, &t, LTX2_S_H, &h, err));
  return unpatchify(r, d->out, &h, m->cfg.patch_size, err);
}

dit_status ltx2_vae_decode_item(dit_vae_ltx2 *m, const dit_tensor *x, dit_tensor *out, dit_error *err) {
  ltx2_vrun r = {.be = m->be, .causal = m->cfg.causal, .reflect = m->cfg.reflect, .eps = m->cfg.resnet_eps};
  dec_ctx d = {m, x, out};
  return ltx2_vrun_pass(&r, forward, &d, &m->act, &m->act_bytes, err);
}

dit_status ltx2_vae_item_cost(const dit_vae_ltx2 *m, int F, int H, int W, size_t *bytes, double *flops,
                              dit_error *err) {
  ltx2_vrun r = {.be = m->be, .causal = m->cfg.causal, .reflect = m->cfg.reflect, .eps = m->cfg.resnet_eps,
                 .plan = true, .dev = dit_backend_device(m->be)};
  int T = 0, Ho = 0, Wo = 0;
  dit_vae_ltx2_output_size(m, F, H, W, &T, &Ho, &Wo);
  const dit_tensor x = dit_tensor_make(DIT_F32, NULL, 5, (int64_t[]){1, m->cfg.latent_channels, F, H, W});
  dit_tensor out = dit_tensor_make(DIT_F32, NULL, 5, (int64_t[]){1, m->cfg.out_channels, T, Ho, Wo});
  dec_ctx d = {m, &x, &out};
  DIT_TRY(forward(&r, &d, err));
  *bytes = 0;
  for (int i = 0; i < LTX2_NSLOT; i++) *bytes += (r.need[i] + 255) & ~(size_t)255; /* dit_backend_fit_slots' */
  *flops = r.flops;
  return DIT_OK;
}
