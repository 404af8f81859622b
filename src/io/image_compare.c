/* `ditrun compare` (see dit_compare_png in ditrun.h): both PNGs decoded to 8-bit RGB (RGBA
 * when either has alpha) by libpng's simplified reader, then PSNR, scikit-image's SSIM and
 * difference counts in double precision. SSIM follows skimage.metrics.structural_similarity
 * with its defaults for 8-bit images (win_size 7, uniform filter with scipy's 'reflect'
 * border, sample covariance, K1 0.01, K2 0.03, data_range 255): the SSIM map's mean over the
 * pixels at least 3 from the border, averaged over the channels. */
#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"

#define WIN 7
#define MAX_PIXELS ((size_t)1 << 28)

typedef struct image {
  png_image im;
  uint8_t *px;
} image;

static dit_status read_png(const char *path, image *m, bool *alpha, dit_error *err) {
  memset(m, 0, sizeof *m);
  m->im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&m->im, path))
    return dit_errorf(err, DIT_ERR_FORMAT, "%s: cannot read as PNG: %s", path, m->im.message);
  *alpha = (m->im.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  if ((size_t)m->im.width * m->im.height > MAX_PIXELS) {
    png_image_free(&m->im);
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: %ux%u is too large to compare", path, m->im.width, m->im.height);
  }
  return DIT_OK;
}

static dit_status decode(const char *path, image *m, bool alpha, dit_error *err) {
  m->im.format = alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
  m->px = malloc(PNG_IMAGE_SIZE(m->im));
  if (!m->px) {
    png_image_free(&m->im);
    return dit_errorf(err, DIT_ERR_NOMEM, "%s: out of memory for its pixels", path);
  }
  if (!png_image_finish_read(&m->im, NULL, m->px, 0, NULL)) {
    dit_status s = dit_errorf(err, DIT_ERR_FORMAT, "%s: cannot decode: %s", path, m->im.message);
    free(m->px);
    m->px = NULL;
    return s;
  }
  return DIT_OK;
}

/* scipy.ndimage's 'reflect' index: d c b a | a b c d | d c b a. */
static int reflect(int i, int n) {
  while (i < 0 || i >= n) i = i < 0 ? -i - 1 : 2 * n - i - 1;
  return i;
}

/* out = the 7-wide mean of in along x then y (separable, as scipy's uniform_filter). */
static void mean_filter(const double *in, double *tmp, double *out, int w, int h) {
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      double s = 0;
      for (int k = -WIN / 2; k <= WIN / 2; k++) s += in[y * w + reflect(x + k, w)];
      tmp[y * w + x] = s / WIN;
    }
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      double s = 0;
      for (int k = -WIN / 2; k <= WIN / 2; k++) s += tmp[reflect(y + k, h) * w + x];
      out[y * w + x] = s / WIN;
    }
}

/* SSIM of channel c; buf holds 11 planes of w*h doubles. */
static double ssim_channel(const uint8_t *a, const uint8_t *b, int w, int h, int ch, int c, double *buf) {
  const size_t n = (size_t)w * h;
  double *x = buf, *y = x + n, *xx = y + n, *yy = xx + n, *xy = yy + n, *t = xy + n;
  double *ux = t + n, *uy = ux + n, *uxx = uy + n, *uyy = uxx + n, *uxy = uyy + n;
  for (size_t i = 0; i < n; i++) {
    x[i] = a[i * ch + c], y[i] = b[i * ch + c];
    xx[i] = x[i] * x[i], yy[i] = y[i] * y[i], xy[i] = x[i] * y[i];
  }
  mean_filter(x, t, ux, w, h);
  mean_filter(y, t, uy, w, h);
  mean_filter(xx, t, uxx, w, h);
  mean_filter(yy, t, uyy, w, h);
  mean_filter(xy, t, uxy, w, h);
  const double R = 255.0, C1 = (0.01 * R) * (0.01 * R), C2 = (0.03 * R) * (0.03 * R);
  const double np_ = WIN * WIN, cov_norm = np_ / (np_ - 1);
  const int pad = (WIN - 1) / 2;
  double sum = 0;
  long cnt = 0;
  for (int yi = pad; yi < h - pad; yi++)
    for (int xi = pad; xi < w - pad; xi++) {
      size_t i = (size_t)yi * w + xi;
      double vx = cov_norm * (uxx[i] - ux[i] * ux[i]), vy = cov_norm * (uyy[i] - uy[i] * uy[i]);
      double vxy = cov_norm * (uxy[i] - ux[i] * uy[i]);
      double A1 = 2 * ux[i] * uy[i] + C1, A2 = 2 * vxy + C2, B1 = ux[i] * ux[i] + uy[i] * uy[i] + C1, B2 = vx + vy + C2;
      sum += (A1 * A2) / (B1 * B2);
      cnt++;
    }
  return sum / (double)cnt;
}

