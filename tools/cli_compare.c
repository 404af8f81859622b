/* `ditrun compare A.png B.png [--min-psnr DB] [--min-ssim S] [--json]`: PSNR, SSIM and the
 * differences of two images (see dit_compare_png). Exit 0; 1 when a --min-* bound is not met;
 * 2 for bad usage, unreadable or mismatched images. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_args.h"
#include "ditrun.h"

static void compare_usage(FILE *f) {
  fprintf(f,
          "usage: ditrun compare A.png B.png [--min-psnr DB] [--min-ssim S] [--json]\n"
          "  prints PSNR (dB, 8-bit range; inf when identical), SSIM (scikit-image's: 7x7 window,\n"
          "  per channel, then the mean), the largest and mean absolute difference and the count\n"
          "  of differing pixels\n"
          "  --min-psnr DB  exit 1 when PSNR is below DB\n"
          "  --min-ssim S   exit 1 when SSIM is below S\n"
          "  --json         one JSON object instead of lines\n");
}

typedef struct cmp_opts {
  const char *a, *b;
  double min_psnr, min_ssim;
  bool json;
} cmp_opts;

static int parse(int argc, char **argv, cmp_opts *o) {
  memset(o, 0, sizeof *o);
  o->min_psnr = o->min_ssim = -INFINITY;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      compare_usage(stdout);
      return 1;
    } else if (!strcmp(a, "--json")) {
      o->json = true;
    } else if (!strcmp(a, "--min-psnr") || !strcmp(a, "--min-ssim")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "ditrun compare: %s needs a value\n", a);
        return 2;
      }
      bool ok = a[6] == 'p' ? cli_parse_double("compare", a, argv[++i], 0, 1000, &o->min_psnr)
                            : cli_parse_double("compare", a, argv[++i], -1, 1, &o->min_ssim);
      if (!ok) return 2;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "ditrun compare: unknown option '%s'\n", a);
      compare_usage(stderr);
      return 2;
    } else if (!o->a) {
      o->a = a;
    } else if (!o->b) {
      o->b = a;
    } else {
      fprintf(stderr, "ditrun compare: more than two images\n");
      return 2;
    }
  }
  if (!o->b) {
    compare_usage(stderr);
    return 2;
  }
  return 0;
}

int cli_compare(int argc, char **argv) {
  cmp_opts o;
  int code, parsed = parse(argc, argv, &o);
  dit_ctx *ctx = cli_start("compare", parsed, 1, &code);
  if (!ctx) return code;
  dit_image_metrics m;
  dit_status s = dit_compare_png(ctx, o.a, o.b, &m);
  if (s != DIT_OK) {
    fprintf(stderr, "ditrun compare: %s: %s\n", dit_status_str(s), dit_ctx_last_error(ctx));
    dit_ctx_free(ctx);
    return s == DIT_ERR_NOMEM ? 1 : 2;
  }
  char psnr[32];
  if (isinf(m.psnr)) snprintf(psnr, sizeof psnr, o.json ? "\"inf\"" : "inf");
  else snprintf(psnr, sizeof psnr, "%.4f", m.psnr);
  if (o.json)
    printf("{\"width\": %d, \"height\": %d, \"channels\": %d, \"psnr\": %s, \"ssim\": %.10f, \"max_diff\": %d, "
           "\"mean_abs_diff\": %.6f, \"pixels_differing\": %llu}\n",
           m.width, m.height, m.channels, psnr, m.ssim, m.max_diff, m.mean_abs_diff, (unsigned long long)m.n_diff);
  else
    printf("size: %dx%d, %d channels\npsnr: %s dB\nssim: %.10f\nmax diff: %d\nmean abs diff: %.6f\n"
           "pixels differing: %llu of %llu\n",
           m.width, m.height, m.channels, psnr, m.ssim, m.max_diff, m.mean_abs_diff, (unsigned long long)m.n_diff,
           (unsigned long long)m.width * (unsigned long long)m.height);
  int rc = 0;
  if (m.psnr < o.min_psnr) fprintf(stderr, "ditrun compare: PSNR %s dB is below %g\n", psnr, o.min_psnr), rc = 1;
  if (m.ssim < o.min_ssim) fprintf(stderr, "ditrun compare: SSIM %.6f is below %g\n", m.ssim, o.min_ssim), rc = 1;
  dit_ctx_free(ctx);
  return rc;
}
