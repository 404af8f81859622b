/* The GGUF reader and writer: a hand-built file read back (shapes in torch order, dtypes,
 * data, metadata of every value type, ComfyUI's orig_shape), the writer's round trip through
 * dit_weights_open, and one bad file per rule of docs/SECURITY.md, each refused with its
 * status and a message naming the rule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant.h"
#include "io/gguf.h"
#include "testing.h"

/* ---- a byte builder ---- */
typedef struct gb {
  unsigned char *p;
  size_t n, cap;
} gb;

static void put(gb *b, const void *s, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
}
static void u32(gb *b, uint32_t v) { put(b, &v, 4); }
static void u64(gb *b, uint64_t v) { put(b, &v, 8); }
static void str(gb *b, const char *s) { u64(b, strlen(s)), put(b, s, strlen(s)); }
static void pad32(gb *b) {
  while (b->n % 32) put(b, "", 1);
}

/* What to break in the built file. */
enum bad {
  OK = 0, BAD_MAGIC, V1, V4, CUT_HEADER, HUGE_KV_COUNT, HUGE_STRING, DUP_KEY, EMPTY_KEY, BAD_UTF8_KEY, NUL_KEY,
  BAD_VTYPE, NESTED, HUGE_ARRAY, ALIGN_48, ALIGN_U64, DIMS_0, DIMS_5, NEG_DIM, OVERFLOW_DIMS, UNKNOWN_TYPE,
  IQ_TYPE, ROW_NOT_BLOCKS, OFFSET_WRONG, OFFSET_MISALIGNED, OVERLAP, TRUNC_DATA, DUP_NAME, LONG_NAME,
  HUGE_TENSOR_COUNT, ORIG_SHAPE_BAD, ZERO_DIM_HUGE, N_BAD
};

static const struct {
  dit_status st;
  const char *needle;
} expect[N_BAD] = {
    [BAD_MAGIC] = {DIT_ERR_FORMAT, "magic"},
    [V1] = {DIT_ERR_UNSUPPORTED, "version 1"},
    [V4] = {DIT_ERR_FORMAT, "version 4"},
    [CUT_HEADER] = {DIT_ERR_FORMAT, "truncated"},
    [HUGE_KV_COUNT] = {DIT_ERR_FORMAT, "cannot fit"},
    [HUGE_STRING] = {DIT_ERR_FORMAT, "truncated"},
    [DUP_KEY] = {DIT_ERR_FORMAT, "duplicate key"},
    [EMPTY_KEY] = {DIT_ERR_FORMAT, "empty"},
    [BAD_UTF8_KEY] = {DIT_ERR_FORMAT, "UTF-8"},
    [NUL_KEY] = {DIT_ERR_FORMAT, "NUL"},
    [BAD_VTYPE] = {DIT_ERR_FORMAT, "unknown value type"},
    [NESTED] = {DIT_ERR_FORMAT, "array of arrays"},
    [HUGE_ARRAY] = {DIT_ERR_FORMAT, "cannot fit"},
    [ALIGN_48] = {DIT_ERR_FORMAT, "alignment"},
    [ALIGN_U64] = {DIT_ERR_FORMAT, "alignment"},
    [DIMS_0] = {DIT_ERR_FORMAT, "dims"},
    [DIMS_5] = {DIT_ERR_FORMAT, "dims"},
    [NEG_DIM] = {DIT_ERR_FORMAT, "negative"},
    [OVERFLOW_DIMS] = {DIT_ERR_FORMAT, "overflows"},
    [UNKNOWN_TYPE] = {DIT_ERR_FORMAT, "unknown ggml type"},
    [IQ_TYPE] = {DIT_ERR_UNSUPPORTED, "iq2_xxs"},
    [ROW_NOT_BLOCKS] = {DIT_ERR_FORMAT, "whole number"},
    [OFFSET_WRONG] = {DIT_ERR_FORMAT, "expected"},
    [OFFSET_MISALIGNED] = {DIT_ERR_FORMAT, "expected"},
    [OVERLAP] = {DIT_ERR_FORMAT, "expected"},
    [TRUNC_DATA] = {DIT_ERR_FORMAT, "past the end"},
    [DUP_NAME] = {DIT_ERR_FORMAT, "duplicate tensor name"},
    [LONG_NAME] = {DIT_ERR_FORMAT, "at most"},
    [HUGE_TENSOR_COUNT] = {DIT_ERR_FORMAT, "cannot fit"},
    [ORIG_SHAPE_BAD] = {DIT_ERR_FORMAT, "does not fit"},
    [ZERO_DIM_HUGE] = {DIT_ERR_FORMAT, "zero dims aside"},
};

