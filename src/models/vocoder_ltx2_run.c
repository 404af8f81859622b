/* The LTX-2 vocoders' forward (see vocoder_ltx2.h), one batch item at a time, channels last:
 * every activation is [time, channels]. A convolution's input is written (by the activation
 * before it) into the middle of a padded buffer P whose edge rows are zeros; an im2col copy
 * through an overlapping strided view of P ([rows, k, Ci], row stride Ci, tap stride d * Ci)
 * gives [rows, k * Ci], and one linear with the packed weight [Co, k * Ci] the output rows. */
#include <string.h>

#include "models/vocoder_ltx2_internal.h"

/* The im2col chunk: at most this many floats per copy + GEMM. */
#define COL_ELEMS ((int64_t)16 << 20)

/* The activation arena's buffers: the level's hidden state and resblock sum (ACC), a resblock's
 * running state (R), the two conv outputs (T1, T2), the ConvTranspose output (HB), the padded
 * conv input (P), the anti-aliased activation's upsampled signal (U), the im2col chunk (COL);
 * with the BWE the padded waveform (WAV), the STFT's frames (SCOL), spectrum (SPEC), magnitude
 * (MAG) and log-mel (MEL), the BWE output (RES) and the resampled waveform (SKIP). */
enum { B_ACC, B_R, B_T1, B_T2, B_HB, B_P, B_U, B_COL, B_WAV, B_SCOL, B_SPEC, B_MAG, B_MEL, B_RES, B_SKIP, B_N };

typedef struct voc_ctx {
  dit_vocoder_ltx2 *m;
  dit_backend *be;
  dit_device dev;
  float *b[B_N];
} voc_ctx;

static void need_max(int64_t *nd, int i, int64_t v) { nd[i] = v > nd[i] ? v : nd[i]; }

static int64_t col_rows(int k, int64_t ci) {
  const int64_t r = COL_ELEMS / ((int64_t)k * ci);
  return r > 0 ? r : 1;
}

static void need_conv(int64_t *nd, int k, int64_t ci, int64_t rows, int64_t padded_rows) {
  const int64_t r = col_rows(k, ci);
  need_max(nd, B_COL, (rows < r ? rows : r) * k * ci);
  need_max(nd, B_P, padded_rows * ci);
}

static void need_act(int64_t *nd, const voc_act *a, int64_t T) {
  if (a->aa) need_max(nd, B_U, (int64_t)a->ratio * T * a->C);
}

/* What generator g needs for T input frames. */
static void gen_needs(const voc_gen *g, int64_t T, int64_t *nd) {
  need_conv(nd, 7, g->c.in_channels, T, T + 6);
  need_max(nd, B_ACC, T * g->c.hidden_channels);
  for (int l = 0; l < g->c.n_up; l++) {
    const voc_upconv *u = &g->up[l];
    const int64_t To = (T - 1) * u->s - 2 * u->pad + u->K, Q = (u->pad + To - 1) / u->s - u->pad / u->s + 1;
    need_conv(nd, u->J, u->ci, Q, T + 2 * (u->J - 1));
    need_max(nd, B_HB, Q * u->s * u->co);
    T = To;
    need_max(nd, B_ACC, T * u->co);
    for (int i = 0; i < g->c.n_res; i++) {
      const voc_res *r = &g->res[l * g->c.n_res + i];
      for (int k = 0; k < r->n; k++) {
        need_conv(nd, r->c1[k].k, u->co, T, T + r->c1[k].pad_l + r->c1[k].pad_r);
        need_conv(nd, r->c2[k].k, u->co, T, T + r->c2[k].pad_l + r->c2[k].pad_r);
        need_act(nd, &r->a1[k], T);
        need_act(nd, &r->a2[k], T);
      }
    }
  }
  need_act(nd, &g->act_out, T);
  need_conv(nd, 7, g->conv_out.ci, T, T + 6);
}

