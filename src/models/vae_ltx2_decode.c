/* The LTX-2 video VAE decoder's forward pass (see vae_ltx2.h) on one item [1, C, F, H, W].
 * Activations live in six slots of one backend buffer: two for the running activation (a
 * block writes its output in place or into the other one), the norm outputs, the padded
 * input of a convolution, a convolution's output and the resnet shortcut. The pass runs
 * twice with the same code: first as a plan (no op is called; each slot records the largest
 * tensor placed in it), then for real in a buffer of that size (kept for the next decode).
 *
 * A causal conv: the padded input (replicate frames in time; the reflect rows and columns in
 * space, or none when the conv's own zero padding does it) is built with copies of slices,
 * then one conv3d. The pixel shuffles (upsamplers, the final unpatchify) are strided copies. */
#include <string.h>

#include "models/vae_ltx2_internal.h"

enum { S_A, S_B, S_TMP, S_PAD, S_H, S_SC, NSLOT };

typedef struct run {
  dit_vae_ltx2 *m;
  dit_backend *be;
  dit_device dev;
  bool plan;
  size_t need[NSLOT];
  char *slot[NSLOT];
} run;

/* An activation [1, c, f, h, w] in slot `slot`. */
typedef struct act {
  int slot, c, f, h, w;
} act;

/* Calls a backend op on the real pass only. */
#define OP(call)                   \
  do {                             \
    if (!r->plan) DIT_TRY(call);   \
  } while (0)

static int other(int slot) { return slot == S_A ? S_B : S_A; }

/* [1, c, f, h, w] F32 at the start of slot i (the plan records its size; data NULL then). */
static dit_status view(run *r, dit_tensor *t, int i, int64_t c, int64_t f, int64_t h, int64_t w, dit_error *err) {
  const size_t bytes = (size_t)(c * f * h * w) * sizeof(float);
  if (r->plan) {
    if (bytes > r->need[i]) r->need[i] = bytes;
  } else if (bytes > r->need[i]) {
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae: slot %d holds %zu bytes, %zu needed", i, r->need[i], bytes);
  }
  *t = dit_tensor_make(DIT_F32, r->plan ? NULL : r->slot[i], 5, (int64_t[]){1, c, f, h, w});
  t->device = r->dev;
  return DIT_OK;
}

static dit_tensor view_of(const act *a, run *r) {
  dit_tensor t = dit_tensor_make(DIT_F32, r->plan ? NULL : r->slot[a->slot], 5, (int64_t[]){1, a->c, a->f, a->h, a->w});
  t.device = r->dev;
  return t;
}

/* A strided view of base's data from element off: nd dims of shape with element strides st. */
static dit_tensor strided(const dit_tensor *base, int64_t off, int nd, const int64_t *shape, const int64_t *st) {
  dit_tensor t = dit_tensor_make(DIT_F32, base->data ? (float *)base->data + off : NULL, nd, shape);
  for (int i = 0; i < nd; i++) t.stride[i] = st[i];
  t.device = base->device;
  return t;
}

static dit_status copy(run *r, const dit_tensor *base_d, int64_t od, const dit_tensor *base_s, int64_t os, int nd,
                       const int64_t *shape, const int64_t *sd, const int64_t *ss, dit_error *err) {
  if (r->plan) return DIT_OK;
  dit_tensor d = strided(base_d, od, nd, shape, sd), s = strided(base_s, os, nd, shape, ss);
  return dit_op_copy(r->be, &d, &s, err);
}

/* P [1, C, ft + F + bt, H + 2 sp, W + 2 sp] from x [1, C, F, H, W]: x in the middle, ft copies of
 * its first frame before and bt of its last after, then (sp > 0) sp reflected rows on each side
 * and sp reflected columns (over the padded rows: corners reflect both ways). */
