/* The LTX-2 video VAE's tiled decode (see vae_ltx2.h), as diffusers' AutoencoderKLLTX2Video
 * tiled_decode and _temporal_tiled_decode compute it: latent windows decoded one at a time,
 * each blended with the already blended tile above and to its left (linear ramps over the
 * overlap) and cropped to the stride; in time, windows of tile + 1 latent frames, the last frame
 * of every window but the first dropped, blended with the previous window's last frames. Tiles
 * are decoded on the backend and blended on the host; only one row of tiles (and one window in
 * time) is kept. */
#include <stdlib.h>
#include <string.h>

#include "models/vae_ltx2_internal.h"

void dit_vae_ltx2_tiling_default(dit_vae_ltx2_tiling *t) {
  *t = (dit_vae_ltx2_tiling){.spatial = false, .temporal = false, .min_h = 512, .min_w = 512, .stride_h = 448,
                             .stride_w = 448, .min_frames = 16, .stride_frames = 8};
}

/* A decoded piece on the host: [oc, T, H, W] F32. */
typedef struct piece {
  float *v;
  int oc, T, H, W;
} piece;

static float *at(const piece *p, int c, int t, int y, int x) {
  return p->v + (((size_t)c * p->T + t) * p->H + y) * p->W + x;
}

/* The latents of one item: [C, F, h, w] contiguous in backend memory. */
typedef struct item {
  dit_vae_ltx2 *m;
  const float *z;
  int C, F, h, w;
} item;

/* Decodes the latent window [f0, f0 + nf) x [y0, y0 + nh) x [x0, x0 + nw) into *p (malloc'd). */
static dit_status decode_window(const item *it, int f0, int nf, int y0, int nh, int x0, int nw, piece *p,
                                dit_error *err) {
  dit_backend *be = it->m->be;
  const dit_device dev = dit_backend_device(be);
  p->v = NULL, p->oc = it->m->cfg.out_channels;
  dit_vae_ltx2_output_size(it->m, nf, nh, nw, &p->T, &p->H, &p->W);
  const size_t nin = (size_t)it->C * nf * nh * nw, nout = (size_t)p->oc * p->T * p->H * p->W;
  void *zin = NULL, *zout = NULL;
  dit_status s = be->ops->alloc(be, nin * sizeof(float), &zin, err);
  if (s == DIT_OK) s = be->ops->alloc(be, nout * sizeof(float), &zout, err);
  if (s == DIT_OK) {
    dit_tensor src = dit_tensor_make(DIT_F32, (void *)(it->z + ((size_t)f0 * it->h + y0) * it->w + x0), 4,
                                     (int64_t[]){it->C, nf, nh, nw});
    src.stride[0] = (int64_t)it->F * it->h * it->w, src.stride[1] = (int64_t)it->h * it->w, src.stride[2] = it->w;
    src.stride[3] = 1;
    dit_tensor dst = dit_tensor_make(DIT_F32, zin, 4, (int64_t[]){it->C, nf, nh, nw});
    src.device = dst.device = dev;
    s = dit_op_copy(be, &dst, &src, err);
  }
  if (s == DIT_OK) {
    dit_tensor x = dit_tensor_make(DIT_F32, zin, 5, (int64_t[]){1, it->C, nf, nh, nw});
    dit_tensor y = dit_tensor_make(DIT_F32, zout, 5, (int64_t[]){1, p->oc, p->T, p->H, p->W});
    x.device = y.device = dev;
    s = ltx2_vae_decode_item(it->m, &x, &y, err);
  }
  if (s == DIT_OK && !(p->v = malloc(nout * sizeof(float))))
    s = dit_errorf(err, DIT_ERR_NOMEM, "out of memory for a decoded tile");
  if (s == DIT_OK) s = be->ops->download(be, p->v, zout, nout * sizeof(float), err);
  if (s == DIT_OK) s = be->ops->sync(be, err);
  if (zin) be->ops->free(be, zin);
  if (zout) be->ops->free(be, zout);
  if (s != DIT_OK) free(p->v), p->v = NULL;
  return s;
}

/* b = a * (1 - k / e) + b * (k / e) over the first e = min(a's, b's, extent) rows (axis 0:
 * frames, 1: height, 2: width) of b against a's last e, in float32 as torch computes it. */
