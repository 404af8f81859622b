/* Strict CLI number parsing (see cli_args.h). */
#include "cli_args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

bool cli_parse_int(const char *cmd, const char *opt, const char *s, long min, long max, int *out) {
  if (!plain_decimal(s, true, false)) {
    fprintf(stderr, "ditrun %s: %s: '%s' is not an integer\n", cmd, opt, s ? s : "");
    return false;
  }
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
  if (!plain_decimal(s, false, false)) {
    fprintf(stderr, "ditrun %s: %s: '%s' is not a non-negative integer\n", cmd, opt, s ? s : "");
    return false;
  }
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
  if (!plain_decimal(s, true, true)) {
    fprintf(stderr, "ditrun %s: %s: '%s' is not a decimal number\n", cmd, opt, s ? s : "");
    return false;
  }
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
