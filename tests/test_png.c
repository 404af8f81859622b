/* PNG writer: pixels and UTF-8 iTXt text read back with libpng; no silent overwrite; the
 * failure cases (directory target, missing folder, read-only folder, bad arguments) name
 * the path and the reason and leave no file and no temp file behind; float -> 8-bit
 * conversion as numpy's (x * 255).round() with NaN/Inf rejected. */
#include <dirent.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/png.h"
#include "testing.h"

#define W 7
#define H 5

typedef struct readback {
  int width, height;
  uint8_t *rgb;
  int n_text;
  char keys[8][80];
  char *values[8];
  int compression[8];
} readback;

static void rb_free(readback *r) {
  free(r->rgb);
  for (int i = 0; i < r->n_text && i < 8; i++) free(r->values[i]);
  memset(r, 0, sizeof *r);
}

static void quiet_error(png_structp png, png_const_charp msg) {
  (void)msg;
  png_longjmp(png, 1);
}
static void quiet_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

/* Reads an 8-bit RGB PNG with its text chunks. Returns 0 on success. */
static int read_png(const char *path, readback *r) {
  memset(r, 0, sizeof *r);
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, quiet_error, quiet_warning);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    fclose(f);
    return -1;
  }
  png_init_io(png, f);
  png_read_png(png, info, PNG_TRANSFORM_IDENTITY, NULL);
  r->width = (int)png_get_image_width(png, info);
  r->height = (int)png_get_image_height(png, info);
  int ok = png_get_color_type(png, info) == PNG_COLOR_TYPE_RGB && png_get_bit_depth(png, info) == 8;
  png_bytepp rows = png_get_rows(png, info);
  r->rgb = malloc((size_t)r->width * r->height * 3);
  for (int y = 0; y < r->height; y++) memcpy(r->rgb + (size_t)y * r->width * 3, rows[y], (size_t)r->width * 3);
  png_textp text;
  int n = 0;
  png_get_text(png, info, &text, &n);
  r->n_text = n < 8 ? n : 8;
  for (int i = 0; i < r->n_text; i++) {
    snprintf(r->keys[i], sizeof r->keys[i], "%s", text[i].key);
    r->values[i] = strdup(text[i].text);
    r->compression[i] = text[i].compression;
  }
  png_destroy_read_struct(&png, &info, NULL);
  fclose(f);
  return ok ? 0 : -1;
}

static void make_image(uint8_t *rgb, int salt) {
  for (int i = 0; i < W * H * 3; i++) rgb[i] = (uint8_t)(i * 37 + salt);
}

/* Counts entries of dir other than . and .. ; *tmp_left counts leftover temp files. */
static int count_entries(const char *dir, int *tmp_left) {
  DIR *d = opendir(dir);
  int n = 0;
  *tmp_left = 0;
  if (!d) return -1;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    n++;
    if (e->d_name[0] == '.') (*tmp_left)++;
  }
  closedir(d);
  return n;
}

static long file_bytes(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  long n = (long)fread(buf, 1, cap, f);
  fclose(f);
  return n;
}

static const char *prompt = "un renard roux dans la neige \xe2\x80\x94 \xe9\x9b\xaa\xe3\x81\xae\xe4\xb8\xad\xe3\x81\xae"
                            "\xe7\x8b\x90 \xf0\x9f\xa6\x8a, 35mm";