static void blend(const piece *a, piece *b, int axis, int extent) {
  const int na = axis == 0 ? a->T : axis == 1 ? a->H : a->W, nb = axis == 0 ? b->T : axis == 1 ? b->H : b->W;
  int e = extent < na ? extent : na;
  e = e < nb ? e : nb;
  for (int k = 0; k < e; k++) {
    const float wa = (float)(1.0 - (double)k / e), wb = (float)((double)k / e);
    for (int c = 0; c < b->oc; c++)
      for (int t = 0; t < (axis == 0 ? 1 : b->T); t++)
        for (int y = 0; y < (axis == 1 ? 1 : b->H); y++)
          for (int x = 0; x < (axis == 2 ? 1 : b->W); x++) {
            const int tb = axis == 0 ? k : t, yb = axis == 1 ? k : y, xb = axis == 2 ? k : x;
            const int ta = axis == 0 ? na - e + k : t, ya = axis == 1 ? na - e + k : y, xa = axis == 2 ? na - e + k : x;
            float *pb = at(b, c, tb, yb, xb);
            const float u = *at(a, c, ta, ya, xa) * wa, v = *pb * wb;
            *pb = u + v;
          }
  }
}

/* Frames [0, nt) x rows [0, nh) x columns [0, nw) of p into out at (t0, y0, x0), cut to out's size. */
static void put(const piece *p, piece *out, int nt, int nh, int nw, int t0, int y0, int x0) {
  for (int c = 0; c < p->oc; c++)
    for (int t = 0; t < nt && t0 + t < out->T; t++)
      for (int y = 0; y < nh && y0 + y < out->H; y++) {
        const int n = x0 + nw <= out->W ? nw : out->W - x0;
        if (n > 0) memcpy(at(out, c, t0 + t, y0 + y, x0), at(p, c, t, y, 0), (size_t)n * sizeof(float));
      }
}

/* Frames [f0, f0 + nf) of the item in spatial tiles into *out (malloc'd). */
static dit_status spatial(const item *it, const dit_vae_ltx2_tiling *tl, int f0, int nf, piece *out, dit_error *err) {
  const int sp = it->m->cfg.spatial_ratio, tlh = tl->min_h / sp, tlw = tl->min_w / sp;
  const int slh = tl->stride_h / sp, slw = tl->stride_w / sp;
  const int nx = (it->w + slw - 1) / slw;
  out->oc = it->m->cfg.out_channels;
  dit_vae_ltx2_output_size(it->m, nf, it->h, it->w, &out->T, &out->H, &out->W);
  out->v = malloc((size_t)out->oc * out->T * out->H * out->W * sizeof(float));
  piece *rows = calloc((size_t)2 * nx, sizeof *rows); /* the row above, then this row */
  dit_status s = out->v && rows ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the tiled decode");
  for (int i = 0; s == DIT_OK && i * slh < it->h; i++) {
    piece *above = rows, *cur = rows + nx;
    for (int j = 0; s == DIT_OK && j * slw < it->w; j++) {
      const int y0 = i * slh, x0 = j * slw;
      const int nh = it->h - y0 < tlh ? it->h - y0 : tlh, nw = it->w - x0 < tlw ? it->w - x0 : tlw;
      s = decode_window(it, f0, nf, y0, nh, x0, nw, &cur[j], err);
      if (s != DIT_OK) break;
      if (i > 0) blend(&above[j], &cur[j], 1, tl->min_h - tl->stride_h);
      if (j > 0) blend(&cur[j - 1], &cur[j], 2, tl->min_w - tl->stride_w);
      put(&cur[j], out, cur[j].T, cur[j].H < tl->stride_h ? cur[j].H : tl->stride_h,
          cur[j].W < tl->stride_w ? cur[j].W : tl->stride_w, 0, i * tl->stride_h, j * tl->stride_w);
    }
    for (int j = 0; j < nx; j++) { /* this row becomes the row above */
      free(above[j].v);
      above[j] = cur[j];
      cur[j].v = NULL;
    }
  }
  for (int j = 0; rows && j < 2 * nx; j++) free(rows[j].v);
  free(rows);
  if (s != DIT_OK) free(out->v), out->v = NULL;
  return s;
}

