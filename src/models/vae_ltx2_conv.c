/* What the LTX-2 video VAE's encoder and decoder both run (vae_ltx2_internal.h): their config
 * lists, their weight tables' convolutions and resnets, and the plan-then-run pass over the
 * activation slots with its causal convolution and resnet.
 *
 * A causal conv: the padded input (replicate frames in time; the reflect rows and columns in
 * space, or none when the conv's own zero padding does it) is built with copies of slices,
 * then one conv3d. */
#include <string.h>

#include "core/dtype.h"
#include "io/json.h"
#include "models/vae_ltx2_internal.h"

/* ---- config ---- */

#define MAX_LIST 17

dit_status ltx2_json_ints_n(const json_t *j, const char *key, size_t n, int64_t max, const int *def, int *out,
                            const char *what, dit_error *err) {
  const json_t *v = json_object_get(j, key);
  if (!v || json_is_null(v)) {
    for (size_t i = 0; i < n; i++) out[i] = def[i];
    return DIT_OK;
  }
  int64_t a[MAX_LIST];
  size_t got = 0;
  DIT_TRY(dit_json_int_array(j, key, 1, max, a, MAX_LIST, &got, what, err));
  if (got != n) return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s has %zu entries, expected %zu", what, key, got, n);
  for (size_t i = 0; i < n; i++) out[i] = (int)a[i];
  return DIT_OK;
}

dit_status ltx2_json_bools_n(const json_t *j, const char *key, size_t n, bool def, bool *out, const char *what,
                             dit_error *err) {
  const json_t *v = json_object_get(j, key);
  if (!v || json_is_null(v) || json_is_boolean(v)) {
    for (size_t i = 0; i < n; i++) out[i] = v && json_is_boolean(v) ? json_is_true(v) : def;
    return DIT_OK;
  }
  if (!json_is_array(v) || json_array_size(v) != n)
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s must be a boolean or an array of %zu booleans", what, key, n);
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(v, i);
    if (!json_is_boolean(e)) return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s[%zu] is not a boolean", what, key, i);
    out[i] = json_is_true(e);
  }
  return DIT_OK;
}

dit_status ltx2_json_strides(const json_t *j, const char *key, size_t n, int st[][3], const char *what,
                             dit_error *err) {
  const json_t *v = json_object_get(j, key);
  if (v && !json_is_null(v) && (!json_is_array(v) || json_array_size(v) != n))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s must be an array of %zu strings", what, key, n);
  for (size_t i = 0; i < n; i++) {
    const char *s = v && !json_is_null(v) ? json_string_value(json_array_get(v, i)) : "spatiotemporal";
    if (!s) return dit_errorf(err, DIT_ERR_FORMAT, "%s: %s[%zu] is not a string", what, key, i);
    const bool sp = !strcmp(s, "spatial"), tm = !strcmp(s, "temporal");
    if (!sp && !tm && strcmp(s, "spatiotemporal"))
      return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: %s[%zu] \"%s\" is not spatial, temporal or spatiotemporal",
                        what, key, i, s);
    st[i][0] = sp ? 1 : 2, st[i][1] = st[i][2] = tm ? 1 : 2;
  }
  return DIT_OK;
}

/* ---- weights ---- */

void ltx2_latent_stats(const dit_tensor *mean_t, const dit_tensor *std_t, size_t C, float *mean, float *std) {
  for (size_t i = 0; i < C; i++) mean[i] = 0.0f, std[i] = 1.0f;
  if (mean_t->data) dit_convert_to_f32(mean, mean_t->data, mean_t->dtype, C);
  if (std_t->data) dit_convert_to_f32(std, std_t->data, std_t->dtype, C);
}

void ltx2_add_conv(dit_wtable *t, ltx2_conv *cv, int co, int ci, int k, const char *base, const char *suffix) {
  cv->co = co, cv->ci = ci, cv->k = k;
  dit_wtable_add(t, &cv->w, false, 5, (int64_t[]){co, ci, k, k, k}, "%s%s.weight", base, suffix);
  dit_wtable_add(t, &cv->b, false, 1, (int64_t[]){co}, "%s%s.bias", base, suffix);
}

void ltx2_add_resnet(dit_wtable *t, ltx2_resnet *r, int cin, int cout, const char *base) {
  r->cin = cin, r->cout = cout;
  ltx2_add_conv(t, &r->conv1, cout, cin, 3, base, ".conv1.conv");
  ltx2_add_conv(t, &r->conv2, cout, cout, 3, base, ".conv2.conv");
  if (cin == cout) return;
  dit_wtable_add(t, &r->norm3_w, false, 1, (int64_t[]){cin}, "%s.norm3.weight", base);
  dit_wtable_add(t, &r->norm3_b, false, 1, (int64_t[]){cin}, "%s.norm3.bias", base);
  ltx2_add_conv(t, &r->shortcut, cout, cin, 1, base, ".conv_shortcut");
}

