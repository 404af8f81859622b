/* MiniMax-H3's whole video decode (see vae_minimax_h3.h): the temporal chunks and the spatial tiles around
 * dit_h3_vae_decode_clip, with diffusers' blends (1 - p / e and p / e, in float32, one rounding per
 * operation). */
#include <stdlib.h>
#include <string.h>

#include "models/vae_minimax_h3.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define MAX_TILES 64

/* The decode's temporal geometry (AutoencoderKLMiniMaxH3's derived fields). */
typedef struct h3t_geom {
  int tcs, pre_pad, tok_overlap, frame_overlap, chunk_frames;
} h3t_geom;

static int pmod(int a, int m) { return ((a % m) + m) % m; }

static h3t_geom geom(const dit_h3_vae_config *c) {
  h3t_geom g;
  g.tcs = (c->clip_length + c->patch_t - 1) / c->patch_t;
  g.pre_pad = pmod(-c->clip_length, c->patch_t);
  g.tok_overlap = pmod(-c->token_drop, g.tcs);
  g.frame_overlap = g.tok_overlap * c->patch_t - g.pre_pad > 0 ? g.tok_overlap * c->patch_t - g.pre_pad : 0;
  g.chunk_frames = g.tcs * c->patch_t;
  return g;
}

/* _split_tiles over length pixels: n tiles of `size` at start[i], overlaps ov[i] between tile i and i + 1. */
static int split_tiles(int length, int size, int min_ov, int ratio, int *start, int *len, int *ov) {
  if (size <= 0 || size >= length) {
    start[0] = 0, len[0] = length;
    return 1;
  }
  int n = (length + size - 1) / size;
  while (size * n - min_ov * (n - 1) - length < 0) n++;
  if (n > MAX_TILES) return -1;
  for (int i = 0; i + 1 < n; i++) ov[i] = min_ov;
  const int remaining = size * n - min_ov * (n - 1) - length;
  for (int i = 0; i < remaining / ratio; i++) ov[i % (n - 1)] += ratio;
  start[0] = 0;
  for (int i = 0; i + 1 < n; i++) start[i + 1] = start[i] + size - ov[i];
  for (int i = 0; i < n; i++) len[i] = size;
  return n;
}

/* _blend weights: w_a = 1 - p / e, w_b = p / e (float32). */
static float wb_of(int p, int e) { return (float)p / (float)e; }

