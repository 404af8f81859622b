/* The family registry (see family.h). Each family defines its row (a dit_family named
 * dit_family_<name>) in its pipeline file; DIT_FAMILIES below is the one line per family. */
#include "pipeline/family.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "pipeline/model_defaults.h"

#define DIT_FAMILIES(X) \
  X(zimage)             \
  X(flux2_klein)        \
  X(flux1)              \
  X(krea2)              \
  X(ltx2)               \
  X(minimax_h3)

#define DIT_FAMILY_DECLARE(n) extern const dit_family dit_family_##n;
#define DIT_FAMILY_REF(n) &dit_family_##n,
DIT_FAMILIES(DIT_FAMILY_DECLARE)
static const dit_family *const families[] = {DIT_FAMILIES(DIT_FAMILY_REF)};

size_t dit_family_count(void) { return sizeof families / sizeof *families; }

const dit_family *dit_family_at(size_t i) { return i < dit_family_count() ? families[i] : NULL; }

const dit_family *dit_family_find(const char *class_name) {
  if (!class_name) return NULL;
  for (size_t i = 0; i < dit_family_count(); i++)
    for (const char *const *p = families[i]->pipelines; *p; p++)
      if (!strcmp(*p, class_name)) return families[i];
  return NULL;
}

/* Appends ", s" (or s first) to buf; false when it no longer fits. */
static bool list_add(char *buf, size_t len, size_t *used, const char *s) {
  int n = snprintf(buf + *used, len - *used, "%s%s", *used ? ", " : "", s);
  if (n < 0 || (size_t)n >= len - *used) return false;
  *used += (size_t)n;
  return true;
}

const char *dit_family_pipeline_list(char *buf, size_t len) {
  size_t used = 0;
  if (len) buf[0] = 0;
  for (size_t i = 0; i < dit_family_count(); i++)
    for (const char *const *p = families[i]->pipelines; *p; p++)
      if (!list_add(buf, len, &used, *p)) return buf;
  return buf;
}

dit_status dit_family_of(const dit_model_dir *dir, const dit_family **out, dit_error *err) {
  *out = dit_family_find(dir->pipeline);
  if (*out) return DIT_OK;
  char list[512];
  return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: pipeline \"%s\" is not supported (supported: %s)", dir->root,
                    dir->pipeline ? dir->pipeline : "?", dit_family_pipeline_list(list, sizeof list));
}

const dit_bench_variant *dit_bench_variant_at(size_t i, const dit_family **fam) {
  for (size_t f = 0; f < dit_family_count(); f++)
    for (const dit_bench_variant *v = families[f]->bench; v && v->name; v++)
      if (i-- == 0) {
        if (fam) *fam = families[f];
        return v;
      }
  return NULL;
}

const dit_bench_variant *dit_bench_variant_find(const char *name) {
  const dit_bench_variant *v;
  for (size_t i = 0; name && (v = dit_bench_variant_at(i, NULL)); i++)
    if (!strcmp(v->name, name)) return v;
  return NULL;
}

const char *dit_bench_variant_list(char *buf, size_t len) {
  size_t used = 0;
  const dit_bench_variant *v;
  if (len) buf[0] = 0;
  for (size_t i = 0; (v = dit_bench_variant_at(i, NULL)); i++)
    if (!list_add(buf, len, &used, v->name)) break;
  return buf;
}

dit_status dit_family_model_defaults(const dit_family *f, const dit_model_dir *dir, dit_gen_defaults *d,
                                     dit_error *err) {
  DIT_TRY(f->defaults(dir, d, err));
  return dit_model_defaults_apply(dir, d, err);
}