/* What the log-mel of N samples needs (the BWE's mel STFT). */
static void mel_needs(const dit_vocoder_ltx2 *m, int64_t N, int64_t *nd) {
  const dit_vocoder_ltx2_config *c = &m->cfg;
  const int64_t hop = c->hop_length, L = c->window_length, F = c->filter_length / 2 + 1, ch = c->voc.out_channels;
  const int64_t Np = (N + hop - 1) / hop * hop, frames = Np / hop;
  need_max(nd, B_WAV, (L - hop + Np) * ch);
  need_max(nd, B_SCOL, frames * ch * L);
  need_max(nd, B_SPEC, frames * ch * 2 * F);
  need_max(nd, B_MAG, frames * ch * F);
  need_max(nd, B_MEL, frames * ch * c->num_mel_channels);
}

/* Every buffer's floats for T mel frames (T < 0: the log-mel of -T samples only). */
static void needs(const dit_vocoder_ltx2 *m, int64_t T, int64_t *nd) {
  memset(nd, 0, sizeof(int64_t) * B_N);
  if (T < 0) {
    mel_needs(m, -T, nd);
    return;
  }
  gen_needs(&m->gen[0], T, nd);
  const int64_t N = voc_gen_out_len(&m->gen[0], T), ch = m->cfg.voc.out_channels;
  need_max(nd, B_WAV, N * ch);
  if (!m->cfg.bwe) return;
  const int64_t hop = m->cfg.hop_length, Np = (N + hop - 1) / hop * hop, S = Np * m->hann_ratio;
  mel_needs(m, N, nd);
  need_max(nd, B_RES, S * ch);
  need_max(nd, B_SKIP, S * ch);
  gen_needs(&m->gen[1], Np / hop, nd);
}

/* The arena's bytes per buffer for T (carve's sizes: R, T1 and T2 as large as ACC). */
static void slot_bytes(const dit_vocoder_ltx2 *m, int64_t T, size_t *bytes) {
  int64_t nd[B_N];
  needs(m, T, nd);
  for (int i = 0; i < B_N; i++) bytes[i] = (size_t)(i == B_R || i == B_T1 || i == B_T2 ? nd[B_ACC] : nd[i]) * 4;
}

/* The FLOPs of generator g on T input frames: its convolutions (as GEMMs) and transposed convolutions. */
static double gen_flops(const voc_gen *g, int64_t T) {
  double f = 2.0 * (double)T * 7.0 * g->c.in_channels * g->c.hidden_channels;
  for (int l = 0; l < g->c.n_up; l++) {
    const voc_upconv *u = &g->up[l];
    const int64_t To = (T - 1) * u->s - 2 * u->pad + u->K;
    f += 2.0 * (double)To * u->J * u->ci * u->co;
    T = To;
    for (int i = 0; i < g->c.n_res; i++) {
      const voc_res *r = &g->res[l * g->c.n_res + i];
      for (int k = 0; k < r->n; k++)
        f += 2.0 * (double)T * ((double)r->c1[k].k + r->c2[k].k) * u->co * u->co;
    }
  }
  return f + 2.0 * (double)T * 7.0 * g->conv_out.ci * g->conv_out.co;
}

void dit_vocoder_ltx2_cost(const dit_vocoder_ltx2 *m, int64_t T, dit_cost *out) {
  size_t bytes[B_N];
  slot_bytes(m, T, bytes);
  out->act_bytes = 0;
  for (int i = 0; i < B_N; i++) out->act_bytes += (bytes[i] + 255) & ~(size_t)255; /* dit_backend_fit_slots' */
  out->flops = gen_flops(&m->gen[0], T);
  if (m->cfg.bwe) {
    const int64_t N = voc_gen_out_len(&m->gen[0], T), hop = m->cfg.hop_length;
    out->flops += gen_flops(&m->gen[1], (N + hop - 1) / hop); /* the STFTs and resampling not counted */
  }
}

/* ---- tensors over the arena ---- */

static dit_tensor ten(const voc_ctx *x, const float *p, int nd, const int64_t *shape) {
  dit_tensor t = dit_tensor_make(DIT_F32, (void *)p, nd, shape);
  t.device = x->dev;
  return t;
}
static dit_tensor t2(const voc_ctx *x, const float *p, int64_t r, int64_t c) {
  return ten(x, p, 2, (int64_t[]){r, c});
}
/* [T, C] as [1, T, C] (resample1d's layout). */
static dit_tensor as3(const dit_tensor *t) {
  dit_tensor u = dit_tensor_3d(DIT_F32, t->data, 1, t->shape[0], t->shape[1]);
  u.device = t->device;
  return u;
}

