/* Input images as diffusers reads and resizes them, byte for byte against Pillow
 * (tests/fixtures/images: make_images.py wrote the inputs and what Pillow 9.4 makes of them):
 * every input decoded to RGB (PNG RGB/RGBA/gray/gray+alpha/palette/1-bit/16-bit, JPEG baseline/
 * progressive/gray/4:4:4, EXIF orientations 3, 6, 8) equals Pillow's open + exif_transpose +
 * convert("RGB"), and its Lanczos resizes (up and down, one axis or both) equal Image.resize;
 * so do the bilinear ones of rgb.png and gray.png (<name>.<W>x<H>.bilinear.png), and a bilinear
 * resize differs from a Lanczos one of the same image. Then the refusals: truncated and
 * damaged files, a 100000 x 100000 header (refused from the header, before any allocation),
 * files that are neither PNG nor JPEG, a 16-bit gray PNG (clamped as Pillow does). */
#include <dirent.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "io/image_read.h"
#include "testing.h"

static char g_dir[4096];

/* The largest channel difference between img and the RGB PNG ref (-1: size differs or no ref). */
static int diff_to(const uint8_t *rgb, int w, int h, const char *ref) {
  int rw = 0, rh = 0;
  unsigned char *px = dt_read_png_rgb(ref, &rw, &rh);
  if (!px || rw != w || rh != h) return free(px), -1;
  int m = 0;
  for (size_t i = 0; i < (size_t)w * h * 3; i++) {
    int d = abs((int)px[i] - (int)rgb[i]);
    if (d > m) m = d;
  }
  free(px);
  return m;
}

static void test_against_pillow(void) {
  char in_dir[4200], ref_dir[4200];
  snprintf(in_dir, sizeof in_dir, "%s/in", g_dir);
  snprintf(ref_dir, sizeof ref_dir, "%s/ref", g_dir);
  DIR *d = opendir(in_dir);
  CHECK_MSG(d != NULL, "no input images in %s", in_dir);
  struct dirent *e;
  int inputs = 0, resizes = 0, bilinears = 0;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[8400], ref[8400];
    snprintf(path, sizeof path, "%s/%s", in_dir, e->d_name);
    dit_image img;
    dit_error err = {0};
    dit_status s = dit_image_read(path, 1 << 20, &img, &err);
    CHECK_MSG(s == DIT_OK, "%s: %s", e->d_name, err.msg);
    if (s != DIT_OK) continue;
    inputs++;
    snprintf(ref, sizeof ref, "%s/%s.rgb.png", ref_dir, e->d_name);
    int m = diff_to(img.rgb, img.width, img.height, ref);
    CHECK_MSG(m == 0, "%s: decoded %dx%d differs from Pillow's by up to %d levels", e->d_name, img.width, img.height,
              m);
    /* every resize Pillow made of it: <name>.<W>x<H>.png Lanczos, <name>.<W>x<H>.bilinear.png bilinear */
    DIR *r = opendir(ref_dir);
    struct dirent *f;
    size_t nl = strlen(e->d_name);
    while (r && (f = readdir(r))) {
      int w, h;
      char tail[16];
      if (strncmp(f->d_name, e->d_name, nl) || f->d_name[nl] != '.' ||
          sscanf(f->d_name + nl + 1, "%dx%d%15s", &w, &h, tail) != 3)
        continue;
      const bool bilinear = !strcmp(tail, ".bilinear.png");
      if (!bilinear && strcmp(tail, ".png")) continue;
      const dit_resample filter = bilinear ? DIT_RESAMPLE_BILINEAR : DIT_RESAMPLE_LANCZOS;
      uint8_t *out = malloc((size_t)w * h * 3);
      CHECK(out && dit_image_resize(img.rgb, img.width, img.height, out, w, h, filter, &err) == DIT_OK);
      snprintf(ref, sizeof ref, "%s/%s", ref_dir, f->d_name);
      m = out ? diff_to(out, w, h, ref) : -1;
      CHECK_MSG(m == 0, "%s: %s to %dx%d differs from Pillow's by up to %d levels", e->d_name,
                bilinear ? "bilinear" : "Lanczos", w, h, m);
      *(bilinear ? &bilinears : &resizes) += 1;
      free(out);
    }
    if (r) closedir(r);
    dit_image_free(&img);
  }
  if (d) closedir(d);
  printf("%d inputs decoded as Pillow decodes them, %d Lanczos and %d bilinear resizes equal to Pillow's\n", inputs,
         resizes, bilinears);
  CHECK(inputs >= 14 && resizes >= 30 && bilinears >= 10);
}