static dit_status pad_fill(run *r, dit_tensor *P, const dit_tensor *x, int ft, int bt, int sp, dit_error *err) {
  const int64_t C = x->shape[1], F = x->shape[2], H = x->shape[3], W = x->shape[4];
  const int64_t Fp = P->shape[2], Hp = P->shape[3], Wp = P->shape[4], fs = Hp * Wp, cs = Fp * fs, in = sp * Wp + sp;
  const int64_t pst[4] = {cs, fs, Wp, 1}, xst[4] = {F * H * W, H * W, W, 1}, rep[4] = {F * H * W, 0, W, 1};
  DIT_TRY(copy(r, P, ft * fs + in, x, 0, 4, (int64_t[]){C, F, H, W}, pst, xst, err));
  if (ft) DIT_TRY(copy(r, P, in, x, 0, 4, (int64_t[]){C, ft, H, W}, pst, rep, err));
  if (bt) DIT_TRY(copy(r, P, (ft + F) * fs + in, x, (F - 1) * H * W, 4, (int64_t[]){C, bt, H, W}, pst, rep, err));
  const int64_t rst[3] = {cs, fs, 1}, cst[3] = {cs, fs, Wp};
  for (int i = 1; i <= sp; i++) { /* rows sp - i and sp + H - 1 + i, then the columns likewise */
    DIT_TRY(copy(r, P, (sp - i) * Wp + sp, P, (sp + i) * Wp + sp, 3, (int64_t[]){C, Fp, W}, rst, rst, err));
    DIT_TRY(copy(r, P, (sp + H - 1 + i) * Wp + sp, P, (sp + H - 1 - i) * Wp + sp, 3, (int64_t[]){C, Fp, W}, rst, rst,
                 err));
  }
  for (int i = 1; i <= sp; i++) {
    DIT_TRY(copy(r, P, sp - i, P, sp + i, 3, (int64_t[]){C, Fp, Hp}, cst, cst, err));
    DIT_TRY(copy(r, P, sp + W - 1 + i, P, sp + W - 1 - i, 3, (int64_t[]){C, Fp, Hp}, cst, cst, err));
  }
  return DIT_OK;
}

/* LTX2VideoCausalConv3d on x [1, ci, F, H, W] into y (slot ys) [1, co, F, H, W]. */
static dit_status causal_conv(run *r, const ltx2_conv *cv, const dit_tensor *x, int ys, dit_tensor *y,
                              dit_error *err) {
  const dit_vae_ltx2_config *c = &r->m->cfg;
  const int k = cv->k, ft = c->causal ? k - 1 : (k - 1) / 2, bt = c->causal ? 0 : (k - 1) / 2, p = k / 2;
  const int sp = c->reflect ? p : 0;
  const int64_t F = x->shape[2], H = x->shape[3], W = x->shape[4];
  if (sp && (H <= sp || W <= sp))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae: reflect padding of %d needs more than %d rows and columns (%lld x "
                      "%lld)", sp, sp, (long long)H, (long long)W);
  dit_tensor P;
  DIT_TRY(view(r, &P, S_PAD, cv->ci, F + ft + bt, H + 2 * sp, W + 2 * sp, err));
  DIT_TRY(pad_fill(r, &P, x, ft, bt, sp, err));
  DIT_TRY(view(r, y, ys, cv->co, F + ft + bt - k + 1, H, W, err));
  OP(dit_op_conv3d(r->be, y, &P, &cv->w, &cv->b, 0, p - sp, p - sp, err));
  return DIT_OK;
}

/* The shortcut of a channel-changing resnet: conv_shortcut(norm3(x)), the LayerNorm over the
 * channels of each position (x seen as [n, cin] through a transposing copy and back), into sc. */