dit_status dit_h3_vae_decode_clip_tiled(dit_h3_vae *v, int T, int h, int w, const float *z, dit_h3_vae_tiling t,
                                        float *out, dit_error *err) {
  const dit_h3_vae_config *c = dit_h3_vae_get_config(v);
  const int p = c->patch, C = c->latent_channels, oc = c->out_channels, F = T * c->patch_t, H = h * p, W = w * p;
  if (t.tile_px <= 0) return dit_h3_vae_decode_clip(v, T, h, w, z, out, err);
  int ys[MAX_TILES], yl[MAX_TILES], yo[MAX_TILES], xs[MAX_TILES], xl[MAX_TILES], xo[MAX_TILES];
  const int ny = split_tiles(H, t.tile_px, t.min_overlap_px, p, ys, yl, yo);
  const int nx = split_tiles(W, t.tile_px, t.min_overlap_px, p, xs, xl, xo);
  if (ny < 0 || nx < 0 || t.tile_px % p || t.min_overlap_px < 0 || t.min_overlap_px >= t.tile_px)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "h3 vae decode: tiles of %d px (overlap %d) over %dx%d px: not a "
                      "multiple of %d, or more than %d tiles a side", t.tile_px, t.min_overlap_px, H, W, p, MAX_TILES);
  if (ny == 1 && nx == 1) return dit_h3_vae_decode_clip(v, T, h, w, z, out, err);
  float **tile = calloc((size_t)(ny * nx), sizeof *tile);
  float *zt = malloc((size_t)C * T * (t.tile_px / p) * (t.tile_px / p) * sizeof *zt);
  dit_status s = tile && zt ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "h3 vae decode: out of memory for the tiles");
  for (int i = 0; s == DIT_OK && i < ny; i++) /* every tile decoded whole (the blends read raw neighbours) */
    for (int j = 0; s == DIT_OK && j < nx; j++) {
      const int th = yl[i] / p, tw = xl[j] / p, y0 = ys[i] / p, x0 = xs[j] / p;
      for (int ch = 0; ch < C; ch++)
        for (int f = 0; f < T; f++)
          for (int y = 0; y < th; y++)
            memcpy(zt + (((size_t)ch * T + f) * th + y) * tw, z + (((size_t)ch * T + f) * h + y0 + y) * w + x0,
                   (size_t)tw * sizeof *zt);
      tile[i * nx + j] = malloc((size_t)oc * F * yl[i] * xl[j] * sizeof(float));
      s = tile[i * nx + j] ? dit_h3_vae_decode_clip(v, T, th, tw, zt, tile[i * nx + j], err)
                           : dit_errorf(err, DIT_ERR_NOMEM, "h3 vae decode: out of memory for a tile");
    }
  for (int i = 0; s == DIT_OK && i < ny; i++) /* _stitch_tiles: blend with the raw tile above, then left; trim */
    for (int j = 0; j < nx; j++) {
      const float *cur = tile[i * nx + j], *up = i ? tile[(i - 1) * nx + j] : NULL, *left = j ? tile[i * nx + j - 1] : NULL;
      const int th = yl[i], tw = xl[j], ey = i ? (yo[i - 1] < th ? yo[i - 1] : th) : 0;
      const int ex = j ? (xo[j - 1] < tw ? xo[j - 1] : tw) : 0;
      const int keep_h = i < ny - 1 ? th - yo[i] : th, keep_w = j < nx - 1 ? tw - xo[j] : tw;
      for (int ch = 0; ch < oc; ch++)
        for (int f = 0; f < F; f++)
          for (int y = 0; y < keep_h; y++)
            for (int x = 0; x < keep_w; x++) {
              const size_t plane = (size_t)ch * F + f;
              float val = cur[(plane * th + y) * tw + x];
              if (up && y < ey) { /* the rows of the tile above that overlap: its last ey */
                const int uh = yl[i - 1];
                const float a = up[(plane * uh + uh - ey + y) * tw + x];
                val = a * (1.0f - wb_of(y, ey)) + val * wb_of(y, ey);
              }
              if (left && x < ex) { /* the raw left tile's last ex columns (blended vertically first: no) */
                const int lw = xl[j - 1];
                const float a = left[(plane * th + y) * lw + lw - ex + x];
                val = a * (1.0f - wb_of(x, ex)) + val * wb_of(x, ex);
              }
              out[(plane * H + ys[i] + y) * W + xs[j] + x] = val;
            }
    }
  for (int k = 0; tile && k < ny * nx; k++) free(tile[k]);
  free(tile), free(zt);
  return s;
}

/* The temporal plan of T latent frames: the repeated tail (pad) and the chunks (diffusers' _decode). */
static void temporal_plan(const dit_h3_vae_config *c, const h3t_geom *g, int T, int *pad, int *chunks) {
  const int tokens = T + c->token_drop;
  *pad = pmod(-tokens, g->tcs);
  *chunks = (tokens + *pad) / g->tcs - (c->token_drop > 0);
}

/* Frames the pad's repeated latents added (cut at the end). */
static int pad_frames(const dit_h3_vae_config *c, const h3t_geom *g, int T, int pad) {
  const int tail = c->clip_length % c->patch_t;
  int n = 0;
  for (int k = 0; k < pad; k++) n += tail && (T + k) % g->tcs == 0 ? tail : c->patch_t;
  return n;
}

