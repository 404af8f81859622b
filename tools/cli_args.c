/* Strict CLI number parsing (see cli_args.h). */
#include "cli_args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool plain_decimal(const char *s, bool allow_sign, bool allow_frac) {
  if (!s || !*s) return false;
  const char *p = s;
  if (allow_sign && (*p == '-' || *p == '+')) p++;
  bool digits = false, dot = false, exp = false;
  for (; *p; p++) {
    if (isdigit((unsigned char)*p)) {
      digits = true;
    } else if (allow_frac && *p == '.' && !dot && !exp) {
      dot = true;
    } else if (allow_frac && (*p == 'e' || *p == 'E') && digits && !exp) {
      exp = true;
      digits = false;
      if (p[1] == '-' || p[1] == '+') p++;
    } else {
      return false;
    }
  }
  return digits;
}

/* s is a plain decimal number of the kind asked for; else prints "ditrun CMD: OPT: 's' is
 * not WHAT" and returns false. */
static bool decimal_text(const char *cmd, const char *opt, const char *s, bool allow_sign, bool allow_frac,
                         const char *what) {
  if (plain_decimal(s, allow_sign, allow_frac)) return true;
  fprintf(stderr, "ditrun %s: %s: '%s' is not %s\n", cmd, opt, s ? s : "", what);
  return false;
}

bool cli_parse_int(const char *cmd, const char *opt, const char *s, long min, long max, int *out) {
  if (!decimal_text(cmd, opt, s, true, false, "an integer")) return false;
  errno = 0;
  long v = strtol(s, NULL, 10);
  if (errno == ERANGE || v < min || v > max) {
    fprintf(stderr, "ditrun %s: %s: %s is outside %ld..%ld\n", cmd, opt, s, min, max);
    return false;
  }
  *out = (int)v;
  return true;
}

bool cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out) {
  if (!decimal_text(cmd, opt, s, false, false, "a non-negative integer")) return false;
  errno = 0;
  unsigned long long v = strtoull(s, NULL, 10);
  if (errno == ERANGE) {
    fprintf(stderr, "ditrun %s: %s: %s does not fit in 64 bits\n", cmd, opt, s);
    return false;
  }
  *out = (uint64_t)v;
  return true;
}

bool cli_parse_double(const char *cmd, const char *opt, const char *s, double min, double max, double *out) {
  if (!decimal_text(cmd, opt, s, true, true, "a decimal number")) return false;
  errno = 0;
  double v = strtod(s, NULL);
  if (errno == ERANGE || !isfinite(v)) {
    fprintf(stderr, "ditrun %s: %s: %s is out of range\n", cmd, opt, s);
    return false;
  }
  if (v < min || v > max) {
    fprintf(stderr, "ditrun %s: %s: %s is outside %g..%g\n", cmd, opt, s, min, max);
    return false;
  }
  *out = v;
  return true;
}

bool cli_parse_size(const char *cmd, const char *opt, const char *s, size_t *out) {
  char num[64];
  size_t n = 0;
  while (s && s[n] && (isdigit((unsigned char)s[n]) || s[n] == '.') && n + 1 < sizeof num) num[n] = s[n], n++;
  num[n] = 0;
  const char *unit = s ? s + n : "";
  static const char *const units[] = {"", "K", "M", "G", "T"};
  int k = -1;
  for (int i = 0; i < 5 && k < 0; i++) {
    const size_t ul = strlen(units[i]);
    if (!strncasecmp(unit, units[i], ul) &&
        (!unit[ul] || ((!strcasecmp(unit + ul, "B") || !strcasecmp(unit + ul, "iB")) && i > 0)))
      k = i;
  }
  if (!n || k < 0) {
    fprintf(stderr, "ditrun %s: %s: '%s' is not a size (a number with K, M, G or T: 24G, 512M, 1.5GiB)\n", cmd, opt,
            s ? s : "");
    return false;
  }
  if (!decimal_text(cmd, opt, num, false, true, "a size such as 24G, 512M or 1.5GiB")) return false;
  double v = strtod(num, NULL);
  for (int i = 0; i < k; i++) v *= 1024.0;
  if (!(v >= 1 && v < 1e18)) {
    fprintf(stderr, "ditrun %s: %s: %s is out of range\n", cmd, opt, s);
    return false;
  }
  *out = (size_t)v;
  return true;
}

int cli_parse_choice(const char *cmd, const char *opt, const char *s, const char *const *names, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (s && !strcmp(s, names[k])) return (int)k;
  fprintf(stderr, "ditrun %s: %s: '%s' is not ", cmd, opt, s ? s : "");
  for (size_t k = 0; k < n; k++) fprintf(stderr, "%s%s", k == 0 ? "" : k + 1 < n ? ", " : " or ", names[k]);
  fprintf(stderr, "\n");
  return -1;
}

/* The weight types in ggml's spelling, and the dtypes they stand for; the first two are
 * element types, the rest block types. */
/* element types, the block types (what quantize writes to GGUF), fp8 ("fp8": e4m3) */
static const char *const wtype_names[] = {"bf16", "f32",  "q8_0", "q6_k", "q5_k",    "q5_1",    "q5_0", "q4_k",
                                          "q4_1", "q4_0", "q3_k", "q2_k", "f8_e4m3", "f8_e5m2", "fp8"};