/* Zeroes rows [0, pl) and [pl + T, pl + T + pr) of P [pl + T + pr, C]; *in: rows [pl, pl + T). */
static dit_status pad_rows(voc_ctx *x, float *P, int64_t T, int64_t C, int64_t pl, int64_t pr, dit_tensor *in,
                           dit_error *err) {
  if (pl) {
    dit_tensor d = t2(x, P, pl, C), z = t2(x, x->m->zeros, pl, C);
    z.stride[0] = z.stride[1] = 0;
    DIT_TRY(dit_op_copy(x->be, &d, &z, err));
  }
  if (pr) {
    dit_tensor d = t2(x, P + (pl + T) * C, pr, C), z = t2(x, x->m->zeros, pr, C);
    z.stride[0] = z.stride[1] = 0;
    DIT_TRY(dit_op_copy(x->be, &d, &z, err));
  }
  *in = t2(x, P + pl * C, T, C);
  return DIT_OK;
}

/* y [n, N] = rows row0 .. row0 + n - 1 of P's im2col (taps j < k at row + j d, Ci channels)
 * times w [N, k Ci]^T (+ b). */
static dit_status conv_gemm(voc_ctx *x, const float *P, int64_t ci, int64_t row0, int64_t n, int k, int d,
                            const dit_tensor *w, const dit_tensor *b, float *y, dit_error *err) {
  const int64_t N = w->shape[0], kc = (int64_t)k * ci, chunk = col_rows(k, ci);
  for (int64_t t0 = 0; t0 < n; t0 += chunk) {
    const int64_t nn = n - t0 < chunk ? n - t0 : chunk;
    dit_tensor src = ten(x, P + (row0 + t0) * ci, 3, (int64_t[]){nn, k, ci});
    src.stride[0] = ci, src.stride[1] = (int64_t)d * ci, src.stride[2] = 1;
    dit_tensor col = ten(x, x->b[B_COL], 3, (int64_t[]){nn, k, ci});
    DIT_TRY(dit_op_copy(x->be, &col, &src, err));
    dit_tensor xin = t2(x, x->b[B_COL], nn, kc), yo = t2(x, y + t0 * N, nn, N);
    DIT_TRY(dit_op_linear(x->be, &yo, &xin, w, b->data ? b : NULL, DIT_ACT_NONE, err));
  }
  return DIT_OK;
}

/* out [T, C] = act(in [T, C]) (out: the middle of a padded buffer). */
static dit_status act_into(voc_ctx *x, const voc_act *a, const dit_tensor *in, dit_tensor *out, dit_error *err) {
  if (!a->snake) return dit_op_unary(x->be, out, in, DIT_UNARY_LEAKY_RELU, a->slope, 0.0f, err);
  if (!a->aa) return dit_op_snake(x->be, out, in, &a->alpha, &a->beta, 1e-9f, err);
  const int64_t T = in->shape[0], C = in->shape[1];
  dit_tensor u = ten(x, x->b[B_U], 3, (int64_t[]){1, a->ratio * T, C}), i3 = as3(in), o3 = as3(out);
  DIT_TRY(dit_op_resample1d(x->be, &u, &i3, &a->fu, a->ratio, 1, a->up_off, (float)a->ratio, err));
  DIT_TRY(dit_op_snake(x->be, &u, &u, &a->alpha, &a->beta, 1e-9f, err));
  return dit_op_resample1d(x->be, &o3, &u, &a->fd, 1, a->ratio, a->down_off, 1.0f, err);
}

/* conv(act(in)) into y [T, co] for a "same" convolution. */
static dit_status act_conv(voc_ctx *x, const voc_act *a, const voc_conv *cv, const dit_tensor *in, float *y,
                           dit_error *err) {
  const int64_t T = in->shape[0];
  dit_tensor mid;
  DIT_TRY(pad_rows(x, x->b[B_P], T, cv->ci, cv->pad_l, cv->pad_r, &mid, err));
  DIT_TRY(act_into(x, a, in, &mid, err));
  return conv_gemm(x, x->b[B_P], cv->ci, 0, T, cv->k, cv->d, &cv->w, &cv->b, y, err);
}

