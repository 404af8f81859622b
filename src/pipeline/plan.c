/* Stages of a plan and the run's memory (see plan.h). */
#include "pipeline/plan.h"

#include <stdio.h>
#include <string.h>

#include "io/safetensors.h"

/* Adds the folder component's stored bytes by dtype from its files' headers (nothing else
 * is read) to by[] and *total. */
static dit_status add_weights(const dit_model_rt *rt, const char *component, size_t *by, size_t *total,
                              dit_error *err) {
  dit_component_src src;
  DIT_TRY(dit_component_source(rt, component, &src, err));
  dit_weights *w = NULL;
  DIT_TRY(dit_weights_open(src.path, NULL, &w, err));
  for (size_t i = 0; i < w->n_tensors; i++) {
    const dit_st_tensor *t = w->tensors[i];
    const size_t b = (size_t)(t->end - t->begin);
    if ((int)t->dtype >= 0 && (int)t->dtype < DIT_DTYPE_COUNT) by[t->dtype] += b;
    *total += b;
  }
  dit_weights_close(w);
  return DIT_OK;
}

/* The stage's weights: every component of `components` ("a+b" for a stage of two folders). */
static dit_status weights_of(const dit_model_rt *rt, const char *components, dit_plan_stage *st, dit_error *err) {
  size_t by[DIT_DTYPE_COUNT] = {0}, total = 0;
  for (const char *c = components; *c;) {
    const char *end = strchr(c, '+');
    const size_t n = end ? (size_t)(end - c) : strlen(c);
    char name[64];
    if (n == 0 || n >= sizeof name) return dit_errorf(err, DIT_ERR_INTERNAL, "plan: bad component list '%s'", components);
    memcpy(name, c, n);
    name[n] = 0;
    DIT_TRY(add_weights(rt, name, by, &total, err));
    c += n + (end ? 1 : 0);
  }
  st->weight_bytes = total;
  st->weight_dtypes[0] = 0;
  size_t used = 0;
  for (;;) { /* largest share first */
    int best = -1;
    for (int d = 0; d < DIT_DTYPE_COUNT; d++)
      if (by[d] && (best < 0 || by[d] > by[best])) best = d;
    if (best < 0 || used >= sizeof st->weight_dtypes) break;
    const double pct = 100.0 * (double)by[best] / (double)(total ? total : 1);
    int n = pct < 0.05 ? snprintf(st->weight_dtypes + used, sizeof st->weight_dtypes - used, "%s%s <0.1%%",
                                  used ? ", " : "", dit_dtype_name((dit_dtype)best))
                       : snprintf(st->weight_dtypes + used, sizeof st->weight_dtypes - used, "%s%s %.1f%%",
                                  used ? ", " : "", dit_dtype_name((dit_dtype)best), pct);
    if (n < 0) break;
    used += (size_t)n;
    by[best] = 0;
  }
  return DIT_OK;
}

dit_status dit_plan_add(const dit_model_rt *rt, dit_plan *pl, const dit_plan_run *r, dit_error *err) {
  if (pl->n_stages >= DIT_PLAN_MAX_STAGES)
    return dit_errorf(err, DIT_ERR_INTERNAL, "plan: more than %d stages", DIT_PLAN_MAX_STAGES);
  dit_plan_stage *st = &pl->stage[pl->n_stages];
  memset(st, 0, sizeof *st);
  snprintf(st->name, sizeof st->name, "%s", r->name);
  snprintf(st->component, sizeof st->component, "%s", r->component);
  st->keep_bit = r->keep_bit;
  st->act_bytes = r->cost.act_bytes;
  st->act_kept_bytes = r->kept_bytes;
  st->load_bytes = r->load_bytes;
  st->flops = r->cost.flops;
  st->runs = r->runs;
  dit_status s = weights_of(rt, r->component, st, err);
  if (s != DIT_OK) {
    dit_error_prefix(err, "%s", r->name);
    return s;
  }
  st->resident_weight_bytes = r->resident_weights && r->resident_weights < st->weight_bytes ? r->resident_weights
                                                                                            : st->weight_bytes;
  pl->n_stages++;
  return DIT_OK;
}

/* True when stage j's component was seen in an earlier stage than j. */
static bool seen_before(const dit_plan *pl, int j) {
  for (int k = 0; k < j; k++)
    if (!strcmp(pl->stage[k].component, pl->stage[j].component)) return true;
  return false;
}

void dit_plan_finish(dit_plan *pl) {
  size_t kept_weights = 0;
  for (int j = 0; j < pl->n_stages; j++)
    if ((pl->keep & pl->stage[j].keep_bit) && !seen_before(pl, j)) kept_weights += pl->stage[j].resident_weight_bytes;
  pl->flops = 0;
  pl->peak_bytes = 0;
  pl->peak_stage = 0;
  for (int i = 0; i < pl->n_stages; i++) {
    dit_plan_stage *st = &pl->stage[i];
    const bool kept = (pl->keep & st->keep_bit) != 0;
    const size_t own = (kept ? 0 : st->resident_weight_bytes) + st->act_bytes;
    size_t in_use = pl->base_bytes + kept_weights + (st->load_bytes > own ? st->load_bytes : own);
    for (int j = 0; j < i; j++) /* what kept components of earlier stages still hold */
      if ((pl->keep & pl->stage[j].keep_bit) && strcmp(pl->stage[j].component, st->component))
        in_use += pl->stage[j].act_kept_bytes;
    st->peak_bytes = in_use;
    if (in_use > pl->peak_bytes) pl->peak_bytes = in_use, pl->peak_stage = i;
    pl->flops += st->flops;
  }
}