int dit_h3_vae_frames(const dit_h3_vae *v, int T) {
  const dit_h3_vae_config *c = dit_h3_vae_get_config(v);
  if (!c || T < 1) return 0;
  const h3t_geom g = geom(c);
  int pad, chunks;
  temporal_plan(c, &g, T, &pad, &chunks);
  if (chunks < 1) return 0;
  const int keep = g.chunk_frames - g.pre_pad; /* each chunk's frames, the last overlap after the last */
  const int tail = c->token_drop > 0 ? (g.tcs + g.tok_overlap) * c->patch_t - g.chunk_frames - g.pre_pad : 0;
  return chunks * keep + (tail > 0 ? tail : 0) - pad_frames(c, &g, T, pad);
}

/* One clip of T x h x w latents as dit_h3_vae_decode_clip_tiled decodes it: its FLOPs, and its memory at the
 * peak (the last tile's decode: every raw tile held, the tile's latents, a clip's buffers). */
static dit_status tiled_cost(const dit_h3_vae *v, int T, int h, int w, dit_h3_vae_tiling t, dit_cost *out,
                             dit_error *err) {
  const dit_h3_vae_config *c = dit_h3_vae_get_config(v);
  const int p = c->patch, H = h * p, W = w * p, F = T * c->patch_t;
  int ys[MAX_TILES], yl[MAX_TILES], yo[MAX_TILES], xs[MAX_TILES], xl[MAX_TILES], xo[MAX_TILES];
  const int ny = t.tile_px > 0 ? split_tiles(H, t.tile_px, t.min_overlap_px, p, ys, yl, yo) : 1;
  const int nx = t.tile_px > 0 ? split_tiles(W, t.tile_px, t.min_overlap_px, p, xs, xl, xo) : 1;
  if (ny < 0 || nx < 0 || (t.tile_px > 0 && (t.tile_px % p || t.min_overlap_px < 0 || t.min_overlap_px >= t.tile_px)))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "h3 vae cost: tiles of %d px (overlap %d) over %dx%d px", t.tile_px,
                      t.min_overlap_px, H, W);
  if (ny == 1 && nx == 1) {
    dit_h3_vae_clip_cost(v, T, h, w, out);
    return DIT_OK;
  }
  size_t tiles = 0, clip = 0;
  out->flops = 0;
  for (int i = 0; i < ny; i++)
    for (int j = 0; j < nx; j++) {
      dit_cost one;
      dit_h3_vae_clip_cost(v, T, yl[i] / p, xl[j] / p, &one);
      tiles += (size_t)c->out_channels * F * yl[i] * xl[j] * sizeof(float);
      clip = one.act_bytes > clip ? one.act_bytes : clip;
      out->flops += one.flops;
    }
  out->act_bytes = tiles + clip + (size_t)c->latent_channels * T * (t.tile_px / p) * (t.tile_px / p) * sizeof(float);
  return DIT_OK;
}

dit_status dit_h3_vae_cost(const dit_h3_vae *v, int T, int h, int w, dit_h3_vae_tiling t, dit_cost *out,
                           dit_error *err) {
  const dit_h3_vae_config *c = dit_h3_vae_get_config(v);
  if (!c || !out || T < 1 || h < 1 || w < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "h3 vae cost: bad arguments");
  const h3t_geom g = geom(c);
  int pad, chunks;
  temporal_plan(c, &g, T, &pad, &chunks);
  if (chunks < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "h3 vae cost: %d latent frames make no chunk", T);
  const int ct = g.tcs + g.tok_overlap, cf = ct * c->patch_t;
  const size_t plane = (size_t)h * c->patch * w * c->patch, zplane = (size_t)h * w;
  dit_cost one;
  DIT_TRY(tiled_cost(v, ct, h, w, t, &one, err));
  out->flops = chunks * one.flops;
  /* the chunk's latents, its clip and the overlap frames */
  const size_t held =
      ((size_t)c->latent_channels * ct * zplane + 2 * (size_t)c->out_channels * cf * plane) * sizeof(float);
  out->act_bytes = one.act_bytes + held;
  return DIT_OK;
}

