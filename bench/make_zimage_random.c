/* Writes a random-weight Z-Image-Turbo model folder in the diffusers ZImagePipeline layout,
 * so that `ditrun generate` can be run (and its time and peak memory measured) at the real
 * geometry without downloading the checkpoint. The tensor names, shapes and dtypes are the
 * published ones: transformer = ZImageTransformer2DModel 6.15 B (bf16), text_encoder =
 * Qwen3-4B (Qwen3ForCausalLM, bf16, tied embeddings: no lm_head), vae = the Flux
 * AutoencoderKL (encoder and decoder, f32 by default), scheduler =
 * FlowMatchEulerDiscreteScheduler (shift 3), tokenizer copied from a folder given (the
 * Qwen tokenizer files in tests/fixtures/models/zimage-tiny/tokenizer). Large components are sharded
 * (`*-0000i-of-0000n.safetensors` + `*.safetensors.index.json`) as the published
 * checkpoints are. Data are streamed in chunks (the 20 GB folder is never held in memory);
 * each file is written under a temporary name and renamed when complete, and
 * model_index.json is written last.
 *
 *   make_zimage_random -o DIR [--tokenizer DIR] [--seed S] [--shard-gb G] [--vae-dtype f32|bf16]
 *                      [--tiny] [--configs-only] [--overwrite]
 *
 * --tiny writes the geometry of tests/fixtures/models/zimage-tiny instead (same names, small shapes: a check
 * of this tool against a folder diffusers wrote). --shard-gb 0 writes one file per component.
 * Weights: matrices and kernels uniform in +-1/sqrt(fan_in), 1-D weights (norm scales)
 * 1 +- 0.05, biases +-0.02, the law of `ditrun bench`'s random weights. Not run by
 * `make test` (the full folder is ~20.7 GB). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/splitmix.h"
#include "core/timer.h"

#define NAME_MAX_LEN 160
#define PATH_LEN 4096
#define CHUNK_ELEMS ((size_t)4 << 20) /* values generated per write */

typedef enum { T_BF16, T_F32 } tdtype;

typedef struct tspec {
  char name[NAME_MAX_LEN];
  tdtype dt;
  int ndim;
  int64_t shape[4];
  int shard; /* assigned when the component is split */
} tspec;

typedef struct tlist {
  tspec *v;
  size_t n, cap;
  dit_status status; /* first failure of tl_add, reported once */
} tlist;

/* Geometry of the three networks (the values of the published config.json files). */
typedef struct geom {
  int dim, n_layers, n_refiner, n_heads, cap_feat_dim, in_channels, axes_dims[3], axes_lens[3];
  int q_hidden, q_layers, q_heads, q_kv_heads, q_head_dim, q_inter, q_vocab, q_max_pos;
  int vae_ch[4], vae_layers, vae_groups, vae_sample;
} geom;

static const geom GEOM_TURBO = {
    3840, 30, 2, 30, 2560, 16, {32, 48, 48}, {1536, 512, 512},
    2560, 36, 32, 8, 128, 9728, 151936, 40960,
    {128, 256, 512, 512}, 2, 32, 1024,
};
/* tests/fixtures/models/zimage-tiny's configs */
static const geom GEOM_TINY = {
    256, 2, 1, 2, 16, 16, {32, 48, 48}, {1024, 512, 512},
    16, 28, 2, 1, 8, 48, 151936, 4096,
    {32, 32, 64, 64}, 1, 16, 32,
};

typedef struct opts {
  const char *out, *tokenizer;
  uint64_t seed;
  double shard_gb;
  tdtype vae_dt;
  int tiny, overwrite, configs_only;
} opts;

/* ---- tensor lists ------------------------------------------------------------------- */

static void tl_free(tlist *l) { free(l->v); }

static void tl_add(tlist *l, tdtype dt, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void tl_add(tlist *l, tdtype dt, int ndim, const int64_t *shape, const char *fmt, ...) {
  if (l->status != DIT_OK) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 256;
    tspec *v = realloc(l->v, cap * sizeof *v);
    if (!v) {
      l->status = DIT_ERR_NOMEM;
      return;
    }
    l->v = v;
    l->cap = cap;
  }
  tspec *t = &l->v[l->n];
  memset(t, 0, sizeof *t);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->name, sizeof t->name, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof t->name) {
    l->status = DIT_ERR_INTERNAL;
    return;
  }
  t->dt = dt;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
  l->n++;
}

