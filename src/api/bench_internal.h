/* Pieces of ditrun bench (bench.c) shared with the end-to-end benchmark (bench_e2e.c). */
#ifndef DIT_API_BENCH_INTERNAL_H
#define DIT_API_BENCH_INTERNAL_H

#include "backend/backend.h"
#include "core/ctx.h"
#include "ditrun.h"
#include "pipeline/zimage_pipeline.h"

/* Range checks of p (arch, resolution, text length, iterations, dtype, overrides). */
dit_status dit_bench_check_params(const dit_bench_params *p, dit_error *err);
/* Device memory in use now (whole GPU), 0 on the CPU. */
size_t dit_bench_device_used(const dit_bench_params *p);
/* The backend p asks for (CPU with its precision, or CUDA device p->cuda_device). */
dit_status dit_bench_make_backend(dit_ctx *ctx, const dit_bench_params *p, dit_backend **be, dit_error *err);

/* The median of v[0..n) (n >= 1); sorts v. */
double dit_bench_median(double *v, int n);
/* After a profiled run on the profiling backend prof: waits for its device times and copies
 * the per-op split and the linear / conv shapes into r. */
dit_status dit_bench_take_profile(dit_backend *prof, dit_bench_result *r, dit_error *err);
/* The profiled run's lines of dit_bench_print. */
void dit_bench_print_profile(const dit_bench_result *r, FILE *f);

#endif