static dit_status shortcut(run *r, const ltx2_resnet *rn, const dit_tensor *x, dit_tensor *sc, dit_error *err) {
  const int64_t cin = rn->cin, n = x->shape[2] * x->shape[3] * x->shape[4];
  dit_tensor t, p;
  DIT_TRY(view(r, &t, S_TMP, cin, x->shape[2], x->shape[3], x->shape[4], err));
  DIT_TRY(view(r, &p, S_PAD, cin, x->shape[2], x->shape[3], x->shape[4], err));
  DIT_TRY(copy(r, &t, 0, x, 0, 2, (int64_t[]){n, cin}, (int64_t[]){cin, 1}, (int64_t[]){1, n}, err));
  dit_tensor rows = strided(&t, 0, 2, (int64_t[]){n, cin}, (int64_t[]){cin, 1});
  OP(dit_op_layer_norm(r->be, &rows, &rows, &rn->norm3_w, &rn->norm3_b, r->m->cfg.resnet_eps, err));
  DIT_TRY(copy(r, &p, 0, &t, 0, 2, (int64_t[]){cin, n}, (int64_t[]){n, 1}, (int64_t[]){1, cin}, err));
  DIT_TRY(view(r, sc, S_SC, rn->cout, x->shape[2], x->shape[3], x->shape[4], err));
  OP(dit_op_conv3d(r->be, sc, &p, &rn->shortcut.w, &rn->shortcut.b, 0, 0, 0, err));
  return DIT_OK;
}

/* LTX2VideoResnetBlock3d on *a (cin channels): in place, or into the other running slot when
 * the channels change. */
static dit_status resnet(run *r, const ltx2_resnet *rn, act *a, dit_error *err) {
  const float eps = LTX2_VAE_NORM_EPS;
  dit_tensor x = view_of(a, r), t, h;
  DIT_TRY(view(r, &t, S_TMP, rn->cin, a->f, a->h, a->w, err));
  OP(dit_op_pixel_norm(r->be, &t, &x, eps, true, err));
  DIT_TRY(causal_conv(r, &rn->conv1, &t, S_H, &h, err));
  DIT_TRY(view(r, &t, S_TMP, rn->cout, a->f, a->h, a->w, err));
  OP(dit_op_pixel_norm(r->be, &t, &h, eps, true, err));
  DIT_TRY(causal_conv(r, &rn->conv2, &t, S_H, &h, err));
  if (rn->cin == rn->cout) {
    OP(dit_op_add(r->be, &x, &h, &x, err));
    return DIT_OK;
  }
  dit_tensor sc, y;
  DIT_TRY(shortcut(r, rn, &x, &sc, err));
  a->slot = other(a->slot), a->c = rn->cout;
  DIT_TRY(view(r, &y, a->slot, a->c, a->f, a->h, a->w, err));
  OP(dit_op_add(r->be, &y, &h, &sc, err));
  return DIT_OK;
}

/* dst [1, c, F s0 - (s0 - 1), H s1, W s2] = the 3-D pixel shuffle of src [1, c S, F, H, W]
 * (channel c S + i0 s1 s2 + i1 s2 + i2 to frame f s0 + i0, row h s1 + i1, column w s2 + i2),
 * without the first s0 - 1 frames. Dims (c, i0, i1, i2, f, h, w): f = 0 keeps i0 = s0 - 1 only. */
static dit_status shuffle(run *r, const dit_tensor *dst, const dit_tensor *src, const int s[3], dit_error *err) {
  const int64_t c = dst->shape[1], F = src->shape[2], H = src->shape[3], W = src->shape[4];
  const int64_t S = (int64_t)s[0] * s[1] * s[2], fhw = F * H * W, H2 = H * s[1], W2 = W * s[2], fs = H2 * W2;
  const int64_t F2 = dst->shape[2];
  const int64_t ss[7] = {S * fhw, (int64_t)s[1] * s[2] * fhw, s[2] * fhw, fhw, H * W, W, 1};
  const int64_t ds[7] = {F2 * fs, fs, W2, 1, s[0] * fs, s[1] * W2, s[2]};
  DIT_TRY(copy(r, dst, 0, src, (s[0] - 1) * ss[1], 7, (int64_t[]){c, 1, s[1], s[2], 1, H, W}, ds, ss, err));
  if (F > 1)
    DIT_TRY(copy(r, dst, fs, src, H * W, 7, (int64_t[]){c, s[0], s[1], s[2], F - 1, H, W}, ds, ss, err));
  return DIT_OK;
}