/* The file: key/values of every value type, tensors "a" F32 ne [8, 2] (torch [2, 8]), "b"
 * Q8_0 ne [64, 3], "c" F16 ne [4] with orig_shape [2, 2], then their data. */
static void build(gb *b, enum bad bad) {
  put(b, bad == BAD_MAGIC ? "GGUG" : "GGUF", 4);
  u32(b, bad == V1 ? 1 : bad == V4 ? 4 : 3);
  if (bad == CUT_HEADER) return;
  u64(b, bad == HUGE_TENSOR_COUNT ? (uint64_t)1 << 40 : 3);
  int n_kv = 6 + (bad == DUP_KEY) + (bad == ALIGN_48 || bad == ALIGN_U64) + (bad == NESTED);
  u64(b, bad == HUGE_KV_COUNT ? (uint64_t)1 << 50 : (uint64_t)n_kv);
  /* key/values */
  if (bad == HUGE_STRING) { /* a key length far past the end of a file long enough for the counts */
    u64(b, (uint64_t)1 << 40);
    for (int i = 0; i < 64; i++) u64(b, 0);
    return;
  }
  str(b, bad == EMPTY_KEY ? "" : bad == BAD_UTF8_KEY ? "gen\xc3\x28" : "general.architecture");
  if (bad == NUL_KEY) b->p[b->n - 3] = 0;
  u32(b, bad == BAD_VTYPE ? 99 : DIT_GGUF_STRING), str(b, "test");
  str(b, "t.u8"), u32(b, DIT_GGUF_U8), put(b, "\x07", 1);
  str(b, "t.i16"), u32(b, DIT_GGUF_I16), put(b, "\xfe\xff", 2);
  str(b, "t.f64"), u32(b, DIT_GGUF_F64);
  double d = 0.25;
  put(b, &d, 8);
  str(b, "t.strings"), u32(b, DIT_GGUF_ARRAY), u32(b, DIT_GGUF_STRING), u64(b, 3);
  str(b, "x"), str(b, ""), str(b, "zz");
  str(b, "comfy.gguf.orig_shape.c"), u32(b, DIT_GGUF_ARRAY), u32(b, DIT_GGUF_I32),
      u64(b, bad == HUGE_ARRAY ? (uint64_t)1 << 60 : 2);
  u32(b, 2), u32(b, bad == ORIG_SHAPE_BAD ? 3 : 2);
  if (bad == DUP_KEY) str(b, "t.u8"), u32(b, DIT_GGUF_U8), put(b, "\x01", 1);
  if (bad == ALIGN_48) str(b, "general.alignment"), u32(b, DIT_GGUF_U32), u32(b, 48);
  if (bad == ALIGN_U64) str(b, "general.alignment"), u32(b, DIT_GGUF_U64), u64(b, 32);
  if (bad == NESTED) str(b, "t.nest"), u32(b, DIT_GGUF_ARRAY), u32(b, DIT_GGUF_ARRAY), u64(b, 0);
  /* tensor infos */
  str(b, "a"), u32(b, bad == DIMS_0 ? 0 : bad == DIMS_5 ? 5 : bad == ZERO_DIM_HUGE ? 3 : 2);
  if (bad == ZERO_DIM_HUGE) u64(b, 0); /* no elements, yet 64000 x 2^56 overflows */
  u64(b, bad == NEG_DIM ? (uint64_t)-8 : bad == OVERFLOW_DIMS ? (uint64_t)1 << 40 : bad == ZERO_DIM_HUGE ? 64000 : 8);
  u64(b, bad == OVERFLOW_DIMS ? (uint64_t)1 << 40 : bad == ZERO_DIM_HUGE ? (uint64_t)1 << 56 : 2);
  if (bad == DIMS_5) u64(b, 1), u64(b, 1), u64(b, 1);
  u32(b, bad == UNKNOWN_TYPE ? 99 : bad == IQ_TYPE ? 16 : 0), u64(b, 0);
  char longname[80];
  memset(longname, 'n', 64), longname[64] = 0;
  str(b, bad == DUP_NAME ? "a" : bad == LONG_NAME ? longname : "b"), u32(b, 2);
  u64(b, bad == ROW_NOT_BLOCKS ? 48 : 64), u64(b, 3), u32(b, 8);
  u64(b, bad == OFFSET_WRONG ? 96 : bad == OFFSET_MISALIGNED ? 64 + 8 : bad == OVERLAP ? 0 : 64);
  str(b, "c"), u32(b, 1), u64(b, 4), u32(b, 1), u64(b, 64 + 224);
  pad32(b);
  /* data: a (64 bytes), b (3 rows of 2 blocks of 34 = 204, padded to 224), c (8) */
  for (int i = 0; i < 16; i++) {
    float v = (float)i;
    put(b, &v, 4);
  }
  float row[64];
  for (int r = 0; r < 3; r++) {
    unsigned char q[68];
    for (int i = 0; i < 64; i++) row[i] = (float)(i - 32) * (float)(r + 1) / 32.0f;
    dit_quant_row(DIT_Q8_0, row, q, 64);
    put(b, q, 68);
  }
  while (b->n % 32) put(b, "", 1);
  if (bad == TRUNC_DATA) return;
  put(b, "\x00\x3c\x00\x40\x00\x42\x00\x44", 8); /* 1, 2, 3, 4 in fp16 */
}