static int64_t numel(const tspec *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

static size_t nbytes(const tspec *t) { return (size_t)numel(t) * (t->dt == T_F32 ? 4u : 2u); }

#define V1(a) (const int64_t[]){a}
#define V2(a, b) (const int64_t[]){a, b}
#define V4(a, b, c, d) (const int64_t[]){a, b, c, d}

/* ---- the three networks' tensors, in the checkpoints' names --------------------------- */

static void dit_block(tlist *l, const geom *g, const char *group, int i, int modulation) {
  const int64_t D = g->dim, hd = g->dim / g->n_heads, F = (int64_t)((double)g->dim / 3.0 * 8.0);
  const char *proj[4] = {"to_q", "to_k", "to_v", "to_out.0"};
  for (int k = 0; k < 4; k++) tl_add(l, T_BF16, 2, V2(D, D), "%s.%d.attention.%s.weight", group, i, proj[k]);
  tl_add(l, T_BF16, 1, V1(hd), "%s.%d.attention.norm_q.weight", group, i);
  tl_add(l, T_BF16, 1, V1(hd), "%s.%d.attention.norm_k.weight", group, i);
  tl_add(l, T_BF16, 1, V1(D), "%s.%d.attention_norm1.weight", group, i);
  tl_add(l, T_BF16, 1, V1(D), "%s.%d.attention_norm2.weight", group, i);
  tl_add(l, T_BF16, 1, V1(D), "%s.%d.ffn_norm1.weight", group, i);
  tl_add(l, T_BF16, 1, V1(D), "%s.%d.ffn_norm2.weight", group, i);
  tl_add(l, T_BF16, 2, V2(F, D), "%s.%d.feed_forward.w1.weight", group, i);
  tl_add(l, T_BF16, 2, V2(D, F), "%s.%d.feed_forward.w2.weight", group, i);
  tl_add(l, T_BF16, 2, V2(F, D), "%s.%d.feed_forward.w3.weight", group, i);
  if (modulation) {
    const int64_t A = g->dim < 256 ? g->dim : 256;
    tl_add(l, T_BF16, 2, V2(4 * D, A), "%s.%d.adaLN_modulation.0.weight", group, i);
    tl_add(l, T_BF16, 1, V1(4 * D), "%s.%d.adaLN_modulation.0.bias", group, i);
  }
}

/* ZImageTransformer2DModel (patch 2, frame patch 1: the "2-1" embedder and final layer). */
static void transformer_tensors(tlist *l, const geom *g) {
  const int64_t D = g->dim, A = g->dim < 256 ? g->dim : 256, P = 4 * (int64_t)g->in_channels, cf = g->cap_feat_dim;
  tl_add(l, T_BF16, 2, V2(D, P), "all_x_embedder.2-1.weight");
  tl_add(l, T_BF16, 1, V1(D), "all_x_embedder.2-1.bias");
  tl_add(l, T_BF16, 2, V2(D, A), "all_final_layer.2-1.adaLN_modulation.1.weight");
  tl_add(l, T_BF16, 1, V1(D), "all_final_layer.2-1.adaLN_modulation.1.bias");
  tl_add(l, T_BF16, 2, V2(P, D), "all_final_layer.2-1.linear.weight");
  tl_add(l, T_BF16, 1, V1(P), "all_final_layer.2-1.linear.bias");
  for (int i = 0; i < g->n_refiner; i++) dit_block(l, g, "noise_refiner", i, 1);
  for (int i = 0; i < g->n_refiner; i++) dit_block(l, g, "context_refiner", i, 0);
  tl_add(l, T_BF16, 2, V2(1024, 256), "t_embedder.mlp.0.weight");
  tl_add(l, T_BF16, 1, V1(1024), "t_embedder.mlp.0.bias");
  tl_add(l, T_BF16, 2, V2(A, 1024), "t_embedder.mlp.2.weight");
  tl_add(l, T_BF16, 1, V1(A), "t_embedder.mlp.2.bias");
  tl_add(l, T_BF16, 1, V1(cf), "cap_embedder.0.weight");
  tl_add(l, T_BF16, 2, V2(D, cf), "cap_embedder.1.weight");
  tl_add(l, T_BF16, 1, V1(D), "cap_embedder.1.bias");
  tl_add(l, T_BF16, 2, V2(1, D), "x_pad_token");
  tl_add(l, T_BF16, 2, V2(1, D), "cap_pad_token");
  for (int i = 0; i < g->n_layers; i++) dit_block(l, g, "layers", i, 1);
}

/* Qwen3ForCausalLM with tie_word_embeddings: "model."-prefixed, no lm_head. */
static void qwen3_tensors(tlist *l, const geom *g) {
  const int64_t H = g->q_hidden, D = g->q_head_dim, I = g->q_inter;
  const int64_t QD = (int64_t)g->q_heads * D, KD = (int64_t)g->q_kv_heads * D;
  tl_add(l, T_BF16, 2, V2(g->q_vocab, H), "model.embed_tokens.weight");
  for (int i = 0; i < g->q_layers; i++) {
    tl_add(l, T_BF16, 1, V1(H), "model.layers.%d.input_layernorm.weight", i);
    tl_add(l, T_BF16, 2, V2(QD, H), "model.layers.%d.self_attn.q_proj.weight", i);
    tl_add(l, T_BF16, 2, V2(KD, H), "model.layers.%d.self_attn.k_proj.weight", i);
    tl_add(l, T_BF16, 2, V2(KD, H), "model.layers.%d.self_attn.v_proj.weight", i);
    tl_add(l, T_BF16, 2, V2(H, QD), "model.layers.%d.self_attn.o_proj.weight", i);
    tl_add(l, T_BF16, 1, V1(D), "model.layers.%d.self_attn.q_norm.weight", i);
    tl_add(l, T_BF16, 1, V1(D), "model.layers.%d.self_attn.k_norm.weight", i);
    tl_add(l, T_BF16, 1, V1(H), "model.layers.%d.post_attention_layernorm.weight", i);
    tl_add(l, T_BF16, 2, V2(I, H), "model.layers.%d.mlp.gate_proj.weight", i);
    tl_add(l, T_BF16, 2, V2(I, H), "model.layers.%d.mlp.up_proj.weight", i);
    tl_add(l, T_BF16, 2, V2(H, I), "model.layers.%d.mlp.down_proj.weight", i);
  }
  tl_add(l, T_BF16, 1, V1(H), "model.norm.weight");
}

static void vae_conv(tlist *l, tdtype dt, int64_t co, int64_t ci, int64_t k, const char *base) {
  tl_add(l, dt, 4, V4(co, ci, k, k), "%s.weight", base);
  tl_add(l, dt, 1, V1(co), "%s.bias", base);
}

static void vae_vec(tlist *l, tdtype dt, int64_t c, const char *base) {
  tl_add(l, dt, 1, V1(c), "%s.weight", base);
  tl_add(l, dt, 1, V1(c), "%s.bias", base);
}

static void vae_resnet(tlist *l, tdtype dt, int64_t ci, int64_t co, const char *base) {
  char n[NAME_MAX_LEN];
  snprintf(n, sizeof n, "%s.norm1", base), vae_vec(l, dt, ci, n);
  snprintf(n, sizeof n, "%s.conv1", base), vae_conv(l, dt, co, ci, 3, n);
  snprintf(n, sizeof n, "%s.norm2", base), vae_vec(l, dt, co, n);
  snprintf(n, sizeof n, "%s.conv2", base), vae_conv(l, dt, co, co, 3, n);
  if (ci != co) snprintf(n, sizeof n, "%s.conv_shortcut", base), vae_conv(l, dt, co, ci, 1, n);
}

/* The mid block of the encoder or decoder ("encoder" / "decoder"), c channels. */
static void vae_mid(tlist *l, tdtype dt, int64_t c, const char *part) {
  char n[NAME_MAX_LEN];
  snprintf(n, sizeof n, "%s.mid_block.resnets.0", part), vae_resnet(l, dt, c, c, n);
  snprintf(n, sizeof n, "%s.mid_block.attentions.0.group_norm", part), vae_vec(l, dt, c, n);
  const char *proj[4] = {"to_q", "to_k", "to_v", "to_out.0"};
  for (int k = 0; k < 4; k++) {
    tl_add(l, dt, 2, V2(c, c), "%s.mid_block.attentions.0.%s.weight", part, proj[k]);
    tl_add(l, dt, 1, V1(c), "%s.mid_block.attentions.0.%s.bias", part, proj[k]);
  }
  snprintf(n, sizeof n, "%s.mid_block.resnets.1", part), vae_resnet(l, dt, c, c, n);
}

/* AutoencoderKL (no quant convs, as the Flux VAE): encoder, then decoder. */
static void vae_tensors(tlist *l, const geom *g, tdtype dt) {
  const int nl = 4, top = g->vae_ch[nl - 1], lat = 16;
  char n[NAME_MAX_LEN];
  vae_conv(l, dt, g->vae_ch[0], 3, 3, "encoder.conv_in");
  int prev = g->vae_ch[0];
  for (int i = 0; i < nl; i++) {
    for (int k = 0; k < g->vae_layers; k++) {
      snprintf(n, sizeof n, "encoder.down_blocks.%d.resnets.%d", i, k);
      vae_resnet(l, dt, k ? g->vae_ch[i] : prev, g->vae_ch[i], n);
    }
    if (i < nl - 1) {
      snprintf(n, sizeof n, "encoder.down_blocks.%d.downsamplers.0.conv", i);
      vae_conv(l, dt, g->vae_ch[i], g->vae_ch[i], 3, n);
    }
    prev = g->vae_ch[i];
  }
  vae_mid(l, dt, top, "encoder");
  vae_vec(l, dt, top, "encoder.conv_norm_out");
  vae_conv(l, dt, 2 * lat, top, 3, "encoder.conv_out");
  vae_conv(l, dt, top, lat, 3, "decoder.conv_in");
  vae_mid(l, dt, top, "decoder");
  prev = top;
  for (int i = 0; i < nl; i++) {
    const int out = g->vae_ch[nl - 1 - i];
    for (int k = 0; k <= g->vae_layers; k++) {
      snprintf(n, sizeof n, "decoder.up_blocks.%d.resnets.%d", i, k);
      vae_resnet(l, dt, k ? out : prev, out, n);
    }
    if (i < nl - 1) {
      snprintf(n, sizeof n, "decoder.up_blocks.%d.upsamplers.0.conv", i);
      vae_conv(l, dt, out, out, 3, n);
    }
    prev = out;
  }
  vae_vec(l, dt, g->vae_ch[0], "decoder.conv_norm_out");
  vae_conv(l, dt, 3, g->vae_ch[0], 3, "decoder.conv_out");
}

/* ---- random data ---------------------------------------------------------------------- */

static uint64_t name_key(const char *s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return dit_splitmix64(h ^ seed);
}

/* center and half-width of the uniform law of tensor t (see the file comment) */
static void init_law(const tspec *t, float *center, float *amp) {
  size_t len = strlen(t->name);
  *center = 0.0f;
  if (t->ndim >= 2) *amp = 1.0f / sqrtf((float)(numel(t) / t->shape[0]));
  else if (len > 7 && !strcmp(t->name + len - 7, ".weight")) *center = 1.0f, *amp = 0.05f;
  else *amp = 0.02f;
}

/* Elements [first, first + n) of t into buf (bf16 or f32): one 64-bit hash gives four
 * 16-bit uniforms, so the values depend on (seed, name, index) only. */
static void fill_chunk(void *buf, const tspec *t, uint64_t key, int64_t first, int64_t n, float center, float amp) {
  const float scale = amp / 32768.0f;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; j++) {
    const int64_t e = first + j;
    const uint64_t h = dit_splitmix64(key ^ ((uint64_t)(e >> 2) * 0xD1B54A32D192ED03ull));
    const int16_t r = (int16_t)(uint16_t)(h >> (16 * (e & 3)));
    const float v = center + scale * (float)r;
    if (t->dt == T_F32) ((float *)buf)[j] = v;
    else ((uint16_t *)buf)[j] = dit_f32_to_bf16(v);
  }
}