/* The filter argument is used: bilinear and Lanczos resizes of one image differ (both ways),
 * and a filter outside dit_resample is refused. */
static void test_filters_differ(void) {
  char path[4200];
  snprintf(path, sizeof path, "%s/in/rgb.png", g_dir);
  dit_image img;
  dit_error err = {0};
  CHECK_MSG(dit_image_read(path, 1 << 20, &img, &err) == DIT_OK, "%s", err.msg);
  if (!img.rgb) return;
  static const int sizes[2][2] = {{64, 48}, {32, 16}};
  for (int i = 0; i < 2; i++) {
    const int w = sizes[i][0], h = sizes[i][1];
    uint8_t *a = malloc((size_t)w * h * 3), *b = malloc((size_t)w * h * 3);
    CHECK(a && b);
    if (a && b) {
      CHECK(dit_image_resize(img.rgb, img.width, img.height, a, w, h, DIT_RESAMPLE_LANCZOS, &err) == DIT_OK);
      CHECK(dit_image_resize(img.rgb, img.width, img.height, b, w, h, DIT_RESAMPLE_BILINEAR, &err) == DIT_OK);
      CHECK_MSG(memcmp(a, b, (size_t)w * h * 3) != 0, "bilinear and Lanczos to %dx%d are the same", w, h);
      err.msg[0] = 0;
      CHECK(dit_image_resize(img.rgb, img.width, img.height, a, w, h, (dit_resample)7, &err) == DIT_ERR_INVALID_ARG &&
            strstr(err.msg, "filter"));
    }
    free(a), free(b);
  }
  dit_image_free(&img);
}

/* A PNG chunk (length, type, data, CRC) appended at p; returns its size. */
static size_t put_chunk(uint8_t *p, const char *type, const uint8_t *data, uint32_t n) {
  p[0] = (uint8_t)(n >> 24), p[1] = (uint8_t)(n >> 16), p[2] = (uint8_t)(n >> 8), p[3] = (uint8_t)n;
  memcpy(p + 4, type, 4);
  if (n) memcpy(p + 8, data, n);
  uint32_t crc = 0xffffffffu;
  for (uint32_t i = 0; i < n + 4; i++) {
    crc ^= p[4 + i];
    for (int k = 0; k < 8; k++) crc = crc >> 1 ^ (0xedb88320u & -(crc & 1));
  }
  crc ^= 0xffffffffu;
  uint8_t *c = p + 8 + n;
  c[0] = (uint8_t)(crc >> 24), c[1] = (uint8_t)(crc >> 16), c[2] = (uint8_t)(crc >> 8), c[3] = (uint8_t)crc;
  return 12 + n;
}

static void expect(const uint8_t *data, size_t n, dit_status want, const char *what, const char *needle) {
  dit_image img;
  dit_error err = {0};
  dit_status s = dit_image_decode(data, n, what, 1 << 20, &img, &err);
  CHECK_MSG(s == want && !img.rgb && err.msg[0] && (!needle || strstr(err.msg, needle)),
            "%s: status %d (want %d): %s", what, (int)s, (int)want, err.msg);
  printf("  %-34s -> %s\n", what, err.msg);
  dit_image_free(&img);
}