static void test_good(const dt_args *a) {
  (void)a;
  gb b = {0};
  build(&b, OK);
  dit_st_file *f = NULL;
  dit_error err = {0};
  dit_status s = dit_gguf_open_memory(b.p, b.n, "good.gguf", &f, &err);
  CHECK_MSG(s == DIT_OK, "%s", err.msg);
  if (s == DIT_OK) {
    CHECK(f->n_tensors == 3 && f->gguf && f->gguf->version == 3 && f->gguf->alignment == 32);
    const dit_st_tensor *ta = dit_st_find(f, "a"), *tb = dit_st_find(f, "b"), *tc = dit_st_find(f, "c");
    CHECK(ta && ta->dtype == DIT_F32 && ta->ndim == 2 && ta->shape[0] == 2 && ta->shape[1] == 8);
    CHECK(tb && tb->dtype == DIT_Q8_0 && tb->shape[0] == 3 && tb->shape[1] == 64 && tb->end - tb->begin == 204);
    CHECK(tc && tc->dtype == DIT_F16 && tc->ndim == 2 && tc->shape[0] == 2 && tc->shape[1] == 2); /* orig_shape */
    if (ta && tb) {
      float v;
      memcpy(&v, (const char *)ta->data + 4 * 9, 4);
      CHECK(v == 9.0f && tb->begin == 64);
      float row[64];
      dit_dequant_row(DIT_Q8_0, (const char *)tb->data + 68, row, 64);
      CHECK(row[0] > -2.01f && row[0] < -1.99f && row[63] > 1.9f);
    }
    const char *sv;
    uint64_t n, u;
    int64_t iv;
    double dv;
    CHECK(dit_gguf_str(dit_gguf_find(f, "general.architecture"), &sv, &n) && n == 4 && !memcmp(sv, "test", 4));
    CHECK(dit_gguf_uint(dit_gguf_find(f, "t.u8"), &u) && u == 7);
    CHECK(dit_gguf_int_at(dit_gguf_find(f, "t.i16"), 0, &iv) && iv == -2 && !dit_gguf_uint(dit_gguf_find(f, "t.i16"), &u));
    CHECK(dit_gguf_float_at(dit_gguf_find(f, "t.f64"), 0, &dv) && dv == 0.25);
    CHECK(dit_gguf_str_at(dit_gguf_find(f, "t.strings"), 2, &sv, &n) && n == 2 && !memcmp(sv, "zz", 2));
    CHECK(dit_gguf_str_at(dit_gguf_find(f, "t.strings"), 1, &sv, &n) && n == 0);
    CHECK(!dit_gguf_str_at(dit_gguf_find(f, "t.strings"), 3, &sv, &n) && !dit_gguf_find(f, "nope"));
  }
  dit_st_close(f);
  free(b.p);
}