/* ---- files ---------------------------------------------------------------------------- */

static dit_status write_all(FILE *f, const void *p, size_t n, const char *path, dit_error *err) {
  if (n && fwrite(p, 1, n, f) != n) return dit_errorf(err, DIT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
  return DIT_OK;
}

/* Closes f (a temporary file) and renames it to path; on failure removes it. */
static dit_status finish_file(FILE *f, const char *tmp, const char *path, dit_status s, dit_error *err) {
  if (fclose(f) != 0 && s == DIT_OK) s = dit_errorf(err, DIT_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
  if (s == DIT_OK && rename(tmp, path) != 0)
    s = dit_errorf(err, DIT_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
  if (s != DIT_OK) remove(tmp);
  return s;
}

static dit_status open_tmp(const char *path, char *tmp, size_t len, FILE **f, dit_error *err) {
  if ((size_t)snprintf(tmp, len, "%s.tmp", path) >= len) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: path too long", path);
  *f = fopen(tmp, "wb");
  if (!*f) return dit_errorf(err, DIT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
  return DIT_OK;
}

static dit_status write_text(const char *dir, const char *name, const char *text, dit_error *err) {
  char path[PATH_LEN], tmp[PATH_LEN + 8];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s/%s: path too long", dir, name);
  FILE *f;
  DIT_TRY(open_tmp(path, tmp, sizeof tmp, &f, err));
  return finish_file(f, tmp, path, write_all(f, text, strlen(text), tmp, err), err);
}

/* A growing string for the JSON headers (the transformer's is ~100 KB). */
typedef struct sbuf {
  char *p;
  size_t n, cap;
  int failed;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  for (int tries = 0; !b->failed && tries < 2; tries++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (n < 0) break;
    if (b->p && b->n + (size_t)n < b->cap) {
      b->n += (size_t)n;
      return;
    }
    size_t cap = (b->cap ? 2 * b->cap : 65536) + (size_t)n + 1;
    char *p = realloc(b->p, cap);
    if (!p) break;
    b->p = p;
    b->cap = cap;
  }
  b->failed = 1;
}

/* The safetensors header of the tensors of list l in shard `shard`, padded with spaces to
 * a multiple of 8 bytes (so every tensor stays aligned to its element size). */
static dit_status shard_header(const tlist *l, int shard, sbuf *b, dit_error *err) {
  size_t off = 0;
  sb_printf(b, "{\"__metadata__\":{\"format\":\"pt\"}");
  for (size_t i = 0; i < l->n; i++) {
    const tspec *t = &l->v[i];
    if (t->shard != shard) continue;
    sb_printf(b, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t->name, t->dt == T_F32 ? "F32" : "BF16");
    for (int k = 0; k < t->ndim; k++) sb_printf(b, "%s%lld", k ? "," : "", (long long)t->shape[k]);
    sb_printf(b, "],\"data_offsets\":[%zu,%zu]}", off, off + nbytes(t));
    off += nbytes(t);
  }
  sb_printf(b, "}");
  while (!b->failed && b->n % 8) sb_printf(b, " ");
  if (b->failed) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for a safetensors header");
  return DIT_OK;
}

/* Writes shard `shard` of l as one .safetensors file at path, data streamed in chunks. */
static dit_status write_shard(const tlist *l, int shard, uint64_t seed, const char *path, void *buf,
                              dit_error *err) {
  sbuf h = {0};
  dit_status s = shard_header(l, shard, &h, err);
  char tmp[PATH_LEN + 8];
  FILE *f = NULL;
  if (s == DIT_OK) s = open_tmp(path, tmp, sizeof tmp, &f, err);
  if (s != DIT_OK) {
    free(h.p);
    return s;
  }
  uint8_t len8[8];
  for (int k = 0; k < 8; k++) len8[k] = (uint8_t)((uint64_t)h.n >> (8 * k));
  s = write_all(f, len8, 8, tmp, err);
  if (s == DIT_OK) s = write_all(f, h.p, h.n, tmp, err);
  free(h.p);
  for (size_t i = 0; i < l->n && s == DIT_OK; i++) {
    const tspec *t = &l->v[i];
    if (t->shard != shard) continue;
    float center, amp;
    init_law(t, &center, &amp);
    const uint64_t key = name_key(t->name, seed);
    const int64_t n = numel(t), es = t->dt == T_F32 ? 4 : 2;
    for (int64_t j = 0; j < n && s == DIT_OK; j += (int64_t)CHUNK_ELEMS) {
      const int64_t m = n - j < (int64_t)CHUNK_ELEMS ? n - j : (int64_t)CHUNK_ELEMS;
      fill_chunk(buf, t, key, j, m, center, amp);
      s = write_all(f, buf, (size_t)(m * es), tmp, err);
    }
  }
  return finish_file(f, tmp, path, s, err);
}

static int cmp_name(const void *a, const void *b) {
  return strcmp((*(const tspec *const *)a)->name, (*(const tspec *const *)b)->name);
}

/* The index: total size and the weight map, names sorted as transformers/diffusers write it. */
static dit_status write_index(const tlist *l, const char *dir, const char *stem, int n_shards, dit_error *err) {
  const tspec **v = malloc(l->n * sizeof *v);
  if (!v) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the index");
  size_t total = 0;
  for (size_t i = 0; i < l->n; i++) v[i] = &l->v[i], total += nbytes(&l->v[i]);
  qsort(v, l->n, sizeof *v, cmp_name);
  sbuf b = {0};
  sb_printf(&b, "{\n  \"metadata\": {\n    \"total_size\": %zu\n  },\n  \"weight_map\": {\n", total);
  for (size_t i = 0; i < l->n; i++)
    sb_printf(&b, "    \"%s\": \"%s-%05d-of-%05d.safetensors\"%s\n", v[i]->name, stem, v[i]->shard + 1, n_shards,
              i + 1 < l->n ? "," : "");
  sb_printf(&b, "  }\n}\n");
  free(v);
  char name[256];
  snprintf(name, sizeof name, "%s.safetensors.index.json", stem);
  dit_status s = b.failed ? dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the index") : write_text(dir, name, b.p, err);
  free(b.p);
  return s;
}

/* Splits l into shards of at most max_bytes (greedy, in list order; 0 = one file) and
 * writes them (+ the index when there are several) into dir as stem*.safetensors. */
static dit_status write_component(tlist *l, const char *dir, const char *stem, size_t max_bytes, uint64_t seed,
                                  dit_error *err) {
  if (l->status != DIT_OK) return dit_errorf(err, l->status, "%s: building the tensor list failed", dir);
  int shard = 0;
  size_t in_shard = 0, total = 0;
  for (size_t i = 0; i < l->n; i++) {
    size_t nb = nbytes(&l->v[i]);
    if (max_bytes && in_shard && in_shard + nb > max_bytes) shard++, in_shard = 0;
    l->v[i].shard = shard;
    in_shard += nb;
    total += nb;
  }
  const int n_shards = shard + 1;
  void *buf = malloc(CHUNK_ELEMS * 4);
  if (!buf) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for a write buffer");
  dit_status s = DIT_OK;
  double t0 = dit_time_now();
  for (int k = 0; k < n_shards && s == DIT_OK; k++) {
    char path[PATH_LEN];
    int n = n_shards == 1 ? snprintf(path, sizeof path, "%s/%s.safetensors", dir, stem)
                          : snprintf(path, sizeof path, "%s/%s-%05d-of-%05d.safetensors", dir, stem, k + 1, n_shards);
    if (n < 0 || (size_t)n >= sizeof path) s = dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: path too long", dir);
    if (s == DIT_OK) s = write_shard(l, k, seed, path, buf, err);
    if (s == DIT_OK) fprintf(stderr, "  wrote %s\n", path);
  }
  free(buf);
  if (s == DIT_OK && n_shards > 1) s = write_index(l, dir, stem, n_shards, err);
  if (s == DIT_OK)
    fprintf(stderr, "%s: %zu tensors, %.3f GB in %d file%s, %.1f s\n", dir, l->n, (double)total / 1e9, n_shards,
            n_shards > 1 ? "s" : "", dit_time_now() - t0);
  return s;
}

static dit_status make_dir(const char *path, dit_error *err) {
  if (mkdir(path, 0755) != 0 && errno != EEXIST)
    return dit_errorf(err, DIT_ERR_IO, "%s: cannot create folder: %s", path, strerror(errno));
  return DIT_OK;
}

/* out/name as a new (or existing) folder; its path in buf. */
static dit_status sub_dir(const char *out, const char *name, char *buf, size_t len, dit_error *err) {
  if ((size_t)snprintf(buf, len, "%s/%s", out, name) >= len)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s/%s: path too long", out, name);
  return make_dir(buf, err);
}

/* Copies every regular file of folder src into folder dst. */
static dit_status copy_folder(const char *src, const char *dst, dit_error *err) {
  DIR *d = opendir(src);
  if (!d) return dit_errorf(err, DIT_ERR_IO, "%s: cannot open the tokenizer folder: %s", src, strerror(errno));
  dit_status s = DIT_OK;
  int copied = 0;
  char *buf = malloc(1 << 20);
  if (!buf) s = dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  struct dirent *e;
  while (s == DIT_OK && (e = readdir(d))) {
    char from[PATH_LEN], to[PATH_LEN], tmp[PATH_LEN + 8];
    struct stat st;
    if ((size_t)snprintf(from, sizeof from, "%s/%s", src, e->d_name) >= sizeof from ||
        (size_t)snprintf(to, sizeof to, "%s/%s", dst, e->d_name) >= sizeof to) {
      s = dit_errorf(err, DIT_ERR_INVALID_ARG, "%s/%s: path too long", src, e->d_name);
      break;
    }
    if (stat(from, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    FILE *in = fopen(from, "rb"), *f = NULL;
    if (!in) s = dit_errorf(err, DIT_ERR_IO, "%s: cannot read: %s", from, strerror(errno));
    if (s == DIT_OK) s = open_tmp(to, tmp, sizeof tmp, &f, err);
    if (s == DIT_OK) {
      size_t n;
      while (s == DIT_OK && (n = fread(buf, 1, 1 << 20, in)) > 0) s = write_all(f, buf, n, tmp, err);
      if (s == DIT_OK && ferror(in)) s = dit_errorf(err, DIT_ERR_IO, "%s: read failed", from);
      s = finish_file(f, tmp, to, s, err);
      copied++;
    }
    if (in) fclose(in);
  }
  closedir(d);
  free(buf);
  if (s == DIT_OK && !copied) s = dit_errorf(err, DIT_ERR_FORMAT, "%s: no files to copy", src);
  return s;
}

/* ---- configs (the published files' fields) --------------------------------------------- */

static const char MODEL_INDEX[] =
    "{\n  \"_class_name\": \"ZImagePipeline\",\n  \"_diffusers_version\": \"0.36.0.dev0\",\n"
    "  \"scheduler\": [\"diffusers\", \"FlowMatchEulerDiscreteScheduler\"],\n"
    "  \"text_encoder\": [\"transformers\", \"Qwen3ForCausalLM\"],\n"
    "  \"tokenizer\": [\"transformers\", \"Qwen2Tokenizer\"],\n"
    "  \"transformer\": [\"diffusers\", \"ZImageTransformer2DModel\"],\n"
    "  \"vae\": [\"diffusers\", \"AutoencoderKL\"]\n}\n";

static const char SCHEDULER[] =
    "{\n  \"_class_name\": \"FlowMatchEulerDiscreteScheduler\",\n  \"_diffusers_version\": \"0.36.0.dev0\",\n"
    "  \"num_train_timesteps\": 1000,\n  \"shift\": 3.0,\n  \"use_dynamic_shifting\": false\n}\n";

static void transformer_config(sbuf *b, const geom *g) {
  sb_printf(b,
            "{\n  \"_class_name\": \"ZImageTransformer2DModel\",\n  \"_diffusers_version\": \"0.36.0.dev0\",\n"
            "  \"all_f_patch_size\": [1],\n  \"all_patch_size\": [2],\n  \"axes_dims\": [%d, %d, %d],\n"
            "  \"axes_lens\": [%d, %d, %d],\n  \"cap_feat_dim\": %d,\n  \"dim\": %d,\n  \"in_channels\": %d,\n"
            "  \"n_heads\": %d,\n  \"n_kv_heads\": %d,\n  \"n_layers\": %d,\n  \"n_refiner_layers\": %d,\n"
            "  \"norm_eps\": 1e-05,\n  \"qk_norm\": true,\n  \"rope_theta\": 256.0,\n  \"t_scale\": 1000.0\n}\n",
            g->axes_dims[0], g->axes_dims[1], g->axes_dims[2], g->axes_lens[0], g->axes_lens[1], g->axes_lens[2],
            g->cap_feat_dim, g->dim, g->in_channels, g->n_heads, g->n_heads, g->n_layers, g->n_refiner);
}

static void qwen3_config(sbuf *b, const geom *g) {
  sb_printf(b,
            "{\n  \"architectures\": [\"Qwen3ForCausalLM\"],\n  \"attention_bias\": false,\n"
            "  \"attention_dropout\": 0.0,\n  \"bos_token_id\": 151643,\n  \"eos_token_id\": 151645,\n"
            "  \"head_dim\": %d,\n  \"hidden_act\": \"silu\",\n  \"hidden_size\": %d,\n"
            "  \"initializer_range\": 0.02,\n  \"intermediate_size\": %d,\n  \"max_position_embeddings\": %d,\n"
            "  \"max_window_layers\": %d,\n  \"model_type\": \"qwen3\",\n  \"num_attention_heads\": %d,\n"
            "  \"num_hidden_layers\": %d,\n  \"num_key_value_heads\": %d,\n  \"rms_norm_eps\": 1e-06,\n"
            "  \"rope_scaling\": null,\n  \"rope_theta\": 1000000,\n  \"sliding_window\": null,\n"
            "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"bfloat16\",\n  \"use_cache\": true,\n"
            "  \"use_sliding_window\": false,\n  \"vocab_size\": %d\n}\n",
            g->q_head_dim, g->q_hidden, g->q_inter, g->q_max_pos, g->q_layers, g->q_heads, g->q_layers,
            g->q_kv_heads, g->q_vocab);
}

static void vae_config(sbuf *b, const geom *g) {
  const char *down = "\"DownEncoderBlock2D\", \"DownEncoderBlock2D\", \"DownEncoderBlock2D\", \"DownEncoderBlock2D\"";
  const char *up = "\"UpDecoderBlock2D\", \"UpDecoderBlock2D\", \"UpDecoderBlock2D\", \"UpDecoderBlock2D\"";
  sb_printf(b,
            "{\n  \"_class_name\": \"AutoencoderKL\",\n  \"_diffusers_version\": \"0.36.0.dev0\",\n"
            "  \"act_fn\": \"silu\",\n  \"block_out_channels\": [%d, %d, %d, %d],\n  \"down_block_types\": [%s],\n"
            "  \"force_upcast\": true,\n  \"in_channels\": 3,\n  \"latent_channels\": 16,\n"
            "  \"latents_mean\": null,\n  \"latents_std\": null,\n  \"layers_per_block\": %d,\n"
            "  \"mid_block_add_attention\": true,\n  \"norm_num_groups\": %d,\n  \"out_channels\": 3,\n"
            "  \"sample_size\": %d,\n  \"scaling_factor\": 0.3611,\n  \"shift_factor\": 0.1159,\n"
            "  \"up_block_types\": [%s],\n  \"use_post_quant_conv\": false,\n  \"use_quant_conv\": false\n}\n",
            g->vae_ch[0], g->vae_ch[1], g->vae_ch[2], g->vae_ch[3], down, g->vae_layers, g->vae_groups,
            g->vae_sample, up);
}

/* Writes component `name`: its config (from cfg_fn, into file cfg_name), then its tensors. */
static dit_status component(const opts *o, const geom *g, const char *name, const char *cfg_name,
                            void (*cfg_fn)(sbuf *, const geom *), tlist *l, const char *stem, dit_error *err) {
  char dir[PATH_LEN];
  DIT_TRY(sub_dir(o->out, name, dir, sizeof dir, err));
  sbuf b = {0};
  cfg_fn(&b, g);
  dit_status s = b.failed ? dit_errorf(err, DIT_ERR_NOMEM, "out of memory") : write_text(dir, cfg_name, b.p, err);
  free(b.p);
  const size_t max_bytes = (size_t)(o->shard_gb * 1e9);
  if (s == DIT_OK && !o->configs_only) s = write_component(l, dir, stem, max_bytes, name_key(name, o->seed), err);
  return s;
}

static dit_status make_folder(const opts *o, dit_error *err) {
  const geom *g = o->tiny ? &GEOM_TINY : &GEOM_TURBO;
  char path[PATH_LEN];
  struct stat st;
  if ((size_t)snprintf(path, sizeof path, "%s/model_index.json", o->out) >= sizeof path)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: path too long", o->out);
  if (stat(path, &st) == 0 && !o->overwrite)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s already holds a model (pass --overwrite to replace it)", o->out);
  remove(path); /* the folder is not a model until every component is written */
  DIT_TRY(make_dir(o->out, err));
  tlist tr = {0}, te = {0}, va = {0};
  transformer_tensors(&tr, g);
  qwen3_tensors(&te, g);
  vae_tensors(&va, g, o->vae_dt);
  dit_status s = component(o, g, "transformer", "config.json", transformer_config, &tr, "diffusion_pytorch_model", err);
  if (s == DIT_OK) s = component(o, g, "text_encoder", "config.json", qwen3_config, &te, "model", err);
  if (s == DIT_OK) s = component(o, g, "vae", "config.json", vae_config, &va, "diffusion_pytorch_model", err);
  char dir[PATH_LEN];
  if (s == DIT_OK) s = sub_dir(o->out, "scheduler", dir, sizeof dir, err);
  if (s == DIT_OK) s = write_text(dir, "scheduler_config.json", SCHEDULER, err);
  if (s == DIT_OK && !o->configs_only) s = sub_dir(o->out, "tokenizer", dir, sizeof dir, err);
  if (s == DIT_OK && !o->configs_only) s = copy_folder(o->tokenizer, dir, err);
  if (s == DIT_OK) s = write_text(o->out, "model_index.json", MODEL_INDEX, err);
  tl_free(&tr);
  tl_free(&te);
  tl_free(&va);
  return s;
}

static int usage(const char *msg) {
  fprintf(stderr,
          "%s%susage: make_zimage_random -o DIR [--tokenizer DIR] [--seed S] [--shard-gb G] [--vae-dtype f32|bf16]\n"
          "                          [--tiny] [--configs-only] [--overwrite]\n"
          "  writes a random-weight Z-Image-Turbo folder (ZImagePipeline layout, ~20.7 GB) into DIR\n"
          "  --tokenizer DIR  Qwen tokenizer files to copy (default tests/fixtures/models/zimage-tiny/tokenizer)\n"
          "  --seed S         weight seed (default 1)\n"
          "  --shard-gb G     largest shard in GB (default 5, as transformers saves; 0 = one file each)\n"
          "  --vae-dtype T    VAE weights f32 (default) or bf16\n"
          "  --tiny           the geometry of tests/fixtures/models/zimage-tiny instead of the full one\n"
          "  --configs-only   model_index.json and the components' configs, no weights and no tokenizer\n"
          "                   (models/z-image-turbo was made so)\n",
          msg ? "make_zimage_random: " : "", msg ? msg : "");
  return 2;
}

static int parse_args(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  o->tokenizer = "tests/fixtures/models/zimage-tiny/tokenizer";
  o->seed = 1;
  o->shard_gb = 5.0;
  o->vae_dt = T_F32;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (!strcmp(a, "--tiny")) o->tiny = 1;
    else if (!strcmp(a, "--configs-only")) o->configs_only = 1;
    else if (!strcmp(a, "--overwrite")) o->overwrite = 1;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(NULL), -1;
    else if (!v) return usage("missing value or unknown option\n");
    else if (!strcmp(a, "-o")) o->out = v, i++;
    else if (!strcmp(a, "--tokenizer")) o->tokenizer = v, i++;
    else if (!strcmp(a, "--seed")) {
      errno = 0;
      o->seed = strtoull(v, &end, 10), i++;
      if (!*v || *end || errno) return usage("--seed: not an unsigned integer\n");
    } else if (!strcmp(a, "--shard-gb")) {
      o->shard_gb = strtod(v, &end), i++;
      if (!*v || *end || !(o->shard_gb >= 0) || o->shard_gb > 1e6) return usage("--shard-gb: not a size >= 0\n");
    } else if (!strcmp(a, "--vae-dtype")) {
      if (strcmp(v, "f32") && strcmp(v, "bf16")) return usage("--vae-dtype: f32 or bf16\n");
      o->vae_dt = strcmp(v, "f32") ? T_BF16 : T_F32, i++;
    } else return usage("unknown option\n");
  }
  return o->out ? 0 : usage("-o DIR is required\n");
}

int main(int argc, char **argv) {
  opts o;
  int rc = parse_args(argc, argv, &o);
  if (rc) return rc < 0 ? 0 : rc; /* -1: --help */
  dit_error err;
  dit_error_clear(&err);
  double t0 = dit_time_now();
  dit_status s = make_folder(&o, &err);
  if (s != DIT_OK) {
    fprintf(stderr, "make_zimage_random: %s\n", err.msg);
    return s == DIT_ERR_INVALID_ARG || s == DIT_ERR_FORMAT ? 2 : 1;
  }
  fprintf(stderr, "make_zimage_random: %s written in %.1f s\n", o.out, dit_time_now() - t0);
  return 0;
}