/* LTX2VideoUpsampler3d on *a, into the other running slot. */
static dit_status upsampler(run *r, const ltx2_up_block *u, act *a, dit_error *err) {
  const int S = u->st[0] * u->st[1] * u->st[2];
  dit_tensor x = view_of(a, r), h, y, res;
  DIT_TRY(causal_conv(r, &u->up, &x, S_H, &h, err));
  act o = {other(a->slot), u->up.co / S, a->f * u->st[0] - (u->st[0] - 1), a->h * u->st[1], a->w * u->st[2]};
  DIT_TRY(view(r, &y, o.slot, o.c, o.f, o.h, o.w, err));
  DIT_TRY(shuffle(r, &y, &h, u->st, err));
  if (u->residual) { /* the input shuffled alike (a->c / S channels), repeated over y's channels */
    const int cr = a->c / S;
    DIT_TRY(view(r, &res, S_TMP, cr, o.f, o.h, o.w, err));
    DIT_TRY(shuffle(r, &res, &x, u->st, err));
    const int64_t blk = (int64_t)cr * o.f * o.h * o.w;
    for (int k = 0; k < o.c / cr; k++) {
      dit_tensor yk = res;
      yk.data = y.data ? (float *)y.data + k * blk : NULL;
      OP(dit_op_add(r->be, &yk, &yk, &res, err));
    }
  }
  *a = o;
  return DIT_OK;
}

/* out [1, oc, F, H p, W p] from y [1, oc p p, F, H, W]: channel c p p + a p + b to column w p + a,
 * row h p + b. Dims (c, b, a, f, h, w). */
static dit_status unpatchify(run *r, const dit_tensor *out, const dit_tensor *y, int p, dit_error *err) {
  const int64_t c = out->shape[1], F = y->shape[2], H = y->shape[3], W = y->shape[4], fhw = F * H * W;
  const int64_t Hp = H * p, Wp = W * p;
  const int64_t ss[6] = {(int64_t)p * p * fhw, fhw, p * fhw, H * W, W, 1};
  const int64_t ds[6] = {F * Hp * Wp, Wp, 1, Hp * Wp, p * Wp, p};
  return copy(r, out, 0, y, 0, 6, (int64_t[]){c, p, p, F, H, W}, ds, ss, err);
}

static dit_status forward(run *r, const dit_tensor *x, dit_tensor *out, dit_error *err) {
  const dit_vae_ltx2 *m = r->m;
  dit_tensor t, h;
  DIT_TRY(causal_conv(r, &m->conv_in, x, S_A, &t, err));
  act a = {S_A, m->conv_in.co, (int)t.shape[2], (int)t.shape[3], (int)t.shape[4]};
  for (int k = 0; k < m->n_mid; k++) DIT_TRY(resnet(r, &m->mid[k], &a, err));
  for (int i = 0; i < m->cfg.n_up; i++) {
    const ltx2_up_block *u = &m->up[i];
    if (u->has_conv_in) DIT_TRY(resnet(r, &u->conv_in, &a, err));
    if (u->has_up) DIT_TRY(upsampler(r, u, &a, err));
    for (int k = 0; k < u->n_res; k++) DIT_TRY(resnet(r, &u->res[k], &a, err));
  }
  dit_tensor xa = view_of(&a, r);
  DIT_TRY(view(r, &t, S_TMP, a.c, a.f, a.h, a.w, err));
  OP(dit_op_pixel_norm(r->be, &t, &xa, LTX2_VAE_NORM_EPS, true, err));
  DIT_TRY(causal_conv(r, &m->conv_out, &t, S_H, &h, err));
  return unpatchify(r, out, &h, m->cfg.patch_size, err);
}

dit_status ltx2_vae_decode_item(dit_vae_ltx2 *m, const dit_tensor *x, dit_tensor *out, dit_error *err) {
  run r;
  memset(&r, 0, sizeof r);
  r.m = m, r.be = m->be, r.dev = dit_backend_device(m->be), r.plan = true;
  DIT_TRY(forward(&r, x, out, err));
  DIT_TRY(dit_backend_fit_slots(m->be, r.need, NSLOT, &m->act, &m->act_bytes, r.slot, err));
  r.plan = false;
  return forward(&r, x, out, err);
}