/* Level l's parallel resblocks on h [T, C]: their mean into ACC. */
static dit_status resblocks(voc_ctx *x, const voc_gen *g, int l, const dit_tensor *h, dit_error *err) {
  const int64_t T = h->shape[0], C = h->shape[1];
  dit_tensor acc = t2(x, x->b[B_ACC], T, C), r = t2(x, x->b[B_R], T, C);
  dit_tensor t1 = t2(x, x->b[B_T1], T, C), t2b = t2(x, x->b[B_T2], T, C);
  const int n = g->c.n_res;
  for (int i = 0; i < n; i++) {
    const voc_res *rb = &g->res[l * n + i];
    dit_tensor *dst = i == 0 ? &acc : &r;
    const dit_tensor *cur = h;
    for (int k = 0; k < rb->n; k++) { /* x = x + conv2(act2(conv1(act1(x)))) */
      DIT_TRY(act_conv(x, &rb->a1[k], &rb->c1[k], cur, x->b[B_T1], err));
      DIT_TRY(act_conv(x, &rb->a2[k], &rb->c2[k], &t1, x->b[B_T2], err));
      DIT_TRY(dit_op_add(x->be, dst, cur, &t2b, err));
      cur = dst;
    }
    if (i > 0) DIT_TRY(dit_op_add(x->be, &acc, &acc, &r, err));
  }
  return n > 1 ? dit_op_scale(x->be, &acc, &acc, 1.0f / (float)n, err) : DIT_OK;
}

/* Level l: (leaky ReLU,) the ConvTranspose1d and the resblocks; *h [T, C] in ACC becomes the
 * level's output, in ACC. */
static dit_status level(voc_ctx *x, const voc_gen *g, int l, dit_tensor *h, dit_error *err) {
  const voc_upconv *u = &g->up[l];
  const int64_t T = h->shape[0], To = (T - 1) * u->s - 2 * u->pad + u->K;
  dit_tensor mid;
  DIT_TRY(pad_rows(x, x->b[B_P], T, u->ci, u->J - 1, u->J - 1, &mid, err));
  if (g->c.act == DIT_VOC_LEAKY_RELU) DIT_TRY(dit_op_unary(x->be, &mid, h, DIT_UNARY_LEAKY_RELU, g->c.slope, 0, err));
  else DIT_TRY(dit_op_copy(x->be, &mid, h, err));
  /* polyphase rows q0 .. q1 give samples q * s + r; the output is samples pad .. pad + To - 1 */
  const int64_t q0 = u->pad / u->s, Q = (u->pad + To - 1) / u->s - q0 + 1;
  DIT_TRY(conv_gemm(x, x->b[B_P], u->ci, q0, Q, u->J, 1, &u->w, &u->b, x->b[B_HB], err));
  const dit_tensor hv = t2(x, x->b[B_HB] + (u->pad - q0 * u->s) * u->co, To, u->co);
  DIT_TRY(resblocks(x, g, l, &hv, err));
  *h = t2(x, x->b[B_ACC], To, u->co);
  return DIT_OK;
}

/* Generator g on in [T0, in_channels] (any view copy takes; in->shape[0] = T0 frames) into out
 * [samples, out_channels] (contiguous, from `out`). */
static dit_status gen_run(voc_ctx *x, const voc_gen *g, const dit_tensor *in, int64_t T0, float *out,
                          dit_error *err) {
  dit_tensor mid;
  DIT_TRY(pad_rows(x, x->b[B_P], T0, g->c.in_channels, 3, 3, &mid, err));
  dit_tensor mv = ten(x, mid.data, in->ndim, in->shape);
  DIT_TRY(dit_op_copy(x->be, &mv, in, err));
  DIT_TRY(conv_gemm(x, x->b[B_P], g->c.in_channels, 0, T0, 7, 1, &g->conv_in.w, &g->conv_in.b, x->b[B_ACC], err));
  dit_tensor h = t2(x, x->b[B_ACC], T0, g->c.hidden_channels);
  for (int l = 0; l < g->c.n_up; l++) DIT_TRY(level(x, g, l, &h, err));
  DIT_TRY(act_conv(x, &g->act_out, &g->conv_out, &h, out, err));
  dit_tensor o = t2(x, out, h.shape[0], g->c.out_channels);
  if (g->c.final_act == DIT_VOC_FINAL_TANH) return dit_op_unary(x->be, &o, &o, DIT_UNARY_TANH, 0, 0, err);
  if (g->c.final_act == DIT_VOC_FINAL_CLAMP) return dit_op_unary(x->be, &o, &o, DIT_UNARY_CLAMP, -1.0f, 1.0f, err);
  return DIT_OK;
}

