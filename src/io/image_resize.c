/* Pixel operations on input images (image_read.h): EXIF orientation, and PIL's Image.resize with
 * the Lanczos or bilinear filter bit for bit, so an image preprocessed here is the one diffusers'
 * image processors hand their VAE (VaeImageProcessor: Lanczos; VideoProcessor(resample="bilinear"):
 * bilinear). PIL's algorithm (Resample.c), reimplemented once for any filter: for each output
 * pixel, the input window centered on it ((x + 0.5) * scale), the filter (and its support)
 * widened by the scale when shrinking, weights normalized to sum 1 then rounded to 22-bit fixed
 * point; rows are resampled first (the result rounded and clipped to 8 bits), then columns. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "io/image_read.h"

/* ---- EXIF orientation ------------------------------------------------------------------ */
int dit_exif_orientation(const uint8_t *t, size_t n) {
  if (n < 8) return 1;
  bool le = t[0] == 'I' && t[1] == 'I';
  if (!le && !(t[0] == 'M' && t[1] == 'M')) return 1;
#define U16(p) (le ? (uint32_t)(p)[0] | (uint32_t)(p)[1] << 8 : (uint32_t)(p)[0] << 8 | (uint32_t)(p)[1])
#define U32(p) (le ? U16(p) | U16((p) + 2) << 16 : U16(p) << 16 | U16((p) + 2))
  if (U16(t + 2) != 42) return 1;
  uint32_t ifd = U32(t + 4);
  if (ifd > n - 2 || ifd < 8) return 1;
  uint32_t count = U16(t + ifd);
  for (uint32_t i = 0; i < count; i++) {
    size_t e = (size_t)ifd + 2 + (size_t)i * 12;
    if (e + 12 > n) return 1;
    if (U16(t + e) == 0x0112 && U16(t + e + 2) == 3) { /* Orientation, SHORT */
      uint32_t v = U16(t + e + 8);
      return v >= 1 && v <= 8 ? (int)v : 1;
    }
  }
#undef U32
#undef U16
  return 1;
}

dit_status dit_image_orient(dit_image *img, int o, dit_error *err) {
  if (o <= 1 || o > 8) return DIT_OK;
  const size_t w = (size_t)img->width, h = (size_t)img->height;
  const bool swap = o >= 5; /* 5..8 exchange width and height */
  const size_t ow = swap ? h : w, oh = swap ? w : h;
  uint8_t *dst = malloc(w * h * 3);
  if (!dst) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory turning a %zux%zu image", w, h);
  for (size_t y = 0; y < oh; y++)
    for (size_t x = 0; x < ow; x++) {
      size_t sx, sy; /* PIL's exif_transpose: the transposition each orientation undoes */
      switch (o) {
        case 2: sx = w - 1 - x, sy = y; break;         /* FLIP_LEFT_RIGHT */
        case 3: sx = w - 1 - x, sy = h - 1 - y; break; /* ROTATE_180 */
        case 4: sx = x, sy = h - 1 - y; break;         /* FLIP_TOP_BOTTOM */
        case 5: sx = y, sy = x; break;                 /* TRANSPOSE */
        case 6: sx = y, sy = h - 1 - x; break;         /* ROTATE_270 */
        case 7: sx = w - 1 - y, sy = h - 1 - x; break; /* TRANSVERSE */
        default: sx = w - 1 - y, sy = x; break;        /* 8: ROTATE_90 */
      }
      memcpy(dst + (y * ow + x) * 3, img->rgb + (sy * w + sx) * 3, 3);
    }
  free(img->rgb);
  img->rgb = dst, img->width = (int)ow, img->height = (int)oh;
  return DIT_OK;
}

/* ---- PIL's resize -------------------------------------------------------------------------- */
#define PRECISION_BITS (32 - 8 - 2)

static double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return sin(x) / x;
}

/* Resample.c's lanczos_filter (a = 3) and bilinear_filter (the triangle 1 - |x| on (-1, 1)). */
static double lanczos(double x) { return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3.0) : 0.0; }