static void test_roundtrip(const char *dir) {
  char path[1024];
  snprintf(path, sizeof path, "%s/out.png", dir);
  unlink(path);
  uint8_t rgb[W * H * 3];
  make_image(rgb, 0);
  const char *keys[3] = {"prompt", "seed", "parameters"};
  const char *values[3] = {prompt, "18446744073709551615", "steps: 4, sampler: euler, model: zimage-tiny"};
  dit_error err = {0};
  CHECK_MSG(dit_png_write(path, rgb, W, H, keys, values, 3, false, &err) == DIT_OK, "%s", err.msg);
  readback r;
  CHECK(read_png(path, &r) == 0);
  CHECK(r.width == W && r.height == H);
  CHECK(r.rgb && memcmp(r.rgb, rgb, sizeof rgb) == 0);
  CHECK(r.n_text == 3);
  for (int i = 0; i < 3 && i < r.n_text; i++) {
    CHECK_MSG(strcmp(r.keys[i], keys[i]) == 0 && strcmp(r.values[i], values[i]) == 0, "text %d: %s=%s", i,
              r.keys[i], r.values[i]);
    CHECK(r.compression[i] == PNG_ITXT_COMPRESSION_NONE); /* iTXt, not Latin-1 tEXt */
  }
  rb_free(&r);
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644);

  /* same inputs -> byte-identical file */
  char a[4096], b[4096], p2[1024];
  snprintf(p2, sizeof p2, "%s/out2.png", dir);
  unlink(p2);
  CHECK(dit_png_write(p2, rgb, W, H, keys, values, 3, false, &err) == DIT_OK);
  long na = file_bytes(path, a, sizeof a), nb = file_bytes(p2, b, sizeof b);
  CHECK(na > 0 && na == nb && memcmp(a, b, (size_t)na) == 0);
  unlink(p2);

  /* existing file: refused without overwrite, content unchanged */
  uint8_t other[W * H * 3];
  make_image(other, 99);
  dit_error e2 = {0};
  CHECK(dit_png_write(path, other, W, H, NULL, NULL, 0, false, &e2) == DIT_ERR_IO);
  CHECK_MSG(strstr(e2.msg, path) && strstr(e2.msg, "exists"), "%s", e2.msg);
  nb = file_bytes(path, b, sizeof b);
  CHECK(na == nb && memcmp(a, b, (size_t)na) == 0);
  /* with overwrite: replaced */
  CHECK_MSG(dit_png_write(path, other, W, H, NULL, NULL, 0, true, &err) == DIT_OK, "%s", err.msg);
  CHECK(read_png(path, &r) == 0 && r.rgb && memcmp(r.rgb, other, sizeof other) == 0 && r.n_text == 0);
  rb_free(&r);
  unlink(path);
}

static void expect_fail(const char *path, bool overwrite, dit_status want, const char *needle) {
  uint8_t rgb[W * H * 3];
  make_image(rgb, 1);
  dit_error err = {0};
  dit_status s = dit_png_write(path, rgb, W, H, NULL, NULL, 0, overwrite, &err);
  CHECK_MSG(s == want && strstr(err.msg, needle) && strstr(err.msg, path), "%s -> %d \"%s\" (want \"%s\")", path,
            s, err.msg, needle);
}

static void test_failures(const char *dir) {
  char path[1024], sub[600];
  /* directory target */
  snprintf(sub, sizeof sub, "%s/adir", dir);
  mkdir(sub, 0755);
  expect_fail(sub, false, DIT_ERR_IO, "directory");
  expect_fail(sub, true, DIT_ERR_IO, "directory");
  snprintf(path, sizeof path, "%s/", sub);
  expect_fail(path, true, DIT_ERR_IO, "directory");
  /* missing parent folder */
  snprintf(path, sizeof path, "%s/no/such/folder/x.png", dir);
  expect_fail(path, false, DIT_ERR_IO, "does not exist");
  /* parent is a file */
  snprintf(path, sizeof path, "%s/afile", dir);
  FILE *f = fopen(path, "w");
  if (f) fclose(f);
  snprintf(path, sizeof path, "%s/afile/x.png", dir);
  expect_fail(path, false, DIT_ERR_IO, "not a folder");
  /* read-only folder */
  snprintf(sub, sizeof sub, "%s/ro", dir);
  mkdir(sub, 0755);
  chmod(sub, 0555);
  snprintf(path, sizeof path, "%s/x.png", sub);
  if (geteuid() == 0) {
    printf("read-only folder case skipped: running as root (root ignores permissions)\n");
  } else {
    expect_fail(path, false, DIT_ERR_IO, "permission denied");
    int tmp_left;
    CHECK(count_entries(sub, &tmp_left) == 0);
  }
  chmod(sub, 0755);
  /* bad arguments: nothing created */
  uint8_t rgb[W * H * 3] = {0};
  dit_error err = {0};
  snprintf(path, sizeof path, "%s/bad.png", dir);
  CHECK(dit_png_write(path, rgb, 0, H, NULL, NULL, 0, false, &err) == DIT_ERR_INVALID_ARG);
  CHECK(dit_png_write(path, rgb, W, -1, NULL, NULL, 0, false, &err) == DIT_ERR_INVALID_ARG);
  CHECK(dit_png_write(path, NULL, W, H, NULL, NULL, 0, false, &err) == DIT_ERR_INVALID_ARG);
  CHECK(dit_png_write("", rgb, W, H, NULL, NULL, 0, false, &err) == DIT_ERR_INVALID_ARG);
  const char *k_bad[1] = {" lead"}, *v_ok[1] = {"x"};
  CHECK(dit_png_write(path, rgb, W, H, k_bad, v_ok, 1, false, &err) == DIT_ERR_INVALID_ARG);
  CHECK(strstr(err.msg, "keyword") != NULL);
  const char *k_long[1] = {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}; /* 80 */
  CHECK(dit_png_write(path, rgb, W, H, k_long, v_ok, 1, false, &err) == DIT_ERR_INVALID_ARG);
  const char *k_empty[1] = {""};
  CHECK(dit_png_write(path, rgb, W, H, k_empty, v_ok, 1, false, &err) == DIT_ERR_INVALID_ARG);
  const char *k_ok[1] = {"prompt"}, *v_bad[1] = {"caf\xe9"}, *v_sur[1] = {"\xed\xa0\x80"}, *v_null[1] = {NULL};
  CHECK(dit_png_write(path, rgb, W, H, k_ok, v_bad, 1, false, &err) == DIT_ERR_INVALID_ARG);
  CHECK(strstr(err.msg, "UTF-8") != NULL);
  CHECK(dit_png_write(path, rgb, W, H, k_ok, v_sur, 1, false, &err) == DIT_ERR_INVALID_ARG);
  CHECK(dit_png_write(path, rgb, W, H, k_ok, v_null, 1, false, &err) == DIT_ERR_INVALID_ARG);
  CHECK(access(path, F_OK) != 0);
  /* after all the failures: only adir, afile and ro in the folder, no temp file */
  int tmp_left = -1;
  int n = count_entries(dir, &tmp_left);
  CHECK_MSG(n == 3 && tmp_left == 0, "%d entries, %d temp files left in %s", n, tmp_left, dir);
}