/* out [ch, S] = the first S rows of w [rows, ch] transposed. */
static dit_status to_channels_first(voc_ctx *x, const float *w, int64_t ch, int64_t S, dit_tensor *out,
                                    dit_error *err) {
  dit_tensor v = t2(x, w, ch, S);
  v.stride[0] = 1, v.stride[1] = ch;
  return dit_op_copy(x->be, out, &v, err);
}

/* The causal log-mel of the N samples in WAV (from row window - hop; WAV [lead + Np, ch]) into
 * MEL [frames, ch, M]: zero padding before and up to a multiple of the hop after, the frames'
 * im2col, the DFT basis GEMM, the magnitude, the mel GEMM, log(max(mel, 1e-5)). */
static dit_status log_mel(voc_ctx *x, int64_t N, dit_error *err) {
  const dit_vocoder_ltx2 *m = x->m;
  const dit_vocoder_ltx2_config *c = &m->cfg;
  const int64_t ch = c->voc.out_channels, hop = c->hop_length, L = c->window_length, lead = L - hop;
  const int64_t F = c->filter_length / 2 + 1, M = c->num_mel_channels;
  const int64_t Np = (N + hop - 1) / hop * hop, frames = (lead + Np - c->filter_length) / hop + 1;
  dit_tensor wav;
  DIT_TRY(pad_rows(x, x->b[B_WAV], N, ch, lead, 0, &wav, err));
  dit_tensor tail;
  DIT_TRY(pad_rows(x, x->b[B_WAV] + (lead + N) * ch, 0, ch, 0, Np - N, &tail, err));
  /* the STFT frames [frames, ch, L]: channel c's samples frame * hop .. + L */
  dit_tensor src = ten(x, x->b[B_WAV], 3, (int64_t[]){frames, ch, c->filter_length});
  src.stride[0] = hop * ch, src.stride[1] = 1, src.stride[2] = ch;
  dit_tensor cols = ten(x, x->b[B_SCOL], 3, (int64_t[]){frames, ch, c->filter_length});
  DIT_TRY(dit_op_copy(x->be, &cols, &src, err));
  const int64_t R = frames * ch;
  dit_tensor cx = t2(x, x->b[B_SCOL], R, c->filter_length), spec = t2(x, x->b[B_SPEC], R, 2 * F);
  DIT_TRY(dit_op_linear(x->be, &spec, &cx, &m->stft, NULL, DIT_ACT_NONE, err));
  dit_tensor mag = t2(x, x->b[B_MAG], R, F), mel = t2(x, x->b[B_MEL], R, M);
  DIT_TRY(dit_op_complex_abs(x->be, &mag, &spec, err));
  DIT_TRY(dit_op_linear(x->be, &mel, &mag, &m->mel, NULL, DIT_ACT_NONE, err));
  return dit_op_unary(x->be, &mel, &mel, DIT_UNARY_LOG_CLAMP, 1e-5f, 0, err);
}

/* The BWE stage on the first vocoder's N samples in WAV (from row window - hop): the causal
 * log-mel, the BWE vocoder, plus the resampled waveform, clamped, into out. */