static double bilinear(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

/* A filter as Resample.c's struct filter: its function and its support (the half-width where
 * it is non-zero, at scale 1). */
typedef struct resample_filter {
  double (*fn)(double);
  double support;
} resample_filter;

/* One axis, filter f: for each of out_n outputs its first input (bounds[2i]), count (bounds[2i+1])
 * and ksize fixed-point weights. Returns ksize, or 0 when out of memory. */
static int coefficients(int in_n, int out_n, const resample_filter *f, int **bounds_out, int32_t **k_out) {
  const double scale = (double)in_n / out_n, fscale = scale < 1.0 ? 1.0 : scale, support = f->support * fscale;
  const int ksize = (int)ceil(support) * 2 + 1;
  double *k = malloc((size_t)out_n * ksize * sizeof *k);
  int *bounds = malloc((size_t)out_n * 2 * sizeof *bounds);
  int32_t *kk = malloc((size_t)out_n * ksize * sizeof *kk);
  if (!k || !bounds || !kk) return free(k), free(bounds), free(kk), 0;
  for (int xx = 0; xx < out_n; xx++) {
    const double center = (xx + 0.5) * scale, ss = 1.0 / fscale;
    int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
    if (xmin < 0) xmin = 0;
    if (xmax > in_n) xmax = in_n;
    xmax -= xmin;
    double *kx = k + (size_t)xx * ksize, ww = 0.0;
    for (int x = 0; x < xmax; x++) ww += kx[x] = f->fn((x + xmin - center + 0.5) * ss);
    for (int x = 0; x < xmax; x++)
      if (ww != 0.0) kx[x] /= ww;
    for (int x = xmax; x < ksize; x++) kx[x] = 0;
    bounds[xx * 2] = xmin, bounds[xx * 2 + 1] = xmax;
  }
  for (size_t i = 0; i < (size_t)out_n * ksize; i++) /* PIL: round half away from zero */
    kk[i] = k[i] < 0 ? (int32_t)(-0.5 + k[i] * (1 << PRECISION_BITS)) : (int32_t)(0.5 + k[i] * (1 << PRECISION_BITS));
  free(k);
  *bounds_out = bounds, *k_out = kk;
  return ksize;
}

static uint8_t clip8(int32_t v) {
  v >>= PRECISION_BITS;
  return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* dst (n_lines lines of out_n pixels) from src (lines of in pixels) along one axis: step is the
 * distance between neighbouring pixels of a line, line the distance between lines (in pixels). */
static void resample(const uint8_t *src, uint8_t *dst, int n_lines, int out_n, size_t s_step, size_t s_line,
                     size_t d_step, size_t d_line, const int *bounds, const int32_t *kk, int ksize) {
  for (int l = 0; l < n_lines; l++)
    for (int xx = 0; xx < out_n; xx++) {
      const int xmin = bounds[xx * 2], xmax = bounds[xx * 2 + 1];
      const int32_t *k = kk + (size_t)xx * ksize;
      for (int c = 0; c < 3; c++) {
        int32_t ss = 1 << (PRECISION_BITS - 1);
        for (int x = 0; x < xmax; x++) ss += src[(size_t)l * s_line * 3 + (size_t)(x + xmin) * s_step * 3 + c] * k[x];
        dst[(size_t)l * d_line * 3 + (size_t)xx * d_step * 3 + c] = clip8(ss);
      }
    }
}

dit_status dit_image_resize(const uint8_t *src, int w, int h, uint8_t *dst, int ow, int oh, dit_resample filter,
                            dit_error *err) {
  static const resample_filter filters[] = {[DIT_RESAMPLE_LANCZOS] = {lanczos, 3.0},
                                            [DIT_RESAMPLE_BILINEAR] = {bilinear, 1.0}};
  if (w < 1 || h < 1 || ow < 1 || oh < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "resize: %dx%d to %dx%d", w, h, ow, oh);
  if ((unsigned)filter >= sizeof filters / sizeof filters[0])
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "resize: unknown filter %d", (int)filter);
  const resample_filter *f = &filters[filter];
  if (w == ow && h == oh) {
    memcpy(dst, src, (size_t)w * h * 3);
    return DIT_OK;
  }
  int *bh = NULL, *bv = NULL;
  int32_t *kh = NULL, *kv = NULL;
  int ksh = ow != w ? coefficients(w, ow, f, &bh, &kh) : -1, ksv = oh != h ? coefficients(h, oh, f, &bv, &kv) : -1;
  uint8_t *tmp = ksh > 0 && ksv > 0 ? malloc((size_t)ow * h * 3) : NULL;
  dit_status s = DIT_OK;
  if (!ksh || !ksv || (ksh > 0 && ksv > 0 && !tmp)) {
    s = dit_errorf(err, DIT_ERR_NOMEM, "resize: out of memory (%dx%d to %dx%d)", w, h, ow, oh);
  } else if (ksh > 0 && ksv > 0) { /* rows, then columns */
    resample(src, tmp, h, ow, 1, (size_t)w, 1, (size_t)ow, bh, kh, ksh);
    resample(tmp, dst, ow, oh, (size_t)ow, 1, (size_t)ow, 1, bv, kv, ksv);
  } else if (ksh > 0) {
    resample(src, dst, h, ow, 1, (size_t)w, 1, (size_t)ow, bh, kh, ksh);
  } else {
    resample(src, dst, w, oh, (size_t)w, 1, (size_t)w, 1, bv, kv, ksv);
  }
  free(tmp), free(bh), free(bv), free(kh), free(kv);
  return s;
}