static void test_bad(const dt_args *a) {
  (void)a;
  for (int k = 1; k < N_BAD; k++) {
    gb b = {0};
    build(&b, (enum bad)k);
    dit_st_file *f = NULL;
    dit_error err = {0};
    dit_status s = dit_gguf_open_memory(b.p, b.n, "bad.gguf", &f, &err);
    CHECK_MSG(s == expect[k].st && f == NULL, "case %d: status %d, want %d (%s)", k, s, expect[k].st, err.msg);
    CHECK_MSG(strstr(err.msg, expect[k].needle) != NULL, "case %d: message lacks \"%s\": %s", k, expect[k].needle,
              err.msg);
    printf("bad %2d -> %s\n", k, err.msg);
    dit_st_close(f);
    free(b.p);
  }
}

/* Every prefix of the good file fails cleanly (never a crash), the whole one opens. */
static void test_truncations(const dt_args *a) {
  (void)a;
  gb b = {0};
  build(&b, OK);
  int ok = 0;
  for (size_t n = 0; n <= b.n; n++) {
    unsigned char *copy = malloc(n ? n : 1);
    memcpy(copy, b.p, n);
    dit_st_file *f = NULL;
    dit_error err = {0};
    if (dit_gguf_open_memory(copy, n, "cut.gguf", &f, &err) == DIT_OK) ok++;
    dit_st_close(f);
    free(copy);
  }
  CHECK_MSG(ok == 1, "%d prefixes opened (only the whole file should)", ok);
  free(b.p);
}

typedef struct fill_src {
  const void *data[2];
} fill_src;

static dit_status fill(void *user, size_t i, void *dst, size_t nbytes, dit_error *err) {
  (void)err;
  memcpy(dst, ((fill_src *)user)->data[i], nbytes);
  return DIT_OK;
}

/* dit_gguf_write then dit_weights_open: the same metadata, shapes, dtypes and bytes; the
 * output refuses to replace a file unless asked. */
static void test_round_trip(const dt_args *a) {
  char path[4200];
  snprintf(path, sizeof path, "%s/rt.gguf", a->tmp);
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && rm -f '%s'", a->tmp, path);
  CHECK(dt_run(cmd, NULL) == 0);
  float w[2 * 256], x[7];
  unsigned char q[2 * 144];
  for (int i = 0; i < 512; i++) w[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  for (int i = 0; i < 7; i++) x[i] = (float)i;
  dit_quant_row(DIT_Q4_K, w, q, 512);
  const char *names[] = {"one", "two"};
  uint32_t u = 5;
  const dit_gguf_wkv kv[] = {{"general.architecture", DIT_GGUF_STRING, 0, 0, "rt"},
                             {"rt.u32", DIT_GGUF_U32, 0, 0, &u},
                             {"rt.names", DIT_GGUF_ARRAY, DIT_GGUF_STRING, 2, names}};
  const dit_gguf_wtensor t[] = {{"w.weight", DIT_Q4_K, 2, {2, 256}}, {"x", DIT_F32, 1, {7}}};
  fill_src src = {{q, x}};
  dit_error err = {0};
  CHECK_MSG(dit_gguf_write(path, false, kv, 3, t, 2, fill, &src, &err) == DIT_OK, "%s", err.msg);
  CHECK(dit_gguf_write(path, false, kv, 3, t, 2, fill, &src, &err) == DIT_ERR_IO && strstr(err.msg, "exists"));
  dit_weights *ws = NULL;
  dit_status s = dit_weights_open(path, NULL, &ws, &err);
  CHECK_MSG(s == DIT_OK, "%s", err.msg);
  if (s != DIT_OK) return;
  const dit_st_tensor *tw = dit_weights_find(ws, "w.weight"), *tx = dit_weights_find(ws, "x");
  CHECK(tw && tw->dtype == DIT_Q4_K && tw->shape[0] == 2 && tw->shape[1] == 256 && !memcmp(tw->data, q, sizeof q));
  CHECK(tx && tx->dtype == DIT_F32 && tx->ndim == 1 && !memcmp(tx->data, x, sizeof x) && tx->begin == 288);
  const dit_st_file *f = ws->files[0];
  const char *sv;
  uint64_t n, uv;
  CHECK(dit_gguf_uint(dit_gguf_find(f, "rt.u32"), &uv) && uv == 5);
  CHECK(dit_gguf_str_at(dit_gguf_find(f, "rt.names"), 1, &sv, &n) && n == 3 && !memcmp(sv, "two", 3));
  CHECK(f->gguf->data_offset % 32 == 0);
  dit_weights_close(ws);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_good, test_bad, test_truncations, test_round_trip};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