static dit_status bwe(voc_ctx *x, int64_t N, dit_tensor *out, dit_error *err) {
  const dit_vocoder_ltx2 *m = x->m;
  const dit_vocoder_ltx2_config *c = &m->cfg;
  const int64_t ch = c->voc.out_channels, hop = c->hop_length, lead = c->window_length - hop;
  const int64_t M = c->num_mel_channels, r = m->hann_ratio;
  const int64_t Np = (N + hop - 1) / hop * hop, frames = Np / hop;
  DIT_TRY(log_mel(x, N, err));
  /* the BWE vocoder on [frames, ch * M]; its output matches the resampled waveform's r * Np */
  const dit_tensor melin = t2(x, x->b[B_MEL], frames, ch * M);
  DIT_TRY(gen_run(x, &m->gen[1], &melin, frames, x->b[B_RES], err));
  dit_tensor res = ten(x, x->b[B_RES], 3, (int64_t[]){1, r * Np, ch}), skip = ten(x, x->b[B_SKIP], 3,
                                                                               (int64_t[]){1, r * Np, ch});
  dit_tensor wp = ten(x, x->b[B_WAV] + lead * ch, 3, (int64_t[]){1, Np, ch});
  DIT_TRY(dit_op_resample1d(x->be, &skip, &wp, &m->hann, (int)r, 1, m->hann_off, (float)r, err));
  DIT_TRY(dit_op_add(x->be, &res, &res, &skip, err));
  DIT_TRY(dit_op_unary(x->be, &res, &res, DIT_UNARY_CLAMP, -1.0f, 1.0f, err));
  return to_channels_first(x, x->b[B_RES], ch, N * r, out, err);
}

/* The arena's buffers for T (as needs; T < 0: the log-mel of -T samples), the arena grown
 * when they do not fit. */
static dit_status carve(dit_vocoder_ltx2 *m, int64_t T, voc_ctx *x, dit_error *err) {
  *x = (voc_ctx){m, m->be, dit_backend_device(m->be), {0}};
  size_t bytes[B_N];
  char *slot[B_N];
  slot_bytes(m, T, bytes);
  DIT_TRY(dit_backend_fit_slots(m->be, bytes, B_N, &m->act, &m->act_bytes, slot, err));
  for (int i = 0; i < B_N; i++) x->b[i] = (float *)slot[i];
  return DIT_OK;
}

dit_status voc_log_mel_item(dit_vocoder_ltx2 *m, const dit_tensor *wave, dit_tensor *mel, dit_error *err) {
  const int64_t ch = wave->shape[0], N = wave->shape[1], lead = m->cfg.window_length - m->cfg.hop_length;
  voc_ctx x;
  DIT_TRY(carve(m, -N, &x, err));
  dit_tensor dst = t2(&x, x.b[B_WAV] + lead * ch, ch, N); /* [ch, N] into WAV's [N, ch] */
  dst.stride[0] = 1, dst.stride[1] = ch;
  DIT_TRY(dit_op_copy(x.be, &dst, wave, err));
  DIT_TRY(log_mel(&x, N, err));
  const int64_t frames = mel->shape[1], M = mel->shape[2];
  dit_tensor src = ten(&x, x.b[B_MEL], 3, (int64_t[]){ch, frames, M}); /* MEL [frames, ch, M] as [ch, frames, M] */
  src.stride[0] = M, src.stride[1] = ch * M, src.stride[2] = 1;
  return dit_op_copy(x.be, mel, &src, err);
}

dit_status voc_run_item(dit_vocoder_ltx2 *m, const dit_tensor *mel, dit_tensor *out, dit_error *err) {
  voc_ctx x;
  DIT_TRY(carve(m, mel->shape[1], &x, err));
  const int64_t C = mel->shape[0], T = mel->shape[1], Mb = mel->shape[2];
  /* mel [C, T, M] as [T, C, M]: channel c * M + m, as diffusers' flatten of [C, M, T] */
  dit_tensor in = ten(&x, mel->data, 3, (int64_t[]){T, C, Mb});
  in.stride[0] = Mb, in.stride[1] = T * Mb, in.stride[2] = 1;
  const voc_gen *g = &m->gen[0];
  const int64_t N = voc_gen_out_len(g, T), ch = g->c.out_channels;
  const int64_t lead = m->cfg.bwe ? m->cfg.window_length - m->cfg.hop_length : 0;
  DIT_TRY(gen_run(&x, g, &in, T, x.b[B_WAV] + lead * ch, err));
  if (!m->cfg.bwe) return to_channels_first(&x, x.b[B_WAV], ch, N, out, err);
  return bwe(&x, N, out, err);
}
