/* dit_model_plan_fit: the cheapest changes that bring a planned run within a memory limit
 * (see ditrun.h). In order of cost: releasing components after their stage, then VAE tiles
 * from the largest down. */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "core/ctx.h"
#include "core/timer.h"

#define FIT_MARGIN 1.05

static const int fit_tiles[] = {128, 96, 64, 48, 32};

static bool fits(const dit_plan *pl, size_t limit) { return (double)pl->peak_bytes * FIT_MARGIN <= (double)limit; }

static double mib(size_t b) { return (double)b / 1048576.0; }

/* The machine's available memory plus this process's own, or 0 when unknown. */
static size_t available_bytes(dit_device_kind dev) {
  size_t free_b = 0, total_b = 0;
  dit_error e;
  if (dit_backend_mem_info(dev, 0, &free_b, &total_b, &e) != DIT_OK) return 0;
  return free_b + (dev == DIT_DEVICE_CPU ? dit_rss_bytes() : 0);
}

dit_status dit_model_plan_fit(dit_ctx *ctx, dit_gen_params *p, dit_model_opts *o, size_t limit, dit_plan *out,
                              char *what, size_t len) {
  dit_error *err = &ctx->err;
  if (what && len) what[0] = 0;
  if (!p || !o || !out) {
    dit_error_clear(err);
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "plan fit: no parameters");
  }
  if (!limit) limit = available_bytes(o->device);
  DIT_TRY(dit_model_plan(ctx, p, o, out));
  if (!limit || fits(out, limit)) return DIT_OK;
  const size_t asked = out->peak_bytes;
  dit_plan best = *out, pl;
  dit_gen_params q = *p, best_q = *p;
  dit_model_opts mo = *o, best_o = *o;
  mo.keep = 0;
  char chosen[160] = "";
  bool ok = false;
  if (o->keep) {
    DIT_TRY(dit_model_plan(ctx, &q, &mo, &pl));
    if (pl.peak_bytes < best.peak_bytes) best = pl, best_q = q, best_o = mo;
    if ((ok = fits(&pl, limit))) snprintf(chosen, sizeof chosen, "each component loaded for its stage only");
  }
  for (size_t i = 0; !ok && i < sizeof fit_tiles / sizeof *fit_tiles; i++) {
    if (p->vae_tile && p->vae_tile <= fit_tiles[i]) continue; /* already as small */
    q.vae_tile = fit_tiles[i];
    DIT_TRY(dit_model_plan(ctx, &q, &mo, &pl));
    if (pl.peak_bytes < best.peak_bytes) best = pl, best_q = q, best_o = mo;
    if ((ok = fits(&pl, limit)))
      snprintf(chosen, sizeof chosen, "%sthe VAE decoded in tiles of %d latent pixels",
               o->keep ? "each component loaded for its stage only and " : "", fit_tiles[i]);
  }
  *p = best_q, *o = best_o, *out = best;
  if (ok) {
    if (what && len)
      snprintf(what, len, "to fit %.0f MiB: %s (planned peak %.0f MiB; %.0f MiB as asked)", mib(limit), chosen,
               mib(best.peak_bytes), mib(asked));
    dit_error_clear(err);
    return DIT_OK;
  }
  char tiles[64] = "the VAE whole";
  if (best_q.vae_tile) snprintf(tiles, sizeof tiles, "VAE tiles of %d latent pixels", best_q.vae_tile);
  return dit_errorf(err, DIT_ERR_INVALID_ARG,
                    "the run does not fit %.0f MiB: it needs %.0f MiB as asked and %.0f MiB at the least (%s, %s), "
                    "so at least %.0f MiB with the planner's 5%% margin",
                    mib(limit), mib(asked), mib(best.peak_bytes),
                    best_o.keep ? "components kept" : "each component loaded for its stage only", tiles,
                    mib((size_t)((double)best.peak_bytes * FIT_MARGIN)) + 1);
}
