/* The planner's shared half (dit_model_plan, `ditrun plan`): a family's plan hook (family.h)
 * opens its components on the host (mapped, never run), asks each model what one run costs
 * at the request's geometry (core/cost.h) and appends its stages in run order with
 * dit_plan_add; dit_plan_finish then works out the memory in use during each stage. */
#ifndef DIT_PIPELINE_PLAN_H
#define DIT_PIPELINE_PLAN_H

#include "core/cost.h"
#include "ditrun.h"
#include "pipeline/model_rt.h"

/* A stage as a family plans it: `name` runs the folder's component `component` (keep_bit its
 * DIT_KEEP_* bit) `runs` times. cost.flops: over all runs; cost.act_bytes: what the stage
 * allocates beyond the weights (activations, tables, workspace and the host buffers the
 * pipeline holds through it), of which kept_bytes stay allocated with the component while it
 * is kept loaded; load_bytes: a transient of its loading, before its weights are read. */
typedef struct dit_plan_run {
  const char *name, *component;
  unsigned keep_bit;
  dit_cost cost;
  size_t kept_bytes, load_bytes;
  int runs;
  size_t resident_weights; /* 0: all the component's weights are resident; else this many at once (streamed) */
} dit_plan_run;

/* Appends r as the next stage, with the component's weights summed by dtype from its files'
 * headers. */
dit_status dit_plan_add(const dit_model_rt *rt, dit_plan *pl, const dit_plan_run *r, dit_error *err);

/* Stage by stage, the memory in use: the base, the weights of the components pl->keep holds,
 * what kept components allocated in earlier stages, and the larger of the stage's load
 * transient and its own component's weights plus act bytes; the peak and its stage; the run's
 * FLOPs. */
void dit_plan_finish(dit_plan *pl);

#endif