/* Frames [f0, f0 + nf) of the item: in spatial tiles when on and the latents are larger than a
 * tile, else in one piece. */
static dit_status frames(const item *it, const dit_vae_ltx2_tiling *tl, int f0, int nf, piece *out, dit_error *err) {
  const int sp = it->m->cfg.spatial_ratio;
  if (tl->spatial && (it->w > tl->min_w / sp || it->h > tl->min_h / sp)) return spatial(it, tl, f0, nf, out, err);
  return decode_window(it, f0, nf, 0, it->h, 0, it->w, out, err);
}

/* Drops the last frame of p in place ([oc, T, H, W] to [oc, T - 1, H, W]). */
static void drop_last_frame(piece *p) {
  const size_t plane = (size_t)p->H * p->W;
  for (int c = 1; c < p->oc; c++)
    memmove(p->v + (size_t)c * (p->T - 1) * plane, p->v + (size_t)c * p->T * plane, (size_t)(p->T - 1) * plane * sizeof(float));
  p->T -= 1;
}

/* The item in temporal windows of tile + 1 latent frames every stride into out (its full size). */
static dit_status temporal(const item *it, const dit_vae_ltx2_tiling *tl, piece *out, dit_error *err) {
  const int st = it->m->cfg.temporal_ratio, tlf = tl->min_frames / st, slf = tl->stride_frames / st;
  piece prev = {0};
  dit_status s = DIT_OK;
  for (int i = 0, t0 = 0; s == DIT_OK && i < it->F; i += slf) {
    const int nf = it->F - i < tlf + 1 ? it->F - i : tlf + 1;
    if (i > 0 && nf == 1) break; /* one latent frame decodes to one frame, which is dropped */
    piece p = {0};
    s = frames(it, tl, i, nf, &p, err);
    if (s != DIT_OK) break;
    int keep = tl->stride_frames + 1;
    if (i > 0) {
      drop_last_frame(&p);
      blend(&prev, &p, 0, tl->min_frames - tl->stride_frames);
      keep = tl->stride_frames;
    }
    keep = keep < p.T ? keep : p.T;
    put(&p, out, keep, p.H, p.W, t0, 0, 0);
    t0 += keep;
    free(prev.v);
    prev = p;
  }
  free(prev.v);
  return s;
}

static dit_status check_tiling(const dit_vae_ltx2 *m, const dit_vae_ltx2_tiling *t, dit_error *err) {
  const int sp = m->cfg.spatial_ratio, st = m->cfg.temporal_ratio;
  if (t->spatial && (t->min_h < sp || t->min_w < sp || t->min_h % sp || t->min_w % sp || t->stride_h % sp ||
                     t->stride_w % sp || t->stride_h < sp || t->stride_w < sp || t->stride_h > t->min_h ||
                     t->stride_w > t->min_w))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae tiled decode: tiles %dx%d with strides %dx%d must be multiples "
                      "of %d, the strides no larger than the tiles", t->min_w, t->min_h, t->stride_w, t->stride_h, sp);
  if (t->temporal && (t->min_frames < st || t->min_frames % st || t->stride_frames < st || t->stride_frames % st ||
                      t->stride_frames > t->min_frames))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae tiled decode: %d frames a window with a stride of %d must be "
                      "multiples of %d, the stride no larger than the window", t->min_frames, t->stride_frames, st);
  return DIT_OK;
}

dit_status dit_vae_ltx2_decode_tiled_host(dit_vae_ltx2 *m, const dit_tensor *latents, float *out,
                                          const dit_vae_ltx2_tiling *t, dit_error *err) {
  if (!m || !t || !out || !(t->spatial || t->temporal))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae tiled decode: no model, output or tiling");
  DIT_TRY(check_tiling(m, t, err));
  DIT_TRY(ltx2_vae_check_latents(m, latents, err));
  const int C = m->cfg.latent_channels, st = m->cfg.temporal_ratio;
  const int F = (int)latents->shape[2], h = (int)latents->shape[3], w = (int)latents->shape[4];
  piece whole = {NULL, m->cfg.out_channels, 0, 0, 0};
  dit_vae_ltx2_output_size(m, F, h, w, &whole.T, &whole.H, &whole.W);
  const size_t nin = (size_t)C * F * h * w, nout = (size_t)whole.oc * whole.T * whole.H * whole.W;
  for (int64_t b = 0; b < latents->shape[0]; b++) {
    const item it = {m, (const float *)latents->data + b * nin, C, F, h, w};
    dit_status s;
    if (t->temporal && F > t->min_frames / st) { /* the windows go straight into out */
      whole.v = out + b * nout;
      s = temporal(&it, t, &whole, err);
    } else {
      piece p = {0};
      s = frames(&it, t, 0, F, &p, err);
      if (s == DIT_OK) memcpy(out + b * nout, p.v, nout * sizeof(float));
      free(p.v);
    }
    if (s != DIT_OK) {
      dit_error_prefix(err, "vae tiled decode (item %lld)", (long long)b);
      return s;
    }
  }
  return DIT_OK;
}