static dit_status metrics(const image *A, const image *B, int ch, dit_image_metrics *m, dit_error *err) {
  const int w = (int)A->im.width, h = (int)A->im.height;
  const size_t n = (size_t)w * h;
  double se = 0, sad = 0;
  int mx = 0;
  uint64_t nd = 0;
  for (size_t i = 0; i < n; i++) {
    bool d = false;
    for (int c = 0; c < ch; c++) {
      int e = (int)A->px[i * ch + c] - (int)B->px[i * ch + c], ae = e < 0 ? -e : e;
      se += (double)e * e, sad += ae, d = d || ae, mx = ae > mx ? ae : mx;
    }
    nd += d;
  }
  const double total = (double)n * ch, mse = se / total;
  m->width = w, m->height = h, m->channels = ch;
  m->psnr = mse == 0 ? INFINITY : 10.0 * log10(255.0 * 255.0 / mse);
  m->max_diff = mx, m->mean_abs_diff = sad / total, m->n_diff = nd;
  double *buf = malloc(11 * n * sizeof *buf);
  if (!buf) return dit_errorf(err, DIT_ERR_NOMEM, "compare: out of memory for %dx%d", w, h);
  double s = 0;
  for (int c = 0; c < ch; c++) s += ssim_channel(A->px, B->px, w, h, ch, c, buf);
  free(buf);
  m->ssim = s / ch;
  return DIT_OK;
}

static dit_status compare(const char *pa, const char *pb, dit_image_metrics *out, dit_error *err) {
  image A, B;
  bool aa, ab;
  DIT_TRY(read_png(pa, &A, &aa, err));
  dit_status s = read_png(pb, &B, &ab, err);
  if (s != DIT_OK) {
    png_image_free(&A.im);
    return s;
  }
  if (A.im.width != B.im.width || A.im.height != B.im.height || A.im.width < WIN || A.im.height < WIN) {
    s = dit_errorf(err, DIT_ERR_INVALID_ARG, "compare: %s is %ux%u and %s is %ux%u (same size, at least %dx%d, needed)",
                   pa, A.im.width, A.im.height, pb, B.im.width, B.im.height, WIN, WIN);
    png_image_free(&A.im);
    png_image_free(&B.im);
    return s;
  }
  const bool alpha = aa || ab;
  s = decode(pa, &A, alpha, err);
  if (s == DIT_OK) s = decode(pb, &B, alpha, err);
  else png_image_free(&B.im);
  if (s == DIT_OK) s = metrics(&A, &B, alpha ? 4 : 3, out, err);
  free(A.px);
  free(B.px);
  return s;
}

dit_status dit_compare_png(dit_ctx *ctx, const char *a, const char *b, dit_image_metrics *out) {
  dit_error err = {0};
  dit_status s = a && b && out ? compare(a, b, out, &err)
                               : dit_errorf(&err, DIT_ERR_INVALID_ARG, "dit_compare_png: two paths and an output needed");
  return s == DIT_OK ? DIT_OK : dit_ctx_fail(ctx, &err);
}
