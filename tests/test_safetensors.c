/* The safetensors reader against hand-made files: one bad file per rule of
 * RELIABILITY.md (each must fail with DIT_ERR_FORMAT and a message naming the problem,
 * both from memory and from a file), good edge cases, sharded indexes and the weight
 * table. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "io/safetensors.h"
#include "testing.h"

static const dt_args *g_args; /* set once in main */

/* Writes the 8-byte little-endian header length, the header and data_len pattern bytes
 * (byte i = i*7+3) into a malloc'd buffer. */
static unsigned char *build(const char *header, size_t data_len, size_t *len) {
  size_t n = strlen(header);
  *len = 8 + n + data_len;
  unsigned char *b = malloc(*len);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)n >> (8 * i));
  memcpy(b + 8, header, n);
  for (size_t i = 0; i < data_len; i++) b[8 + n + i] = (unsigned char)(i * 7 + 3);
  return b;
}

static void write_file(const char *path, const void *b, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  fwrite(b, 1, len, f);
  fclose(f);
}

static const char *tmp_path(char *buf, size_t len, const char *name) { return dt_path(buf, len, g_args->tmp, name); }

/* Expects buf to be rejected with `want` and a message containing `sub`, from memory and
 * from a file. */
static void expect_bad(const char *label, const void *buf, size_t len, const dit_st_options *opt, dit_status want,
                       const char *sub) {
  dit_error err = {0};
  dit_st_file *f = (dit_st_file *)1;
  dit_status s = dit_st_open_memory(buf, len, label, opt, &f, &err);
  CHECK_MSG(s == want && f == NULL, "%s: status %d (want %d): %s", label, s, want, err.msg);
  if (getenv("DT_VERBOSE")) printf("%-28s %s\n", label, err.msg);
  CHECK_MSG(strstr(err.msg, sub) != NULL, "%s: message \"%s\" lacks \"%s\"", label, err.msg, sub);
  char path[4096];
  tmp_path(path, sizeof path, "bad.safetensors");
  write_file(path, buf, len);
  dit_error_clear(&err);
  s = dit_st_open(path, opt, &f, &err);
  CHECK_MSG(s == want && f == NULL, "%s (file): status %d: %s", label, s, err.msg);
  CHECK_MSG(strstr(err.msg, sub) && strstr(err.msg, path), "%s (file): message \"%s\" lacks \"%s\" or the path",
            label, err.msg, sub);
}

typedef struct bad_case {
  const char *label;
  const char *header;
  size_t data_len;
  const char *sub; /* expected in the message */
} bad_case;