static const dit_dtype wtype_dtypes[] = {DIT_BF16, DIT_F32,  DIT_Q8_0, DIT_Q6_K, DIT_Q5_K,    DIT_Q5_1,    DIT_Q5_0,
                                         DIT_Q4_K, DIT_Q4_1, DIT_Q4_0, DIT_Q3_K, DIT_Q2_K,    DIT_F8_E4M3, DIT_F8_E5M2,
                                         DIT_F8_E4M3};
enum { WT_FIRST_BLOCK = 2, WT_N_BLOCK = 10 };

bool cli_parse_wtype(const char *cmd, const char *opt, const char *s, bool blocks_only, dit_dtype *out) {
  size_t first = blocks_only ? WT_FIRST_BLOCK : 0;
  size_t n = blocks_only ? WT_N_BLOCK : sizeof wtype_names / sizeof *wtype_names;
  int k = cli_parse_choice(cmd, opt, s, wtype_names + first, n);
  if (k >= 0) *out = wtype_dtypes[first + (size_t)k];
  return k >= 0;
}

bool cli_parse_cpu_precision(const char *cmd, const char *s, dit_cpu_precision *out) {
  static const char *const names[] = {"fp32", "bf16"}; /* index: dit_cpu_precision */
  int k = cli_parse_choice(cmd, "--cpu-precision", s, names, 2);
  if (k >= 0) *out = (dit_cpu_precision)k;
  return k >= 0;
}

bool cli_parse_gpu_precision(const char *cmd, const char *s, dit_gpu_precision *out) {
  static const char *const names[] = {"bf16", "fp8"}; /* index: dit_gpu_precision */
  int k = cli_parse_choice(cmd, "--precision", s, names, 2);
  if (k >= 0) *out = (dit_gpu_precision)k;
  return k >= 0;
}

bool cli_parse_lora(const char *cmd, const char *v, char *path, size_t len, dit_lora *out) {
  char *end = NULL;
  const char *colon = strrchr(v, ':');
  double scale = colon && colon[1] ? strtod(colon + 1, &end) : 1.0;
  bool has_scale = colon && end && !*end && end != colon + 1;
  if (has_scale && !isfinite(scale)) {
    fprintf(stderr, "ditrun %s: --lora %s: the scale is not a finite number\n", cmd, v);
    return false;
  }
  size_t n = has_scale ? (size_t)(colon - v) : strlen(v);
  if (!n || n >= len) {
    fprintf(stderr, "ditrun %s: --lora: '%s' is not FILE or FILE:SCALE\n", cmd, v);
    return false;
  }
  snprintf(path, len, "%.*s", (int)n, v);
  *out = (dit_lora){path, has_scale ? scale : 1.0};
  return true;
}

dit_ctx *cli_start(const char *cmd, int parsed, int threads, int *code) {
  *code = parsed == 1 ? 0 : 2;
  if (parsed) return NULL;
  *code = 1;
  dit_ctx_params cp;
  dit_ctx_params_default(&cp);
  cp.n_threads = threads;
  dit_ctx *ctx = NULL;
  if (dit_ctx_create(&cp, &ctx) != DIT_OK) {
    fprintf(stderr, "ditrun %s: out of memory\n", cmd);
    return NULL;
  }
  return ctx;
}

const char *cli_opt_value(int argc, char **argv, int *i, const char *shrt, const char *lng, bool *matched,
                          bool *bad) {
  const char *a = argv[*i];
  *matched = false;
  size_t ll = lng ? strlen(lng) : 0;
  if (lng && !strncmp(a, lng, ll) && a[ll] == '=') {
    *matched = true;
    return a + ll + 1;
  }
  if ((shrt && !strcmp(a, shrt)) || (lng && !strcmp(a, lng))) {
    *matched = true;
    if (*i + 1 >= argc) {
      *bad = true;
      return NULL;
    }
    (*i)++;
    return argv[*i];
  }
  return NULL;
}

static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return 64;
  size_t row[65];
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

const char *cli_closest(const char *arg, const char *const *names, size_t n) {
  char key[80];
  snprintf(key, sizeof key, "%s", arg);
  char *eq = strchr(key, '='); /* "--widht=5": compare the name only */
  if (eq) *eq = 0;
  const char *best = NULL;
  size_t best_d = (size_t)-1, klen = strlen(key);
  for (size_t i = 0; i < n; i++) {
    size_t d = edit_distance(key, names[i]);
    if (klen >= 4 && !strncmp(names[i], key, klen)) d = 1; /* an unambiguous start of the name */
    if (d < best_d) best_d = d, best = names[i];
  }
  size_t limit = klen <= 4 ? 1 : klen <= 8 ? 2 : 3;
  return best_d <= limit ? best : NULL;
}

void cli_unknown_option(const char *cmd, const char *arg, const char *const *names, size_t n) {
  const char *c = cli_closest(arg, names, n);
  if (c)
    fprintf(stderr, "ditrun %s: unknown option '%s'; did you mean '%s'? (see ditrun %s --help)\n", cmd, arg, c, cmd);
  else
    fprintf(stderr, "ditrun %s: unknown option '%s' (see ditrun %s --help)\n", cmd, arg, cmd);
}