static void test_refusals(void) {
  char path[4200];
  size_t n = 0;
  snprintf(path, sizeof path, "%s/in/rgb.png", g_dir);
  unsigned char *png = dt_read_bytes(path, &n);
  snprintf(path, sizeof path, "%s/in/rgb.jpg", g_dir);
  size_t jn = 0;
  unsigned char *jpg = dt_read_bytes(path, &jn);
  CHECK(png && jpg);
  if (!png || !jpg) return;
  expect(png, n / 2, DIT_ERR_FORMAT, "PNG cut in half", "PNG");
  expect(png, 20, DIT_ERR_FORMAT, "PNG cut inside IHDR", "PNG");
  expect(jpg, jn / 2, DIT_ERR_FORMAT, "JPEG cut in half", NULL);
  expect(jpg, 4, DIT_ERR_FORMAT, "JPEG of 4 bytes", "JPEG");
  png[40] ^= 0x55; /* inside the IDAT of this small file: a CRC error */
  expect(png, n, DIT_ERR_FORMAT, "PNG with a damaged chunk", "PNG");
  expect((const uint8_t *)"GIF89a....", 10, DIT_ERR_FORMAT, "a GIF", "not a PNG or JPEG");
  expect((const uint8_t *)"", 0, DIT_ERR_FORMAT, "no bytes", NULL);
  /* a 100000 x 100000 PNG header: refused before anything is allocated */
  uint8_t big[128];
  size_t o = 8;
  memcpy(big, "\x89PNG\r\n\x1a\n", 8);
  uint8_t ihdr[13] = {0, 1, 0x86, 0xa0, 0, 1, 0x86, 0xa0, 8, 2, 0, 0, 0};
  o += put_chunk(big + o, "IHDR", ihdr, 13);
  o += put_chunk(big + o, "IDAT", (const uint8_t *)"\x78\x01", 2);
  o += put_chunk(big + o, "IEND", NULL, 0);
  expect(big, o, DIT_ERR_INVALID_ARG, "PNG header 100000x100000", "more than this run allows");
  /* the same for a JPEG: the SOF's size fields */
  for (size_t i = 2; i + 9 < jn; i++)
    if (jpg[i] == 0xff && jpg[i + 1] == 0xc0) {
      jpg[i + 5] = 0xea, jpg[i + 6] = 0x60, jpg[i + 7] = 0xea, jpg[i + 8] = 0x60; /* 60000 x 60000 */
      break;
    }
  expect(jpg, jn, DIT_ERR_INVALID_ARG, "JPEG header 60000x60000", "more than this run allows");
  free(png);
  free(jpg);
  dit_image img;
  dit_error err = {0};
  CHECK(dit_image_read("/nonexistent/x.png", 1 << 20, &img, &err) == DIT_ERR_IO && strstr(err.msg, "x.png"));
}

/* 16-bit gray: Pillow opens it as 32-bit "I" and convert("RGB") clips, so 0 stays black and
 * 6000 turns white; ditrun does the same. */
static void test_gray16(void) {
  uint8_t png[256], raw[1 + 4 * 2];
  size_t o = 8;
  memcpy(png, "\x89PNG\r\n\x1a\n", 8);
  uint8_t ihdr[13] = {0, 0, 0, 4, 0, 0, 0, 1, 16, 0, 0, 0, 0};
  o += put_chunk(png + o, "IHDR", ihdr, 13);
  static const uint16_t v[4] = {0, 200, 255, 6000};
  raw[0] = 0;
  for (int i = 0; i < 4; i++) raw[1 + 2 * i] = (uint8_t)(v[i] >> 8), raw[2 + 2 * i] = (uint8_t)v[i];
  /* a stored (uncompressed) zlib stream of raw */
  uint8_t z[64] = {0x78, 0x01, 1, sizeof raw, 0, (uint8_t)~sizeof raw, 0xff};
  memcpy(z + 7, raw, sizeof raw);
  uint32_t a = 1, b = 0;
  for (size_t i = 0; i < sizeof raw; i++) a = (a + raw[i]) % 65521, b = (b + a) % 65521;
  uint32_t ad = b << 16 | a;
  size_t zn = 7 + sizeof raw;
  z[zn++] = (uint8_t)(ad >> 24), z[zn++] = (uint8_t)(ad >> 16), z[zn++] = (uint8_t)(ad >> 8), z[zn++] = (uint8_t)ad;
  o += put_chunk(png + o, "IDAT", z, (uint32_t)zn);
  o += put_chunk(png + o, "IEND", NULL, 0);
  dit_image img;
  dit_error err = {0};
  dit_status s = dit_image_decode(png, o, "gray16", 1 << 20, &img, &err);
  CHECK_MSG(s == DIT_OK && img.width == 4 && img.height == 1, "gray16: %s", err.msg);
  if (s == DIT_OK)
    CHECK_MSG(img.rgb[0] == 0 && img.rgb[3] == 200 && img.rgb[6] == 255 && img.rgb[9] == 255 && img.rgb[10] == 255,
              "gray16 clamped as Pillow: %d %d %d %d", img.rgb[0], img.rgb[3], img.rgb[6], img.rgb[9]);
  dit_image_free(&img);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  snprintf(g_dir, sizeof g_dir, "%s/images", a.data);
  test_against_pillow();
  test_filters_differ();
  test_refusals();
  test_gray16();
  return dt_finish();
}