dit_status dit_vae_ltx2_decode_tiled(dit_vae_ltx2 *m, const dit_tensor *latents, dit_tensor *out,
                                     const dit_vae_ltx2_tiling *t, dit_error *err) {
  if (!m || !t || !(t->spatial || t->temporal)) return dit_vae_ltx2_decode(m, latents, out, err);
  DIT_TRY(ltx2_vae_check_decode_io(m, latents, out, err));
  const size_t n = (size_t)dit_tensor_numel(out);
  float *host = malloc(n * sizeof *host);
  if (!host) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the tiled decode");
  dit_status s = dit_vae_ltx2_decode_tiled_host(m, latents, host, t, err);
  if (s == DIT_OK) s = m->be->ops->upload(m->be, out->data, host, n * sizeof *host, err);
  if (s == DIT_OK) s = m->be->ops->sync(m->be, err);
  free(host);
  return s;
}

/* Decoded bytes of F x H x W latents. */
static size_t out_bytes(const dit_vae_ltx2 *m, int F, int H, int W) {
  int T = 0, Ho = 0, Wo = 0;
  dit_vae_ltx2_output_size(m, F, H, W, &T, &Ho, &Wo);
  return (size_t)m->cfg.out_channels * T * Ho * Wo * sizeof(float);
}

dit_status dit_vae_ltx2_cost(const dit_vae_ltx2 *m, int F, int H, int W, const dit_vae_ltx2_tiling *t, dit_cost *out,
                             dit_error *err) {
  if (!m || !out || F < 1 || H < 1 || W < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "vae cost: bad arguments");
  if (!t || !(t->spatial || t->temporal)) return ltx2_vae_item_cost(m, F, H, W, &out->act_bytes, &out->flops, err);
  DIT_TRY(check_tiling(m, t, err));
  const int sp = m->cfg.spatial_ratio, st = m->cfg.temporal_ratio;
  const int tlh = t->min_h / sp, tlw = t->min_w / sp, slh = t->stride_h / sp, slw = t->stride_w / sp;
  const int tlf = t->min_frames / st, slf = t->stride_frames / st;
  const bool spatial = t->spatial && (W > tlw || H > tlh), temporal = t->temporal && F > tlf;
  const int nf = temporal ? (F < tlf + 1 ? F : tlf + 1) : F, th = spatial && H > tlh ? tlh : H;
  const int tw = spatial && W > tlw ? tlw : W, nx = spatial ? (W + slw - 1) / slw : 1;
  const int ny = spatial ? (H + slh - 1) / slh : 1;
  int windows = 1;
  if (temporal)
    for (int i = slf; i < F && F - i > 1; i += slf) windows++;
  size_t act = 0;
  double flops = 0;
  DIT_TRY(ltx2_vae_item_cost(m, nf, th, tw, &act, &flops, err));
  /* decode_window: the tile's latents and output on the backend, its host copy; spatial: the window's
   * picture and two rows of tiles; temporal: the previous window beside this one */
  const size_t tile_in = (size_t)m->cfg.latent_channels * nf * th * tw * sizeof(float), tile = out_bytes(m, nf, th, tw);
  const size_t window = out_bytes(m, nf, H, W);
  size_t bytes = act + tile_in + 2 * tile;
  if (spatial) bytes += window + (2 * (size_t)nx - 1) * tile;
  if (temporal) bytes += window;
  out->act_bytes = bytes;
  out->flops = flops * windows * nx * ny;
  return DIT_OK;
}