/* ---- the pass ---- */

dit_status ltx2_vview(ltx2_vrun *r, dit_tensor *t, int i, int64_t c, int64_t f, int64_t h, int64_t w, dit_error *err) {
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

dit_tensor ltx2_vview_of(const ltx2_act *a, const ltx2_vrun *r) {
  dit_tensor t = dit_tensor_make(DIT_F32, r->plan ? NULL : r->slot[a->slot], 5, (int64_t[]){1, a->c, a->f, a->h, a->w});
  t.device = r->dev;
  return t;
}

dit_tensor ltx2_vstrided(const dit_tensor *base, int64_t off, int nd, const int64_t *shape, const int64_t *st) {
  dit_tensor t = dit_tensor_make(DIT_F32, base->data ? (float *)base->data + off : NULL, nd, shape);
  for (int i = 0; i < nd; i++) t.stride[i] = st[i];
  t.device = base->device;
  return t;
}

dit_status ltx2_vcopy(ltx2_vrun *r, const dit_tensor *base_d, int64_t od, const dit_tensor *base_s, int64_t os, int nd,
                      const int64_t *shape, const int64_t *sd, const int64_t *ss, dit_error *err) {
  if (r->plan) return DIT_OK;
  dit_tensor d = ltx2_vstrided(base_d, od, nd, shape, sd), s = ltx2_vstrided(base_s, os, nd, shape, ss);
  return dit_op_copy(r->be, &d, &s, err);
}

/* P [1, C, ft + F + bt, H + 2 sp, W + 2 sp] from x [1, C, F, H, W]: x in the middle, ft copies of
 * its first frame before and bt of its last after, then (sp > 0) sp reflected rows on each side
 * and sp reflected columns (over the padded rows: corners reflect both ways). */
static dit_status pad_fill(ltx2_vrun *r, dit_tensor *P, const dit_tensor *x, int ft, int bt, int sp, dit_error *err) {
  const int64_t C = x->shape[1], F = x->shape[2], H = x->shape[3], W = x->shape[4];
  const int64_t Fp = P->shape[2], Hp = P->shape[3], Wp = P->shape[4], fs = Hp * Wp, cs = Fp * fs, in = sp * Wp + sp;
  const int64_t pst[4] = {cs, fs, Wp, 1}, xst[4] = {F * H * W, H * W, W, 1}, rep[4] = {F * H * W, 0, W, 1};
  DIT_TRY(ltx2_vcopy(r, P, ft * fs + in, x, 0, 4, (int64_t[]){C, F, H, W}, pst, xst, err));
  if (ft) DIT_TRY(ltx2_vcopy(r, P, in, x, 0, 4, (int64_t[]){C, ft, H, W}, pst, rep, err));
  if (bt)
    DIT_TRY(ltx2_vcopy(r, P, (ft + F) * fs + in, x, (F - 1) * H * W, 4, (int64_t[]){C, bt, H, W}, pst, rep, err));
  const int64_t rst[3] = {cs, fs, 1}, cst[3] = {cs, fs, Wp};
  for (int i = 1; i <= sp; i++) { /* rows sp - i and sp + H - 1 + i, then the columns likewise */
    DIT_TRY(ltx2_vcopy(r, P, (sp - i) * Wp + sp, P, (sp + i) * Wp + sp, 3, (int64_t[]){C, Fp, W}, rst, rst, err));
    DIT_TRY(ltx2_vcopy(r, P, (sp + H - 1 + i) * Wp + sp, P, (sp + H - 1 - i) * Wp + sp, 3, (int64_t[]){C, Fp, W}, rst,
                       rst, err));
  }
  for (int i = 1; i <= sp; i++) {
    DIT_TRY(ltx2_vcopy(r, P, sp - i, P, sp + i, 3, (int64_t[]){C, Fp, Hp}, cst, cst, err));
    DIT_TRY(ltx2_vcopy(r, P, sp + W - 1 + i, P, sp + W - 1 - i, 3, (int64_t[]){C, Fp, Hp}, cst, cst, err));
  }
  return DIT_OK;
}

dit_status ltx2_vconv(ltx2_vrun *r, const ltx2_conv *cv, const dit_tensor *x, int ys, dit_tensor *y, dit_error *err) {
  const int k = cv->k, ft = r->causal ? k - 1 : (k - 1) / 2, bt = r->causal ? 0 : (k - 1) / 2, p = k / 2;
  const int sp = r->reflect ? p : 0;
  const int64_t F = x->shape[2], H = x->shape[3], W = x->shape[4];
  if (sp && (H <= sp || W <= sp))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae: reflect padding of %d needs more than %d rows and columns "
                      "(%lld x %lld)", sp, sp, (long long)H, (long long)W);
  dit_tensor P;
  DIT_TRY(ltx2_vview(r, &P, LTX2_S_PAD, cv->ci, F + ft + bt, H + 2 * sp, W + 2 * sp, err));
  DIT_TRY(pad_fill(r, &P, x, ft, bt, sp, err));
  DIT_TRY(ltx2_vview(r, y, ys, cv->co, F + ft + bt - k + 1, H, W, err));
  if (r->plan) r->flops += 2.0 * (double)dit_tensor_numel(y) * cv->ci * k * k * k;
  LTX2_OP(r, dit_op_conv3d(r->be, y, &P, &cv->w, &cv->b, 0, p - sp, p - sp, err));
  return DIT_OK;
}

