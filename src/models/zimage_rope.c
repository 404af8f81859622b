/* Z-Image token positions and the host-side tables of one forward call: 3-axis
 * position ids of caption and image tokens, their RoPE cos/sin (built like diffusers'
 * RopeEmbedder: per-axis frequencies in float64, angles rounded to float32), the
 * key-padding masks of the three token streams, and the scaled timesteps. These depend
 * only on the geometry and t, so they are built once per call on the host and uploaded
 * in one piece. */
#include <math.h>
#include <string.h>

#include "models/zimage_internal.h"

#define ALIGN_FLOATS 16 /* 64 bytes */

static size_t round_up(size_t n) { return (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS; }

/* Float counts of each table, in layout order. */
typedef struct table_sizes {
  size_t x_rope, c_rope, u_rope; /* each of cos and sin */
  size_t x_mask, c_mask, u_mask; /* in floats (bytes rounded up) */
  size_t t, zeros;
} table_sizes;

static table_sizes sizes_of(const dit_zimage_config *c, const zimage_geom *g) {
  table_sizes s;
  size_t n = (size_t)g->n, half = (size_t)c->head_dim / 2;
  s.x_rope = round_up(n * (size_t)g->Sx * half);
  s.c_rope = round_up(n * (size_t)g->Sc * half);
  s.u_rope = round_up(n * (size_t)g->Su * half);
  s.x_mask = round_up((n * (size_t)g->Sx + 3) / 4);
  s.c_mask = round_up((n * (size_t)g->Sc + 3) / 4);
  s.u_mask = round_up((n * (size_t)g->Su + 3) / 4);
  s.t = round_up(n);
  s.zeros = round_up((size_t)c->dim);
  return s;
}

size_t zimage_host_bytes(const dit_zimage_config *c, const zimage_geom *g) {
  table_sizes s = sizes_of(c, g);
  size_t floats = 2 * (s.x_rope + s.c_rope + s.u_rope) + s.x_mask + s.c_mask + s.u_mask + s.t + s.zeros;
  return floats * sizeof(float);
}

/* cos/sin of the position `pos` (3 ids) at row `row` of a [*, half] table pair:
 * axis k contributes axes_dims[k]/2 pairs with angle (float)(pos_k * theta^(-2j/d_k)). */
static void rope_row(const dit_zimage_config *c, const double *freq, const int64_t pos[DIT_ZIMAGE_N_AXES], float *cs,
                     float *sn) {
  int o = 0;
  for (int k = 0; k < DIT_ZIMAGE_N_AXES; k++) {
    for (int j = 0; j < c->axes_dims[k] / 2; j++, o++) {
      float angle = (float)((double)pos[k] * freq[o]);
      cs[o] = cosf(angle);
      sn[o] = sinf(angle);
    }
  }
}

/* Per-pair frequencies theta^(-2j/d_k), axis after axis (head_dim/2 values). */
static void rope_freqs(const dit_zimage_config *c, double *freq) {
  int o = 0;
  for (int k = 0; k < DIT_ZIMAGE_N_AXES; k++) {
    int d = c->axes_dims[k];
    for (int j = 0; j < d / 2; j++) freq[o++] = 1.0 / pow(c->rope_theta, (double)(2 * j) / (double)d);
  }
}

/* Position ids of image token r of item it (image pad tokens are (0, 0, 0)). */
static void image_pos(const zimage_item *it, int64_t r, int64_t pos[3]) {
  if (r >= it->n_img) {
    pos[0] = pos[1] = pos[2] = 0;
    return;
  }
  int64_t hw = it->Ht * it->Wt;
  pos[0] = it->cap_len + 1 + r / hw;
  pos[1] = (r % hw) / it->Wt;
  pos[2] = r % it->Wt;
}

/* Caption token j: (1 + j, 0, 0), the padded caption's tokens included (diffusers
 * builds the caption grid over the padded length). */
static void caption_pos(const zimage_item *it, int64_t j, int64_t pos[3]) {
  (void)it;
  pos[0] = 1 + j;
  pos[1] = pos[2] = 0;
}

/* Item i's rows of one stream's table pair ([n, S, half] each): row r < len from the
 * position pos_of(it, r), the batch-padding rows after it zero. */
static void fill_stream(const dit_zimage_config *c, const double *freq, const zimage_item *it, int i, int64_t S,
                        int64_t len, void (*pos_of)(const zimage_item *, int64_t, int64_t *), float *cos,
                        float *sin) {
  const size_t half = (size_t)c->head_dim / 2;
  for (int64_t r = 0; r < S; r++) {
    size_t o = ((size_t)i * (size_t)S + (size_t)r) * half;
    int64_t pos[3];
    if (r >= len) {
      memset(cos + o, 0, half * sizeof(float));
      memset(sin + o, 0, half * sizeof(float));
      continue;
    }
    pos_of(it, r, pos);
    rope_row(c, freq, pos, cos + o, sin + o);
  }
}

/* Fills the three RoPE table pairs. Batch-padding rows are zero (like pad_sequence). */
static void fill_rope(const dit_zimage_config *c, const zimage_geom *g, const zimage_host_tables *t) {
  size_t half = (size_t)c->head_dim / 2;
  double freq[256]; /* head_dim <= 512 (checked with the config) */
  rope_freqs(c, freq);
  for (int i = 0; i < g->n; i++) {
    const zimage_item *it = &g->items[i];
    fill_stream(c, freq, it, i, g->Sx, it->x_len, image_pos, t->x_cos, t->x_sin);
    fill_stream(c, freq, it, i, g->Sc, it->cap_len, caption_pos, t->c_cos, t->c_sin);
    /* unified: [image tokens (x_len), caption tokens (cap_len)]: copy the rows */
    for (int64_t r = 0; r < g->Su; r++) {
      size_t o = ((size_t)i * (size_t)g->Su + (size_t)r) * half;
      const float *sc = NULL, *ss = NULL;
      if (r < it->x_len) {
        size_t so = ((size_t)i * (size_t)g->Sx + (size_t)r) * half;
        sc = t->x_cos + so;
        ss = t->x_sin + so;
      } else if (r < it->x_len + it->cap_len) {
        size_t so = ((size_t)i * (size_t)g->Sc + (size_t)(r - it->x_len)) * half;
        sc = t->c_cos + so;
        ss = t->c_sin + so;
      }
      if (sc) {
        memcpy(t->u_cos + o, sc, half * sizeof(float));
        memcpy(t->u_sin + o, ss, half * sizeof(float));
      } else {
        memset(t->u_cos + o, 0, half * sizeof(float));
        memset(t->u_sin + o, 0, half * sizeof(float));
      }
    }
  }
}

static void fill_masks(const zimage_geom *g, const zimage_host_tables *t) {
  for (int i = 0; i < g->n; i++) {
    const zimage_item *it = &g->items[i];
    for (int64_t r = 0; r < g->Sx; r++) t->x_mask[(size_t)i * (size_t)g->Sx + (size_t)r] = r < it->x_len;
    for (int64_t r = 0; r < g->Sc; r++) t->c_mask[(size_t)i * (size_t)g->Sc + (size_t)r] = r < it->cap_len;
    for (int64_t r = 0; r < g->Su; r++)
      t->u_mask[(size_t)i * (size_t)g->Su + (size_t)r] = r < it->x_len + it->cap_len;
  }
}

void zimage_table_layout(const dit_zimage_config *c, const zimage_geom *g, void *buf, zimage_host_tables *out) {
  table_sizes s = sizes_of(c, g);
  float *p = buf;
  out->x_cos = p, p += s.x_rope;
  out->x_sin = p, p += s.x_rope;
  out->c_cos = p, p += s.c_rope;
  out->c_sin = p, p += s.c_rope;
  out->u_cos = p, p += s.u_rope;
  out->u_sin = p, p += s.u_rope;
  out->x_mask = (uint8_t *)p, p += s.x_mask;
  out->c_mask = (uint8_t *)p, p += s.c_mask;
  out->u_mask = (uint8_t *)p, p += s.u_mask;
  out->t_scaled = p, p += s.t;
  out->zeros = p;
}

void zimage_fill_tables(const dit_zimage_config *c, const zimage_geom *g, const zimage_host_tables *h) {
  fill_rope(c, g, h);
  fill_masks(g, h);
  memset(h->zeros, 0, round_up((size_t)c->dim) * sizeof(float));
}

void zimage_set_timesteps(const dit_zimage_config *c, int n, const float *t, const zimage_host_tables *h) {
  /* torch: t (float32) * t_scale (python float) computes in float32 */
  for (int i = 0; i < n; i++) h->t_scaled[i] = t[i] * (float)c->t_scale;
}