static const bad_case k_bad[] = {
    {"invalid utf-8", "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "UTF-8"},
    {"overlong utf-8", "{\"a\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "UTF-8"},
    {"not an object", "[1, 2]", 0, "'{'"},
    {"empty header", "", 0, "'{'"},
    {"only spaces", "    ", 0, "'{'"},
    {"bad json", "{\"a\": ", 0, "invalid JSON"},
    {"trailing garbage", "{} x", 0, "invalid JSON"},
    {"duplicate names",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, "duplicate"},
    {"metadata not object", "{\"__metadata__\":[1]}", 0, "__metadata__"},
    {"metadata value not string", "{\"__metadata__\":{\"format\":1}}", 0, "__metadata__"},
    {"entry not object", "{\"a\":[1]}", 0, "not a JSON object"},
    {"missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype"},
    {"unknown dtype", "{\"a\":{\"dtype\":\"F12\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype"},
    {"lowercase dtype", "{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype"},
    {"missing shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "shape"},
    {"negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape dimension 0"},
    {"float dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, "shape dimension 0"},
    {"string dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,\"1\"],\"data_offsets\":[0,8]}}", 8, "shape dimension 1"},
    {"huge dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4,
     "invalid JSON"},
    {"numel overflow",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4611686018427387904],\"data_offsets\":[0,4]}}", 4,
     "overflows"},
    {"bytes overflow", "{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}", 8,
     "overflows"},
    {"missing offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets"},
    {"three offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, "exactly two"},
    {"one offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4, "exactly two"},
    {"negative offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, "non-negative"},
    {"float offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}", 4, "non-negative"},
    {"end before begin", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "end before"},
    {"size mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "needs 8 bytes"},
    {"bf16 size mismatch", "{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]}}", 4, "needs 6 bytes"},
    {"hole at start", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "hole"},
    {"hole between",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
     12, "hole"},
    {"overlap",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     12, "overlap"},
    {"same range twice",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
     4, "overlap"},
    {"trailing bytes", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "trailing"},
    {"data past end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "past the end"},
    {"bytes but no tensors", "{}", 4, "trailing"},
    {"metadata only with bytes", "{\"__metadata__\":{\"format\":\"pt\"}}", 1, "trailing"},
};

static void test_bad_table(void) {
  for (size_t i = 0; i < sizeof k_bad / sizeof *k_bad; i++) {
    size_t len;
    unsigned char *b = build(k_bad[i].header, k_bad[i].data_len, &len);
    expect_bad(k_bad[i].label, b, len, NULL, DIT_ERR_FORMAT, k_bad[i].sub);
    free(b);
  }
}

/* Cases whose bytes cannot be written as a C string header. */
static void test_bad_raw(void) {
  unsigned char b[64] = {0};
  expect_bad("empty file", b, 0, NULL, DIT_ERR_FORMAT, "too short");
  expect_bad("7 bytes", b, 7, NULL, DIT_ERR_FORMAT, "too short");
  /* header length 200 MB: over the default cap, message explains how to raise it */
  uint64_t n = 200ull << 20;
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
  expect_bad("header over cap", b, 16, NULL, DIT_ERR_FORMAT, "126 MB");
  expect_bad("header over cap (how)", b, 16, NULL, DIT_ERR_FORMAT, "max_header_bytes");
  /* with the cap raised it is simply past the end of the file */
  dit_st_options big = {.max_header_bytes = SIZE_MAX};
  expect_bad("header past end", b, 16, &big, DIT_ERR_FORMAT, "past the end");
  /* 8 + N overflows u64 */
  for (int i = 0; i < 8; i++) b[i] = 0xff;
  expect_bad("header length overflow", b, 16, &big, DIT_ERR_FORMAT, "past the end");
  b[0] = 0xf9; /* N = 2^64 - 7: 8 + N wraps to 1 */
  expect_bad("header length wrap", b, 16, &big, DIT_ERR_FORMAT, "past the end");
  /* NUL inside the header */
  const char h[] = "{\"a\":1}\0 ";
  size_t hn = sizeof h - 1;
  memset(b, 0, sizeof b);
  b[0] = (unsigned char)hn;
  memcpy(b + 8, h, hn);
  expect_bad("nul in header", b, 8 + hn, NULL, DIT_ERR_FORMAT, "NUL");
  /* too many dimensions for this engine: unsupported, not a crash */
  size_t len;
  unsigned char *r = build("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, &len);
  expect_bad("rank 9", r, len, NULL, DIT_ERR_UNSUPPORTED, "dimensions");
  free(r);
}

static void test_not_regular(void) {
  char path[4096];
  dit_error err = {0};
  dit_st_file *f;
  tmp_path(path, sizeof path, "adir.safetensors");
  mkdir(path, 0777);
  CHECK(dit_st_open(path, NULL, &f, &err) == DIT_ERR_FORMAT && strstr(err.msg, "directory"));
  tmp_path(path, sizeof path, "fifo.safetensors");
  unlink(path);
  if (mkfifo(path, 0666) == 0) {
    CHECK(dit_st_open(path, NULL, &f, &err) == DIT_ERR_FORMAT && strstr(err.msg, "FIFO"));
  }
  tmp_path(path, sizeof path, "does-not-exist.safetensors");
  CHECK(dit_st_open(path, NULL, &f, &err) == DIT_ERR_IO && strstr(err.msg, path));
}

static void test_good_edges(void) {
  dit_error err = {0};
  dit_st_file *f = NULL;
  size_t len;
  /* leading whitespace, trailing spaces, metadata, zero-size tensors (also at the end),
   * a rank-0 scalar, and an F32 that starts at an odd offset */
  const char *h =
      " \n\t{\"__metadata__\":{\"format\":\"pt\",\"note\":\"h\\u00e9\"},"
      "\"z0\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
      "\"byte\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
      "\"odd\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1,9]},"
      "\"scalar\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[9,17]},"
      "\"zend\":{\"dtype\":\"BF16\",\"shape\":[4,0],\"data_offsets\":[17,17]}}   ";
  unsigned char *b = build(h, 17, &len);
  dit_status s = dit_st_open_memory(b, len, "good", NULL, &f, &err);
  CHECK_MSG(s == DIT_OK, "good file rejected: %s", err.msg);
  if (s == DIT_OK) {
    CHECK(f->n_tensors == 5);
    CHECK(f->metadata && json_is_string(json_object_get(f->metadata, "format")));
    const dit_st_tensor *t = dit_st_find(f, "scalar");
    CHECK(t && t->ndim == 0 && t->dtype == DIT_I64 && t->end - t->begin == 8);
    t = dit_st_find(f, "z0");
    CHECK(t && t->ndim == 2 && t->shape[0] == 0 && t->shape[1] == 3 && t->begin == t->end);
    CHECK(dit_st_find(f, "zend") != NULL);
    CHECK(dit_st_find(f, "nope") == NULL);
    CHECK(dit_st_find(f, "__metadata__") == NULL);
    dit_st_close(f);
  }
  /* the same through a file and the weights API: the odd F32 is copied to an aligned
   * buffer and reads back the stored bytes */
  char path[4096];
  tmp_path(path, sizeof path, "edges.safetensors");
  write_file(path, b, len);
  dit_weights *w;
  s = dit_weights_open(path, NULL, &w, &err);
  CHECK_MSG(s == DIT_OK, "weights open: %s", err.msg);
  if (s == DIT_OK) {
    const dit_st_tensor *t = dit_weights_find(w, "odd");
    dit_tensor dt;
    CHECK(t && dit_weights_tensor(w, t, &dt, &err) == DIT_OK);
    if (t) {
      CHECK(((uintptr_t)dt.data % 4) == 0 && dt.ndim == 1 && dt.shape[0] == 2 && dt.dtype == DIT_F32);
      CHECK(memcmp(dt.data, t->data, 8) == 0);
      CHECK(((const unsigned char *)dt.data)[0] == (unsigned char)(1 * 7 + 3));
      CHECK(w->n_owned == 1);
    }
    t = dit_weights_find(w, "scalar");
    CHECK(t && dit_weights_tensor(w, t, &dt, &err) == DIT_OK && dt.ndim == 0 && ((uintptr_t)dt.data % 8) == 0);
    dit_weights_close(w);
  }
  /* fixture loader reads the odd-offset tensor as floats, and the scalar as int32 */
  float *fv;
  int64_t shape[8];
  int nd;
  CHECK(dt_load_f32(path, "odd", &fv, shape, &nd) == 0 && nd == 1 && shape[0] == 2);
  free(fv);
  free(b);
  /* an empty header "{}" with no data is a valid file with no tensors */
  b = build("{}", 0, &len);
  s = dit_st_open_memory(b, len, "empty", NULL, &f, &err);
  CHECK(s == DIT_OK && f->n_tensors == 0);
  if (s == DIT_OK) dit_st_close(f);
  free(b);
}

/* The fixture files validate, and reading them gives the documented shapes. */
static void test_fixtures(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/models/zimage-tiny/components.safetensors", g_args->data);
  dit_error err = {0};
  dit_st_file *f;
  dit_status s = dit_st_open(path, NULL, &f, &err);
  CHECK_MSG(s == DIT_OK, "%s", err.msg);
  if (s != DIT_OK) return;
  const dit_st_tensor *t = dit_st_find(f, "dit_x0");
  CHECK(t && t->dtype == DIT_F32 && t->ndim == 4 && t->shape[0] == 16 && t->shape[2] == 16 && t->shape[3] == 12);
  dit_st_close(f);
  float *x;
  int64_t shape[8];
  int nd;
  CHECK(dt_load_f32(path, "dit_t", &x, shape, &nd) == 0 && nd == 1 && shape[0] == 2);
  if (x) CHECK(x[0] == 0.7f && x[1] == 0.25f);
  free(x);
  int32_t *ids;
  CHECK(dt_load_i32(path, "te_input_ids", &ids, shape, &nd) == 0 && nd == 2 && shape[1] == 64);
  if (ids) CHECK(ids[0] > 0);
  free(ids);
  CHECK(dt_load_f32(path, "no_such_tensor", &x, shape, &nd) == -1 && x == NULL);
  snprintf(path, sizeof path, "%s/models/zimage-tiny/transformer", g_args->data);
  dit_weights *w;
  s = dit_weights_open(path, NULL, &w, &err);
  CHECK_MSG(s == DIT_OK && w->n_tensors > 0 && w->n_files == 1, "%s", err.msg);
  if (s == DIT_OK) dit_weights_close(w);
}

/* ---- random mutations: never a crash, only OK / FORMAT / UNSUPPORTED, and an accepted
 * file always has every tensor inside the buffer with the byte size its shape implies ---- */

static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void check_accepted(const dit_st_file *f, const unsigned char *buf, size_t len, int *bad) {
  for (size_t i = 0; i < f->n_tensors; i++) {
    const dit_st_tensor *t = &f->tensors[i];
    uint64_t numel = 1;
    for (int k = 0; k < t->ndim; k++) numel *= (uint64_t)t->shape[k];
    const unsigned char *p = t->data;
    if (t->end - t->begin != numel * dit_dtype_size(t->dtype) || p < buf || p + (t->end - t->begin) > buf + len)
      (*bad)++;
  }
}

static void mutate_run(const unsigned char *orig, size_t len, int iters, uint64_t seed) {
  unsigned char *b = malloc(len);
  int bad_status = 0, bad_accept = 0;
  uint64_t st = seed;
  for (int it = 0; it < iters; it++) {
    memcpy(b, orig, len);
    size_t n = len;
    int flips = 1 + (int)(xorshift(&st) % 4);
    for (int k = 0; k < flips; k++) {
      /* mostly the header (where the rules are), sometimes anywhere */
      uint64_t hl = 0;
      for (int i = 7; i >= 0; i--) hl = (hl << 8) | orig[i];
      size_t span = (xorshift(&st) % 4) ? (size_t)(hl + 8 < len ? hl + 8 : len) : len;
      size_t pos = (size_t)(xorshift(&st) % span);
      static const unsigned char interesting[] = {'0', '1', '9', '-', '[', ']', '{', '}', '"', ',', ':', 0, 0xff, ' '};
      b[pos] = (xorshift(&st) & 1) ? (unsigned char)xorshift(&st) : interesting[xorshift(&st) % sizeof interesting];
    }
    if (xorshift(&st) % 8 == 0) n = (size_t)(xorshift(&st) % (len + 1)); /* truncation */
    dit_error err = {0};
    dit_st_file *f;
    dit_status s = dit_st_open_memory(b, n, "mutant", NULL, &f, &err);
    if (s == DIT_OK) {
      check_accepted(f, b, n, &bad_accept);
      dit_st_close(f);
    } else if (s != DIT_ERR_FORMAT && s != DIT_ERR_UNSUPPORTED) {
      bad_status++;
    } else if (!err.msg[0]) {
      bad_status++;
    }
  }
  CHECK_MSG(bad_status == 0, "%d mutants gave an unexpected status or no message", bad_status);
  CHECK_MSG(bad_accept == 0, "%d accepted mutants have tensors outside the buffer", bad_accept);
  free(b);
}

static void test_mutations(void) {
  const char *h =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[12,16]},"
      "\"c\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[16,16]},"
      "\"d\":{\"dtype\":\"I64\",\"shape\":[1,1],\"data_offsets\":[16,24]}}";
  size_t len;
  unsigned char *b = build(h, 24, &len);
  mutate_run(b, len, 20000, 0x1234567u);
  free(b);
  char path[4096];
  snprintf(path, sizeof path, "%s/models/zimage-tiny/components.safetensors", g_args->data);
  FILE *f = fopen(path, "rb");
  if (!f) return;
  unsigned char *fx = malloc(1 << 20);
  size_t n = fread(fx, 1, 1 << 20, f);
  fclose(f);
  mutate_run(fx, n, 3000, 0x9abcdefu);
  free(fx);
}

/* ---- sharded sets ---- */

static void write_st(const char *dir, const char *name, const char *header, size_t data_len) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  size_t len;
  unsigned char *b = build(header, data_len, &len);
  write_file(path, b, len);
  free(b);
}

static void write_text(const char *dir, const char *name, const char *text) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  write_file(path, text, strlen(text));
}

/* Opens dir/index; expects `want` and `sub` in the message (sub NULL when ok). */
static void expect_index(const char *dir, const char *index, dit_status want, const char *sub) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, index);
  dit_error err = {0};
  dit_weights *w = NULL;
  dit_status s = dit_weights_open(path, NULL, &w, &err);
  CHECK_MSG(s == want, "%s: status %d (want %d): %s", index, s, want, err.msg);
  if (getenv("DT_VERBOSE")) printf("%-36s %s\n", index, err.msg);
  if (sub) CHECK_MSG(strstr(err.msg, sub) != NULL, "%s: message \"%s\" lacks \"%s\"", index, err.msg, sub);
  if (s == DIT_OK) {
    CHECK(w->n_files == 2 && w->n_tensors == 3);
    CHECK(dit_weights_find(w, "x") && dit_weights_find(w, "y") && dit_weights_find(w, "z"));
    const dit_st_tensor *t = dit_weights_find(w, "z");
    CHECK(t && t->shape[0] == 3 && t->dtype == DIT_BF16);
    dit_weights_close(w);
  } else {
    CHECK(w == NULL);
  }
}

static void test_sharded(const dt_args *a) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/shards", a->tmp);
  mkdir(dir, 0777);
  write_st(dir, "s1.safetensors",
           "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
           12);
  write_st(dir, "s2.safetensors", "{\"z\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]}}", 6);
  write_st(dir, "s3.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
  write_st(dir, "bad.safetensors", "{\"z\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]}}", 4);
  char sub[4352];
  snprintf(sub, sizeof sub, "%s/subdir", dir);
  mkdir(sub, 0777);
  snprintf(sub, sizeof sub, "%s/fifo", dir);
  unlink(sub);
  bool have_fifo = mkfifo(sub, 0666) == 0;
  write_text(dir, "good.safetensors.index.json",
             "{\"metadata\":{\"total_size\":18},\"weight_map\":{\"x\":\"s1.safetensors\",\"y\":\"s1.safetensors\","
             "\"z\":\"s2.safetensors\"}}");
  expect_index(dir, "good.safetensors.index.json", DIT_OK, NULL);
  write_text(dir, "dotdot.safetensors.index.json", "{\"weight_map\":{\"x\":\"../x.safetensors\"}}");
  expect_index(dir, "dotdot.safetensors.index.json", DIT_ERR_FORMAT, "../x.safetensors");
  write_text(dir, "dotdot2.safetensors.index.json", "{\"weight_map\":{\"x\":\"..\"}}");
  expect_index(dir, "dotdot2.safetensors.index.json", DIT_ERR_FORMAT, "plain file name");
  write_text(dir, "abs.safetensors.index.json", "{\"weight_map\":{\"x\":\"/etc/passwd\"}}");
  expect_index(dir, "abs.safetensors.index.json", DIT_ERR_FORMAT, "plain file name");
  write_text(dir, "slash.safetensors.index.json", "{\"weight_map\":{\"x\":\"subdir/s1.safetensors\"}}");
  expect_index(dir, "slash.safetensors.index.json", DIT_ERR_FORMAT, "plain file name");
  write_text(dir, "dir.safetensors.index.json", "{\"weight_map\":{\"x\":\"subdir\"}}");
  expect_index(dir, "dir.safetensors.index.json", DIT_ERR_FORMAT, "directory");
  if (have_fifo) {
    write_text(dir, "fifo.safetensors.index.json", "{\"weight_map\":{\"x\":\"fifo\"}}");
    expect_index(dir, "fifo.safetensors.index.json", DIT_ERR_FORMAT, "FIFO");
  }
  write_text(dir, "missing.safetensors.index.json",
             "{\"weight_map\":{\"x\":\"s1.safetensors\",\"y\":\"s1.safetensors\",\"z\":\"nope.safetensors\"}}");
  expect_index(dir, "missing.safetensors.index.json", DIT_ERR_FORMAT, "is missing");
  write_text(dir, "dup.safetensors.index.json",
             "{\"weight_map\":{\"x\":\"s1.safetensors\",\"y\":\"s1.safetensors\",\"w\":\"s3.safetensors\"}}");
  expect_index(dir, "dup.safetensors.index.json", DIT_ERR_FORMAT, "two shards");
  write_text(dir, "moved.safetensors.index.json",
             "{\"weight_map\":{\"x\":\"s1.safetensors\",\"y\":\"s2.safetensors\",\"z\":\"s2.safetensors\"}}");
  expect_index(dir, "moved.safetensors.index.json", DIT_ERR_FORMAT, "listed for shard s2.safetensors but found in");
  write_text(dir, "absent.safetensors.index.json",
             "{\"weight_map\":{\"x\":\"s1.safetensors\",\"y\":\"s1.safetensors\",\"z\":\"s2.safetensors\","
             "\"q\":\"s2.safetensors\"}}");
  expect_index(dir, "absent.safetensors.index.json", DIT_ERR_FORMAT, "\"q\"");
  write_text(dir, "unlisted.safetensors.index.json", "{\"weight_map\":{\"x\":\"s1.safetensors\"}}");
  expect_index(dir, "unlisted.safetensors.index.json", DIT_ERR_FORMAT, "not in the index");
  write_text(dir, "badshard.safetensors.index.json", "{\"weight_map\":{\"z\":\"bad.safetensors\"}}");
  expect_index(dir, "badshard.safetensors.index.json", DIT_ERR_FORMAT, "bad.safetensors");
  write_text(dir, "nomap.safetensors.index.json", "{\"metadata\":{}}");
  expect_index(dir, "nomap.safetensors.index.json", DIT_ERR_FORMAT, "weight_map");
  write_text(dir, "notstr.safetensors.index.json", "{\"weight_map\":{\"x\":1}}");
  expect_index(dir, "notstr.safetensors.index.json", DIT_ERR_FORMAT, "not a string");
  write_text(dir, "dupkey.safetensors.index.json",
             "{\"weight_map\":{\"x\":\"s1.safetensors\",\"x\":\"s3.safetensors\"}}");
  expect_index(dir, "dupkey.safetensors.index.json", DIT_ERR_FORMAT, "duplicate");
  write_text(dir, "empty.safetensors.index.json", "{\"weight_map\":{}}");
  expect_index(dir, "empty.safetensors.index.json", DIT_ERR_FORMAT, "empty");
  /* a folder with one standard index is opened through it */
  char fold[4096];
  snprintf(fold, sizeof fold, "%s/shards2", a->tmp);
  mkdir(fold, 0777);
  write_st(fold, "model-1.safetensors",
           "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
           12);
  write_st(fold, "model-2.safetensors", "{\"z\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]}}", 6);
  write_text(fold, "model.safetensors.index.json",
             "{\"weight_map\":{\"x\":\"model-1.safetensors\",\"y\":\"model-1.safetensors\","
             "\"z\":\"model-2.safetensors\"}}");
  dit_error err = {0};
  dit_weights *w;
  dit_status s = dit_weights_open(fold, NULL, &w, &err);
  CHECK_MSG(s == DIT_OK && w->n_files == 2 && w->n_tensors == 3, "folder with index: %s", err.msg);
  if (s == DIT_OK) dit_weights_close(w);
  /* a folder with two unrelated .safetensors and no index is ambiguous */
  s = dit_weights_open(dir, NULL, &w, &err);
  CHECK(s == DIT_ERR_FORMAT);
}

/* ---- weight table ---- */

/* Writes buffer b (len bytes, freed here) to path and opens it as a weight set (NULL, with
 * a failed check, when it does not open). */
static dit_weights *open_written(const char *path, unsigned char *b, size_t len) {
  write_file(path, b, len);
  free(b);
  dit_error err = {0};
  dit_weights *w = NULL;
  dit_status s = dit_weights_open(path, NULL, &w, &err);
  CHECK_MSG(s == DIT_OK, "%s", err.msg);
  return s == DIT_OK ? w : NULL;
}

static void test_wtable(const dt_args *a) {
  char path[4096];
  snprintf(path, sizeof path, "%s/wt.safetensors", a->tmp);
  size_t len;
  unsigned char *b = build(
      "{\"model.l.w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
      "\"model.l.b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[12,24]},"
      "\"lm_head.weight\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[24,26]}}",
      26, &len);
  dit_error err = {0};
  dit_weights *w = open_written(path, b, len);
  if (!w) return;
  dit_status s;
  const char *const ignore[] = {"lm_head.", NULL};
  dit_tensor tw = {0}, tb = {0}, topt = {0}, tq = {0};
  const int64_t s23[] = {2, 3}, s32[] = {3, 2}, s3[] = {3}, s4[] = {4};

  dit_wtable t;
  dit_wtable_init(&t);
  dit_wtable_add(&t, &tw, false, 2, s23, "l.%s", "w");
  dit_wtable_add(&t, &tb, false, 1, s3, "l.b");
  dit_wtable_add(&t, &topt, true, 1, s4, "l.optional");
  s = dit_wtable_bind(&t, w, "model.", ignore, &err);
  CHECK_MSG(s == DIT_OK, "good table: %s", err.msg);
  CHECK(tw.data && tw.dtype == DIT_BF16 && tw.ndim == 2 && tw.shape[1] == 3);
  CHECK(tb.data && tb.dtype == DIT_F32 && ((uintptr_t)tb.data % 4) == 0);
  CHECK(topt.data == NULL);
  dit_wtable_free(&t);

  /* leading size-1 dims may be missing or extra (ggml's writers drop them): bound at the
   * table's shape */
  const int64_t s1x3[] = {1, 3}, s1x1x2x3[] = {1, 1, 2, 3};
  dit_wtable_init(&t);
  dit_wtable_add(&t, &tw, false, 4, s1x1x2x3, "l.w");
  dit_wtable_add(&t, &tb, false, 2, s1x3, "l.b");
  s = dit_wtable_bind(&t, w, "model.", ignore, &err);
  CHECK_MSG(s == DIT_OK, "leading ones: %s", err.msg);
  CHECK(tw.ndim == 4 && tw.shape[0] == 1 && tw.shape[2] == 2 && tw.shape[3] == 3 && tb.ndim == 2 && tb.shape[1] == 3);
  CHECK(dit_tensor_is_contiguous(&tw) && dit_tensor_is_contiguous(&tb));
  dit_wtable_free(&t);

  /* missing, mis-shaped and extra, each named */
  dit_wtable_init(&t);
  dit_wtable_add(&t, &tw, false, 2, s32, "l.w");
  dit_wtable_add(&t, &tq, false, 1, s4, "l.q");
  s = dit_wtable_bind(&t, w, "model.", NULL, &err);
  CHECK(s == DIT_ERR_FORMAT);
  CHECK_MSG(strstr(err.msg, "missing: model.l.q [4]"), "%s", err.msg);
  CHECK_MSG(strstr(err.msg, "model.l.w expected [3, 2] found [2, 3]"), "%s", err.msg);
  CHECK_MSG(strstr(err.msg, "unexpected: lm_head.weight, model.l.b"), "%s", err.msg);
  dit_wtable_free(&t);

  /* without the prefix nothing matches */
  dit_wtable_init(&t);
  dit_wtable_add(&t, &tw, false, 2, s23, "l.w");
  s = dit_wtable_bind(&t, w, "", ignore, &err);
  CHECK(s == DIT_ERR_FORMAT && strstr(err.msg, "missing: l.w") && strstr(err.msg, "model.l.w"));
  dit_wtable_free(&t);

  /* a bad add is reported by bind */
  dit_wtable_init(&t);
  char longname[300];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  dit_wtable_add(&t, &tw, false, 2, s23, "%s", longname);
  dit_wtable_add(&t, &tw, false, 2, s23, "l.w");
  s = dit_wtable_bind(&t, w, "model.", ignore, &err);
  CHECK(s == DIT_ERR_INTERNAL && strstr(err.msg, "too long"));
  dit_wtable_free(&t);

  /* many missing: the first few are named, then a count */
  dit_wtable_init(&t);
  for (int i = 0; i < 10; i++) dit_wtable_add(&t, &tq, false, 1, s4, "blocks.%d.w", i);
  s = dit_wtable_bind(&t, w, "model.", (const char *const[]){"model.", "lm_head.", NULL}, &err);
  CHECK_MSG(s == DIT_ERR_FORMAT && strstr(err.msg, "10 missing") && strstr(err.msg, "and 6 more"), "%s", err.msg);
  dit_wtable_free(&t);
  dit_weights_close(w);
}

/* Scaled fp8 files: a matrix keeps its fp8 codes with the one-element scale beside it (input
 * scales and ComfyUI's "scaled_fp8" marker accepted, unused); a 1-D fp8 tensor becomes F32
 * values times its scale; a scale per channel and a non-finite scale are refused by name. */
static void test_fp8_scales(const dt_args *a) {
  char path[4096];
  snprintf(path, sizeof path, "%s/fp8.safetensors", a->tmp);
  const char *h = "{\"a.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,4],\"data_offsets\":[0,8]},"
                  "\"a.scale_weight\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]},"
                  "\"a.scale_input\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[12,16]},"
                  "\"scaled_fp8\":{\"dtype\":\"F8_E4M3\",\"shape\":[0],\"data_offsets\":[16,16]},"
                  "\"b.weight\":{\"dtype\":\"F8_E5M2\",\"shape\":[2,4],\"data_offsets\":[16,24]},"
                  "\"b.weight_scale\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
                  "\"c.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,4],\"data_offsets\":[32,40]},"
                  "\"c.weight_scale\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[40,44]},"
                  "\"n.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[44,48]},"
                  "\"n.weight_scale\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[48,50]}}";
  size_t len;
  unsigned char *b = build(h, 50, &len), *d = b + 8 + strlen(h);
  const float half = 0.5f, inf = INFINITY;
  const uint8_t codes[4] = {0x38, 0x40, 0xb8, 0x7e}; /* e4m3 1, 2, -1, 448 */
  memcpy(d + 8, &half, 4);
  memcpy(d + 40, &inf, 4);
  memcpy(d + 44, codes, 4);
  d[48] = 0x40, d[49] = 0x40; /* bf16 3.0 */
  dit_error err = {0};
  dit_weights *w = open_written(path, b, len);
  if (!w) return;
  dit_status s;
  const int64_t s24[] = {2, 4}, s4[] = {4};
  dit_tensor ta = {0}, tn = {0}, tb = {0}, tc = {0};
  dit_wtable t;
  dit_wtable_init(&t);
  dit_wtable_add(&t, &ta, false, 2, s24, "a.weight");
  dit_wtable_add(&t, &tn, false, 1, s4, "n.weight");
  s = dit_wtable_bind(&t, w, "", (const char *const[]){"b.", "c.", NULL}, &err);
  CHECK_MSG(s == DIT_OK, "fp8 table: %s", err.msg);
  CHECK(ta.dtype == DIT_F8_E4M3 && dit_tensor_scale(&ta) == 0.5f);
  const float *nf = tn.data;
  CHECK(tn.dtype == DIT_F32 && nf && nf[0] == 3.0f && nf[1] == 6.0f && nf[2] == -3.0f && nf[3] == 1344.0f);
  dit_wtable_free(&t);
  dit_wtable_init(&t);
  dit_wtable_add(&t, &tb, false, 2, s24, "b.weight");
  s = dit_wtable_bind(&t, w, "", (const char *const[]){"a.", "c.", "n.", "scaled_fp8", NULL}, &err);
  CHECK_MSG(s == DIT_ERR_UNSUPPORTED && strstr(err.msg, "b.weight_scale") && strstr(err.msg, "one scale per tensor"),
            "%s", err.msg);
  dit_wtable_free(&t);
  dit_wtable_init(&t);
  dit_wtable_add(&t, &tc, false, 2, s24, "c.weight");
  s = dit_wtable_bind(&t, w, "", (const char *const[]){"a.", "b.", "n.", NULL}, &err);
  CHECK_MSG(s == DIT_ERR_FORMAT && strstr(err.msg, "c.weight_scale") && strstr(err.msg, "finite"), "%s", err.msg);
  dit_wtable_free(&t);
  dit_weights_close(w);
}

/* Opens zimage-tiny's transformer and applies r: the status, and the message's needle. */
static dit_weights *remap_case(const dit_wremap *r, dit_status want, const char *needle) {
  char path[4096];
  snprintf(path, sizeof path, "%s/models/zimage-tiny/transformer", g_args->data);
  dit_weights *w = NULL;
  dit_error err = {0};
  if (dit_weights_open(path, NULL, &w, &err) != DIT_OK) {
    CHECK_MSG(0, "%s", err.msg);
    return NULL;
  }
  dit_status s = dit_weights_remap(w, r, &err);
  CHECK_MSG(s == want, "remap: status %d, want %d (%s)", s, want, err.msg);
  if (needle) CHECK_MSG(strstr(err.msg, needle) != NULL, "remap message lacks \"%s\": %s", needle, err.msg);
  if (s != DIT_OK) {
    printf("remap -> %s\n", err.msg);
    dit_weights_close(w);
    return NULL;
  }
  return w;
}

static void test_remap(void) {
  /* prefix, renames (every occurrence, in order), a split in row ranges, a drop */
  static const dit_wrename ren[] = {{"layers.", "blk.", NULL}, {"blk.0.", "first.", NULL}};
  static const dit_wsplit sp[] = {{".attention.to_out.0.weight", 2, {".oa", ".ob"}, NULL, 0}};
  static const char *const drop[] = {"x_pad_token", NULL};
  dit_wremap r = {"noise_", ren, 2, sp, 1, drop, NULL};
  dit_weights *w = remap_case(&r, DIT_OK, NULL);
  if (w) {
    const dit_st_tensor *a = dit_weights_find(w, "first.attention.to_out.0.weight");
    CHECK(a == NULL && dit_weights_find(w, "x_pad_token") == NULL);
    const dit_st_tensor *p0 = dit_weights_find(w, "first.oa"), *p1 = dit_weights_find(w, "first.ob");
    const dit_st_tensor *nr = dit_weights_find(w, "refiner.0.attention.to_q.weight"); /* "noise_" stripped */
    CHECK(p0 && p1 && nr && dit_weights_find(w, "blk.1.attention.to_q.weight"));
    if (p0 && p1) {
      CHECK(p0->shape[0] == 64 && p1->shape[0] == 64 && p0->shape[1] == 128);
      CHECK((const char *)p1->data == (const char *)p0->data + (p0->end - p0->begin) && p1->begin == p0->end);
    }
    dit_error err = {0};
    CHECK(dit_weights_remap(w, &r, &err) == DIT_ERR_INVALID_ARG); /* once per set */
    dit_weights_close(w);
  }
  /* rows not a multiple of the parts; two tensors renamed to one name */
  static const dit_wsplit odd[] = {{".feed_forward.w1.weight", 3, {".a", ".b", ".c"}, NULL, 0}};
  dit_wremap r2 = {NULL, NULL, 0, odd, 1, NULL, NULL};
  remap_case(&r2, DIT_ERR_FORMAT, "341 rows");
  /* interleaved: rows in groups of 2 x 16, part i the i-th 16 rows of each group (gathered copies) */
  static const dit_wsplit il[] = {{"layers.0.attention.to_out.0.weight", 2, {"oa", "ob"}, NULL, 16}};
  dit_wremap r4 = {NULL, NULL, 0, il, 1, NULL, NULL};
  dit_weights *base = remap_case(&(dit_wremap){NULL, NULL, 0, NULL, 0, NULL, NULL}, DIT_OK, NULL);
  w = remap_case(&r4, DIT_OK, NULL);
  const dit_st_tensor *src = base ? dit_weights_find(base, "layers.0.attention.to_out.0.weight") : NULL;
  const dit_st_tensor *pa = w ? dit_weights_find(w, "oa") : NULL;
  const dit_st_tensor *pb = w ? dit_weights_find(w, "ob") : NULL;
  CHECK(src && pa && pb && pa->shape[0] == src->shape[0] / 2 && pa->end - pa->begin == (src->end - src->begin) / 2);
  if (src && pa && pb) {
    const size_t row = (size_t)(src->end - src->begin) / (size_t)src->shape[0];
    bool same = true;
    for (int64_t r = 0; r < pa->shape[0]; r++) { /* row r of part p is row (r / 16) * 32 + p * 16 + r % 16 */
      const int64_t from = r / 16 * 32 + r % 16;
      same = same && !memcmp((const char *)pa->data + r * row, (const char *)src->data + from * row, row) &&
             !memcmp((const char *)pb->data + r * row, (const char *)src->data + (from + 16) * row, row);
    }
    CHECK_MSG(same, "interleaved split: a part's rows are not the source's");
  }
  dit_weights_close(w), dit_weights_close(base);
  static const dit_wsplit il_odd[] = {{"layers.0.attention.to_out.0.weight", 2, {"oa", "ob"}, NULL, 48}};
  dit_wremap r5 = {NULL, NULL, 0, il_odd, 1, NULL, NULL};
  remap_case(&r5, DIT_ERR_FORMAT, "not groups of 2 x 48 rows");
  static const dit_wrename clash[] = {{"to_k", "to_q", NULL}};
  dit_wremap r3 = {NULL, clash, 1, NULL, 0, NULL, NULL};
  remap_case(&r3, DIT_ERR_FORMAT, "to_q.weight\" after renaming");
}

/* Rules both ways: in order forward, reversed backward; '^' anchors; `within` tells names apart
 * by their prefix at the rule's place in the chain (both ways the same). */
static void test_rename_rules(void) {
  static const dit_wrename r[] = {
      {".norm.q.", ".attn.nq.", "double."}, /* a double block's q norm ... */
      {".norm.q.", ".nq.", "single."},      /* ... and a single block's: alike once renamed */
      {"double.", "blocks.", NULL},
      {"single.", "sblocks.", NULL},
      {"^out.", "^final.", NULL}, /* anchored: both sides, to work both ways */
  };
  static const char *const pairs[][2] = {
      {"double.0.norm.q.w", "blocks.0.attn.nq.w"}, {"single.3.norm.q.w", "sblocks.3.nq.w"},
      {"out.w", "final.w"},                         {"x.out.w", "x.out.w"},
  };
  for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
    char f[DIT_WNAME_MAX], b[DIT_WNAME_MAX];
    CHECK(dit_wname_rename(r, 5, false, pairs[i][0], f, sizeof f));
    CHECK_MSG(!strcmp(f, pairs[i][1]), "forward %s -> %s, want %s", pairs[i][0], f, pairs[i][1]);
    CHECK(dit_wname_rename(r, 5, true, pairs[i][1], b, sizeof b));
    CHECK_MSG(!strcmp(b, pairs[i][0]), "backward %s -> %s, want %s", pairs[i][1], b, pairs[i][0]);
  }
  char small[8];
  CHECK(!dit_wname_rename(r, 5, false, "double.0.norm.q.w", small, sizeof small)); /* does not fit */
}

/* Pages released from the resident set: the mapping's Rss falls by about the tensor's size, and the data
 * reads the same afterwards (from the file again). */
static void test_release_pages(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/models/zimage-tiny/transformer", g_args->data);
  dit_weights *w = NULL;
  dit_error err = {0};
  CHECK_MSG(dit_weights_open(path, NULL, &w, &err) == DIT_OK, "%s", err.msg);
  const dit_st_tensor *t = w ? dit_weights_find(w, "layers.0.feed_forward.w1.weight") : NULL;
  CHECK(t != NULL);
  if (!t) {
    dit_weights_close(w);
    return;
  }
  const size_t n = (size_t)(t->end - t->begin);
  unsigned char *copy = malloc(n);
  volatile unsigned sum = 0;
  for (size_t i = 0; copy && i < n; i++) sum += copy[i] = ((const unsigned char *)t->data)[i]; /* every page in */
  char file[4200];
  snprintf(file, sizeof file, "%s/diffusion_pytorch_model.safetensors", path);
  const long before = dt_file_rss_kb(file);
  dit_weights_release_pages(w, t->data, n);
  const long after = dt_file_rss_kb(file);
  if (before < 0 || after < 0) {
    printf("  (no /proc/self/smaps: the resident side is not checked)\n");
  } else {
    printf("released %zu bytes of a mapping: Rss %ld kB -> %ld kB\n", n, before, after);
    CHECK_MSG(before - after >= (long)(n / 1024) - 8, "Rss %ld -> %ld kB for %zu bytes", before, after, n);
  }
  CHECK(copy && !memcmp(copy, t->data, n));
  unsigned char heap[64] = {1, 2, 3};
  dit_weights_release_pages(w, heap, sizeof heap); /* outside the mappings: untouched */
  CHECK(heap[0] == 1 && heap[2] == 3);
  free(copy);
  (void)sum;
  dit_weights_close(w);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  g_args = &a;
  test_bad_table();
  test_bad_raw();
  test_not_regular();
  test_good_edges();
  test_fixtures();
  test_mutations();
  test_sharded(&a);
  test_wtable(&a);
  test_fp8_scales(&a);
  test_remap();
  test_rename_rules();
  test_release_pages();
  return dt_finish();
}