/* The shortcut of a channel-changing resnet: conv_shortcut(norm3(x)), the LayerNorm over the
 * channels of each position (x seen as [n, cin] through a transposing copy and back), into sc. */
static dit_status shortcut(ltx2_vrun *r, const ltx2_resnet *rn, const dit_tensor *x, dit_tensor *sc, dit_error *err) {
  const int64_t cin = rn->cin, n = x->shape[2] * x->shape[3] * x->shape[4];
  dit_tensor t, p;
  DIT_TRY(ltx2_vview(r, &t, LTX2_S_TMP, cin, x->shape[2], x->shape[3], x->shape[4], err));
  DIT_TRY(ltx2_vview(r, &p, LTX2_S_PAD, cin, x->shape[2], x->shape[3], x->shape[4], err));
  DIT_TRY(ltx2_vcopy(r, &t, 0, x, 0, 2, (int64_t[]){n, cin}, (int64_t[]){cin, 1}, (int64_t[]){1, n}, err));
  dit_tensor rows = ltx2_vstrided(&t, 0, 2, (int64_t[]){n, cin}, (int64_t[]){cin, 1});
  LTX2_OP(r, dit_op_layer_norm(r->be, &rows, &rows, &rn->norm3_w, &rn->norm3_b, r->eps, err));
  DIT_TRY(ltx2_vcopy(r, &p, 0, &t, 0, 2, (int64_t[]){cin, n}, (int64_t[]){n, 1}, (int64_t[]){1, cin}, err));
  DIT_TRY(ltx2_vview(r, sc, LTX2_S_SC, rn->cout, x->shape[2], x->shape[3], x->shape[4], err));
  if (r->plan) r->flops += 2.0 * (double)dit_tensor_numel(sc) * cin;
  LTX2_OP(r, dit_op_conv3d(r->be, sc, &p, &rn->shortcut.w, &rn->shortcut.b, 0, 0, 0, err));
  return DIT_OK;
}

dit_status ltx2_vresnet(ltx2_vrun *r, const ltx2_resnet *rn, ltx2_act *a, dit_error *err) {
  const float eps = LTX2_VAE_NORM_EPS;
  dit_tensor x = ltx2_vview_of(a, r), t, h;
  DIT_TRY(ltx2_vview(r, &t, LTX2_S_TMP, rn->cin, a->f, a->h, a->w, err));
  LTX2_OP(r, dit_op_pixel_norm(r->be, &t, &x, eps, true, err));
  DIT_TRY(ltx2_vconv(r, &rn->conv1, &t, LTX2_S_H, &h, err));
  DIT_TRY(ltx2_vview(r, &t, LTX2_S_TMP, rn->cout, a->f, a->h, a->w, err));
  LTX2_OP(r, dit_op_pixel_norm(r->be, &t, &h, eps, true, err));
  DIT_TRY(ltx2_vconv(r, &rn->conv2, &t, LTX2_S_H, &h, err));
  if (rn->cin == rn->cout) {
    LTX2_OP(r, dit_op_add(r->be, &x, &h, &x, err));
    return DIT_OK;
  }
  dit_tensor sc, y;
  DIT_TRY(shortcut(r, rn, &x, &sc, err));
  a->slot = ltx2_other(a->slot), a->c = rn->cout;
  DIT_TRY(ltx2_vview(r, &y, a->slot, a->c, a->f, a->h, a->w, err));
  LTX2_OP(r, dit_op_add(r->be, &y, &h, &sc, err));
  return DIT_OK;
}

dit_status ltx2_vrun_pass(ltx2_vrun *r, dit_status (*fwd)(ltx2_vrun *r, void *ctx, dit_error *err), void *ctx,
                          void **act, size_t *act_bytes, dit_error *err) {
  memset(r->need, 0, sizeof r->need);
  r->flops = 0;
  r->dev = dit_backend_device(r->be), r->plan = true;
  DIT_TRY(fwd(r, ctx, err));
  DIT_TRY(dit_backend_fit_slots(r->be, r->need, LTX2_NSLOT, act, act_bytes, r->slot, err));
  r->plan = false;
  return fwd(r, ctx, err);
}