static void test_to_u8(void) {
  float in[8] = {0.0f, 1.0f, 0.5f, -0.25f, 1.5f, 0.2f, 1.0f / 255.0f, 254.5f / 255.0f};
  uint8_t out[8];
  dit_error err = {0};
  CHECK(dit_image_to_u8(in, 8, out, &err) == DIT_OK);
  CHECK(out[0] == 0 && out[1] == 255 && out[2] == 128 && out[3] == 0 && out[4] == 255);
  CHECK(out[5] == 51 && out[6] == 1);
  /* ties: wherever x*255 in float32 is exactly k + 0.5, numpy rounds to the even neighbour */
  int ties = 0, bad = 0;
  for (int k = 0; k < 255; k++) {
    float x = ((float)k + 0.5f) / 255.0f;
    for (int d = -2; d <= 2; d++) {
      float xx = nextafterf(x, d < 0 ? 0.0f : 1.0f);
      for (int s = 0; s < abs(d) - 1; s++) xx = nextafterf(xx, d < 0 ? 0.0f : 1.0f);
      if (d == 0) xx = x;
      float y = xx * 255.0f;
      if (y != (float)k + 0.5f) continue;
      uint8_t o;
      dit_image_to_u8(&xx, 1, &o, &err);
      ties++;
      if (o != (k % 2 == 0 ? k : k + 1)) bad++;
    }
  }
  CHECK_MSG(ties > 50 && bad == 0, "%d ties, %d rounded wrong", ties, bad);
  float nan_in[4] = {0.1f, 0.2f, NAN, 0.3f};
  CHECK(dit_image_to_u8(nan_in, 4, out, &err) == DIT_ERR_NUMERIC);
  CHECK_MSG(strstr(err.msg, "NaN") && strstr(err.msg, "value 2"), "%s", err.msg);
  float inf_in[1] = {INFINITY};
  CHECK(dit_image_to_u8(inf_in, 1, out, &err) == DIT_ERR_NUMERIC);
  CHECK(strstr(err.msg, "infinite") != NULL);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/png_cases", a.tmp);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "chmod -R u+w '%s' 2>/dev/null; rm -rf '%s'", dir, dir);
  dt_run(cmd, NULL);
  mkdir(dir, 0755);
  test_roundtrip(dir);
  test_failures(dir);
  test_to_u8();
  return dt_finish();
}