dit_status dit_h3_vae_decode(dit_h3_vae *v, int T, int h, int w, const float *z, dit_h3_vae_tiling t, float *out,
                             dit_error *err) {
  const dit_h3_vae_config *c = dit_h3_vae_get_config(v);
  if (!c || !z || !out || T < 1 || h < 1 || w < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "h3 vae decode: bad arguments");
  const h3t_geom g = geom(c);
  int pad, chunks;
  temporal_plan(c, &g, T, &pad, &chunks);
  if (chunks < 1) return dit_errorf(err, DIT_ERR_INVALID_ARG, "h3 vae decode: %d latent frames make no chunk", T);
  const int C = c->latent_channels, oc = c->out_channels, pt = c->patch_t, H = h * c->patch, W = w * c->patch;
  const int ct = g.tcs + g.tok_overlap, cf = ct * pt, total = dit_h3_vae_frames(v, T);
  const size_t plane = (size_t)H * W, zplane = (size_t)h * w;
  float *zc = malloc((size_t)C * ct * zplane * sizeof *zc), *clip = malloc((size_t)oc * cf * plane * sizeof *clip);
  float *ovl = malloc((size_t)oc * cf * plane * sizeof *ovl);
  dit_status s = zc && clip && ovl ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "h3 vae decode: out of memory");
  int written = 0, ov_frames = 0; /* frames of out so far; frames held in ovl (the last chunk's tail) */
  for (int i = 0; s == DIT_OK && i < chunks; i++) {
    const int start = i * g.tcs; /* latents [start, start + ct), the repeated last one past T */
    for (int ch = 0; ch < C; ch++)
      for (int f = 0; f < ct; f++) {
        const int src = start + f < T ? start + f : T - 1;
        memcpy(zc + ((size_t)ch * ct + f) * zplane, z + ((size_t)ch * T + src) * zplane, zplane * sizeof *zc);
      }
    s = dit_h3_vae_decode_clip_tiled(v, ct, h, w, zc, t, clip, err);
    for (int j = 0; s == DIT_OK && j <= (c->token_drop > 0); j++) {
      const int f0 = j * g.chunk_frames + g.pre_pad, f1 = (j + 1) * g.chunk_frames < cf ? (j + 1) * g.chunk_frames : cf;
      const int n = f1 - f0;
      if (j == 1) { /* the tail, blended into the next chunk's head (or appended after the last) */
        for (int ch = 0; ch < oc; ch++)
          memcpy(ovl + (size_t)ch * n * plane, clip + ((size_t)ch * cf + f0) * plane, (size_t)n * plane * sizeof *ovl);
        ov_frames = n;
        continue;
      }
      const int e = ov_frames ? (ov_frames < n ? (ov_frames < g.frame_overlap ? ov_frames : g.frame_overlap)
                                               : (n < g.frame_overlap ? n : g.frame_overlap))
                              : 0;
      for (int ch = 0; ch < oc; ch++)
        for (int f = 0; f < n && written + f < total; f++) {
          const float *src = clip + ((size_t)ch * cf + f0 + f) * plane;
          float *dst = out + ((size_t)ch * total + written + f) * plane;
          if (f < e) {
            const float *a = ovl + ((size_t)ch * ov_frames + ov_frames - e + f) * plane, wb = wb_of(f, e), wa = 1.0f - wb;
            for (size_t k = 0; k < plane; k++) dst[k] = a[k] * wa + src[k] * wb;
          } else {
            memcpy(dst, src, plane * sizeof *dst);
          }
        }
      written += n;
    }
  }
  for (int ch = 0; s == DIT_OK && ch < oc; ch++) /* the last tail, up to the frames asked for */
    for (int f = 0; f < ov_frames && written + f < total; f++)
      memcpy(out + ((size_t)ch * total + written + f) * plane, ovl + ((size_t)ch * ov_frames + f) * plane,
             plane * sizeof *out);
  free(zc), free(clip), free(ovl);
  return s;
}
