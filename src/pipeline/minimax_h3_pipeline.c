/* MiniMax-H3's t2va run (see minimax_h3_pipeline.h). */
#include "pipeline/minimax_h3_pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "io/json.h"
#include "io/model_dir.h"
#include "io/png.h"
#include "pipeline/family.h"
#include "pipeline/minimax_h3_layout.h"
#include "pipeline/minimax_h3_sched.h"
#include "pipeline/pipeline_common.h"
#include "pipeline/plan.h"
#include "pipeline/rng_torch.h"

#define MAX_PROMPT_TOKENS 4096
#define MAX_SIDE 8192

static const float k_pixel_mean[3] = {0.485f, 0.456f, 0.406f}, k_pixel_std[3] = {0.229f, 0.224f, 0.225f};

/* scheduler_config.json's shift (MiniMaxH3Scheduler). */
static dit_status read_shift(const char *dir, const char *sub, double def, double *out, dit_error *err) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s/scheduler_config.json", dir, sub);
  json_t *j = NULL;
  DIT_TRY(dit_json_load_file(path, 1u << 20, &j, err));
  const char *cls = NULL;
  dit_status s = dit_json_string_opt(j, "_class_name", &cls, path, err);
  if (s == DIT_OK && cls && strcmp(cls, "MiniMaxH3Scheduler") != 0)
    s = dit_errorf(err, DIT_ERR_FORMAT, "%s: _class_name \"%s\" is not MiniMaxH3Scheduler", path, cls);
  *out = def;
  if (s == DIT_OK) s = dit_json_double_opt(j, "shift", out, path, err);
  if (s == DIT_OK && !(*out > 0.0)) s = dit_errorf(err, DIT_ERR_FORMAT, "%s: shift %g is not positive", path, *out);
  json_decref(j);
  return s;
}

dit_status dit_h3_parts_configs(const char *dir, dit_h3_parts *p, dit_error *err) {
  char sub[4096];
#define SUB(name) (snprintf(sub, sizeof sub, "%s/%s", dir, name), sub)
  DIT_TRY(dit_h3_read_config(SUB("transformer"), &p->tc, err));
  DIT_TRY(dit_h3_vae_read_config(SUB("vae"), &p->vc, err));
  DIT_TRY(dit_h3_audio_read_config(SUB("audio_vae"), &p->ac, err));
#undef SUB
  DIT_TRY(read_shift(dir, "scheduler", 12.0, &p->video_shift, err));
  return read_shift(dir, "audio_scheduler", 3.0, &p->audio_shift, err);
}

dit_status dit_h3_parts_load(dit_backend *be, const char *dir, dit_h3_parts *p, dit_error *err) {
  memset(p, 0, sizeof *p);
  char sub[4096];
  dit_status s = dit_h3_parts_configs(dir, p, err);
#define SUB(name) (snprintf(sub, sizeof sub, "%s/%s", dir, name), sub)
  if (s == DIT_OK) s = dit_tok_load(SUB("tokenizer"), &p->tok, err);
  if (s == DIT_OK) s = dit_qwen3_load(be, SUB("text_encoder"), &p->te, err);
  if (s == DIT_OK) s = dit_h3_load(be, SUB("transformer"), &p->tr, err);
  if (s == DIT_OK) s = dit_h3_vae_load(be, SUB("vae"), &p->vae, err);
  if (s == DIT_OK) s = dit_h3_audio_load(be, SUB("audio_vae"), &p->audio, err);
#undef SUB
  if (s != DIT_OK) dit_h3_parts_free(p);
  return s;
}

void dit_h3_parts_free(dit_h3_parts *p) {
  if (!p) return;
  if (!p->slots) {
    dit_tok_free(p->tok);
    dit_qwen3_free(p->te);
    dit_h3_free(p->tr);
    dit_h3_vae_free(p->vae);
    dit_h3_audio_free(p->audio);
  }
  memset(p, 0, sizeof *p);
}

/* The family's decoders: both VAEs, one component (DIT_SLOT_VAE). */
typedef struct h3_decoders {
  dit_h3_vae *vae;
  dit_h3_audio *audio;
} h3_decoders;

/* The component of a stage into p: from the family's slot (loaded when not resident), or already there. */
static dit_status part_get(dit_h3_parts *p, int slot, dit_error *err) {
  if (p->slots) {
    void *obj = NULL;
    DIT_TRY(dit_component_get(p->rt, p->slots, slot, &obj, err));
    if (slot == DIT_SLOT_TEXT) p->tok = ((dit_text_encoder *)obj)->tok, p->te = ((dit_text_encoder *)obj)->te;
    if (slot == DIT_SLOT_TRANSFORMER) p->tr = obj;
    if (slot == DIT_SLOT_VAE) p->vae = ((h3_decoders *)obj)->vae, p->audio = ((h3_decoders *)obj)->audio;
  }
  const bool there = slot == DIT_SLOT_TEXT ? p->tok && p->te : slot == DIT_SLOT_TRANSFORMER ? p->tr != NULL
                                                                                           : p->vae && p->audio;
  return there ? DIT_OK : dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: a component is not loaded");
}

/* After its stage: the family's slot hands the component back (freed unless kept). */
static void part_done(dit_h3_parts *p, int slot) {
  if (!p->slots) return;
  dit_component_done(p->rt, p->slots, slot);
  if (slot == DIT_SLOT_TEXT) p->tok = NULL, p->te = NULL;
  if (slot == DIT_SLOT_TRANSFORMER) p->tr = NULL;
  if (slot == DIT_SLOT_VAE) p->vae = NULL, p->audio = NULL;
}

void dit_h3_result_free(dit_h3_result *r) {
  if (!r) return;
  free(r->video), free(r->audio), free(r->latents), free(r->audio_latents);
  memset(r, 0, sizeof *r);
}

/* The prompt verbatim (no template, no special tokens) through the text encoder: *embeds [n, hidden] (host). */
static dit_status encode_prompt(dit_backend *be, const dit_h3_parts *p, const char *prompt, float **embeds, int *n,
                                dit_error *err) {
  const dit_qwen3_config *qc = dit_qwen3_get_config(p->te);
  if (qc->num_layers <= DIT_H3_TEXT_LAYER)
    return dit_errorf(err, DIT_ERR_FORMAT, "minimax-h3: the text encoder has %d layers; the model conditions on "
                      "hidden_states[%d]", qc->num_layers, DIT_H3_TEXT_LAYER);
  if (qc->hidden_size != p->tc.text_dim)
    return dit_errorf(err, DIT_ERR_FORMAT, "minimax-h3: the text encoder's width %d is not the transformer's "
                      "text_dim %d", qc->hidden_size, p->tc.text_dim);
  int32_t *ids = NULL;
  size_t count = 0;
  DIT_TRY(dit_tok_encode(p->tok, prompt, strlen(prompt), &ids, &count, err));
  if (count < 1 || count > MAX_PROMPT_TOKENS) {
    free(ids);
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: the prompt has %zu tokens (1..%d)", count,
                      MAX_PROMPT_TOKENS);
  }
  const int H = qc->hidden_size, layer = DIT_H3_TEXT_LAYER;
  dit_qwen3_set_stream(p->te, true); /* the 32B encoder: about one layer of it resident at a time (CPU) */
  const size_t bytes = count * (size_t)H * sizeof(float);
  float *host = malloc(bytes);
  void *dev = NULL;
  dit_status s = host ? be->ops->alloc(be, bytes, &dev, err) : dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  float *const outs[1] = {dev};
  if (s == DIT_OK) s = dit_qwen3_encode(p->te, 1, (int)count, ids, NULL, 1, &layer, outs, err);
  if (s == DIT_OK) s = be->ops->download(be, host, dev, bytes, err);
  if (dev) be->ops->free(be, dev);
  free(ids);
  if (s != DIT_OK) {
    free(host);
    return s;
  }
  *embeds = host, *n = (int)count;
  return DIT_OK;
}

/* The request's geometry. */
typedef struct h3_geom {
  int T, lh, lw, Na, pt, ph, pw, C, Ca, pd; /* latent frames, latent size, audio latents, patch, channels */
} h3_geom;

static dit_status geometry(const dit_h3_parts *p, const dit_h3_request *r, h3_geom *g, dit_error *err) {
  const dit_h3_config *tc = &p->tc;
  const dit_h3_vae_config *vc = &p->vc;
  const int ratio = vc->patch, clip = vc->clip_length, keep = (clip + vc->patch_t - 1) / vc->patch_t;
  g->pt = tc->patch[0], g->ph = tc->patch[1], g->pw = tc->patch[2], g->C = tc->in_channels;
  g->Ca = tc->audio_channels, g->pd = tc->patch_dim;
  if (r->height < 1 || r->width < 1 || r->height > MAX_SIDE || r->width > MAX_SIDE || r->height % (ratio * g->ph) ||
      r->width % (ratio * g->pw))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: %dx%d is not a size in multiples of %d x %d up to %d",
                      r->width, r->height, ratio * g->pw, ratio * g->ph, MAX_SIDE);
  if (r->frames < keep || r->frames % clip != keep) {
    int next = r->frames < 1 ? 1 : r->frames;
    while (next % clip != keep) next++;
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: %d frames; the video VAE takes %d n + %d (%d is the next)",
                      r->frames, clip, keep, next);
  }
  g->T = (r->frames - keep) / clip * keep + 2, g->lh = r->height / ratio, g->lw = r->width / ratio;
  g->Na = (int)lround((double)r->frames / DIT_H3_FPS * DIT_H3_AUDIO_LATENTS_PER_SECOND);
  if (g->T % g->pt || g->C != vc->latent_channels || g->Ca != p->ac.latent_channels)
    return dit_errorf(err, DIT_ERR_FORMAT, "minimax-h3: the transformer's channels (%d video, %d audio) do not match "
                      "the VAEs'", g->C, g->Ca);
  if (r->steps < 2 || r->steps > DIT_H3_MAX_SIGMAS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: %d steps (2..%d, the terminal sigma included)", r->steps,
                      DIT_H3_MAX_SIGMAS);
  return DIT_OK;
}

/* Video latents [C, T, lh, lw] <-> rows [(T/pt)(lh/ph)(lw/pw), C pt ph pw] (patchify_video_latents; inverse: rows
 * into lat). */
static void patchify(const h3_geom *g, float *lat, float *rows, bool inverse) {
  const int ft = g->T / g->pt, fh = g->lh / g->ph, fw = g->lw / g->pw;
  for (int f = 0; f < ft; f++)
    for (int i = 0; i < fh; i++)
      for (int j = 0; j < fw; j++)
        for (int c = 0; c < g->C; c++)
          for (int a = 0; a < g->pt; a++)
            for (int b = 0; b < g->ph; b++)
              for (int d = 0; d < g->pw; d++) {
                const size_t row = ((size_t)f * fh + i) * fw + j;
                const size_t col = (((size_t)c * g->pt + a) * g->ph + b) * g->pw + d;
                const size_t li = (((size_t)c * g->T + f * g->pt + a) * g->lh + i * g->ph + b) * g->lw + j * g->pw + d;
                if (inverse) lat[li] = rows[row * g->pd + col];
                else rows[row * g->pd + col] = lat[li];
              }
}

/* The denoising state: the packed rows of both modalities and the layout they sit in. */
typedef struct h3_run_state {
  dit_h3_layout lay;
  float *text, *video, *audio, *vout, *aout; /* [N, text_dim], rows, rows, the forward's outputs */
  int32_t *ti;                               /* each row's timestep index */
  float sig_v[DIT_H3_MAX_SIGMAS], ts_v[DIT_H3_MAX_SIGMAS], sig_a[DIT_H3_MAX_SIGMAS], ts_a[DIT_H3_MAX_SIGMAS];
  int evals;                                 /* model evaluations: the shorter schedule's */
} h3_run_state;

static void state_free(h3_run_state *st) {
  dit_h3_layout_free(&st->lay);
  free(st->text), free(st->video), free(st->audio), free(st->vout), free(st->aout), free(st->ti);
}

/* The distinct timesteps of both schedules' first evals (video's first) into out: the fold's; returns their
 * count. */
static int distinct_timesteps(const float *tv, const float *ta, int evals, float *out) {
  int n = 0;
  for (int i = 0; i < 2 * evals; i++) {
    const float t = i < evals ? tv[i] : ta[i - evals];
    bool seen = false;
    for (int k = 0; k < n; k++) seen = seen || out[k] == t;
    if (!seen) out[n++] = t;
  }
  return n;
}

/* Schedules, the fold over both schedules' timesteps, the noise (video latents, then the audio rows). */
static dit_status prepare(const dit_h3_parts *p, const dit_h3_request *r, const h3_geom *g, h3_run_state *st,
                          dit_error *err) {
  int nv = 0, na = 0;
  DIT_TRY(dit_h3_sched_set(p->video_shift, r->steps, st->sig_v, &nv, st->ts_v, err));
  DIT_TRY(dit_h3_sched_set(p->audio_shift, r->steps, st->sig_a, &na, st->ts_a, err));
  st->evals = (nv < na ? nv : na) - 1;
  float fold[2 * DIT_H3_MAX_SIGMAS];
  const int nf = distinct_timesteps(st->ts_v, st->ts_a, st->evals, fold);
  dit_h3_fold_info info;
  DIT_TRY(dit_h3_fold(p->tr, nf, fold, &info, err));
  if (r->rt)
    dit_log(r->rt->ctx, DIT_LOG_INFO, "modulation folded for %d timesteps in %.1f ms: %.1f MiB of tables from %.1f MiB "
            "of projections, which stay out of %s memory", nf, info.build_s * 1e3, info.table_bytes / 1048576.0,
            info.streamed_bytes / 1048576.0, dit_rt_on_device(r->rt) ? "device" : "resident");
  const size_t nlat = (size_t)g->C * g->T * g->lh * g->lw, na_rows = (size_t)DIT_H3_AUDIO_CHANNELS * g->Na;
  float *lat = malloc(nlat * sizeof *lat);
  st->video = malloc(nlat * sizeof *st->video); /* as many rows x columns as latent values */
  st->audio = malloc(na_rows * (size_t)g->Ca * sizeof *st->audio);
  st->vout = malloc(nlat * sizeof *st->vout);
  st->aout = malloc(na_rows * (size_t)g->Ca * sizeof *st->aout);
  if (!lat || !st->video || !st->audio || !st->vout || !st->aout) {
    free(lat);
    return dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory for the latents");
  }
  dit_torch_rng rng;
  dit_torch_rng_seed(&rng, r->seed);
  dit_torch_randn(&rng, lat, nlat);
  dit_torch_randn(&rng, st->audio, na_rows * (size_t)g->Ca);
  patchify(g, lat, st->video, false);
  free(lat);
  return DIT_OK;
}

/* One step: the rows' timesteps (text and video rows the video's, audio rows the audio's; the distinct values
 * sorted), the forward, each modality's Euler step. */
static dit_status step(const dit_h3_parts *p, const h3_geom *g, h3_run_state *st, int i, dit_error *err) {
  const float tv = st->ts_v[i], ta = st->ts_a[i];
  float ts[2] = {tv < ta ? tv : ta, tv < ta ? ta : tv};
  const int nt = tv == ta ? 1 : 2, iv = nt == 1 || tv < ta ? 0 : 1, ia = nt == 1 || ta < tv ? 0 : 1;
  for (int64_t k = 0; k < st->lay.S; k++) st->ti[k] = st->lay.tags[k] == 2 ? ia : iv;
  const dit_h3_call c = {.n_text = st->lay.n_text, .n_video = st->lay.n_video, .n_audio = st->lay.n_audio,
                         .text = st->text, .video = st->video, .audio = st->audio, .n_timesteps = nt,
                         .timesteps = ts, .timestep_index = st->ti, .tags = st->lay.tags,
                         .positions = st->lay.positions, .text_index = st->lay.text_index,
                         .video_index = st->lay.video_index, .audio_index = st->lay.audio_index};
  DIT_TRY(dit_h3_forward(p->tr, &c, st->vout, st->aout, err));
  dit_h3_sched_step(st->video, st->vout, (size_t)(st->lay.n_video * g->pd), tv, st->sig_v[i], st->sig_v[i + 1]);
  dit_h3_sched_step(st->audio, st->aout, (size_t)(st->lay.n_audio * g->Ca), ta, st->sig_a[i], st->sig_a[i + 1]);
  return DIT_OK;
}

typedef struct h3_step_ctx {
  const dit_h3_parts *p;
  const h3_geom *g;
  h3_run_state *st;
} h3_step_ctx;

static dit_status step_fn(void *ctx, int i, dit_error *err) {
  h3_step_ctx *c = ctx;
  return step(c->p, c->g, c->st, i, err);
}

/* The video VAE's tiling for a request (see dit_h3_request.vae_tile). */
static dit_h3_vae_tiling tiling_of(const dit_h3_parts *p, int vae_tile) {
  if (vae_tile <= 0) return DIT_H3_VAE_TILING_DEFAULT;
  const int px = vae_tile * p->vc.patch;
  return (dit_h3_vae_tiling){px, px / 4};
}

/* The latents unpacked and denormalized, both decoded; the video mapped to [0, 1], frames last. */
static dit_status decode(const dit_h3_parts *p, const h3_geom *g, h3_run_state *st, const dit_h3_request *r,
                         dit_h3_result *out, dit_error *err) {
  const dit_gen_params *progress = r->progress;
  const dit_h3_vae_config *vc = dit_h3_vae_get_config(p->vae);
  const dit_h3_audio_config *ac = dit_h3_audio_get_config(p->audio);
  const size_t plane = (size_t)g->lh * g->lw, nlat = (size_t)g->C * g->T * plane;
  out->latents = malloc(nlat * sizeof(float));
  out->audio_latents = malloc((size_t)DIT_H3_AUDIO_CHANNELS * g->Ca * g->Na * sizeof(float));
  float *z = malloc(nlat * sizeof *z), *za = malloc((size_t)DIT_H3_AUDIO_CHANNELS * g->Ca * g->Na * sizeof *za);
  const int F = dit_h3_vae_frames(p->vae, g->T), H = g->lh * vc->patch, W = g->lw * vc->patch;
  float *pix = malloc((size_t)3 * F * H * W * sizeof *pix);
  out->video = malloc((size_t)F * H * W * 3 * sizeof(float));
  out->samples = dit_h3_audio_samples(p->audio, g->Na);
  dit_status s = DIT_OK;
  if (!out->latents || !out->audio_latents || !z || !za || !pix || !out->video)
    s = dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory for the decode");
  if (s == DIT_OK) {
    patchify(g, out->latents, st->video, true);
    for (size_t k = 0; k < nlat; k++) {
      const int c = (int)(k / ((size_t)g->T * plane));
      z[k] = out->latents[k] * vc->latents_std[c] + vc->latents_mean[c];
    }
    for (int ch = 0; ch < DIT_H3_AUDIO_CHANNELS; ch++) /* rows [ch * Na + t, c] -> [ch, c, t] */
      for (int c = 0; c < g->Ca; c++)
        for (int t = 0; t < g->Na; t++) {
          const float v = st->audio[((size_t)ch * g->Na + t) * g->Ca + c];
          out->audio_latents[((size_t)ch * g->Ca + c) * g->Na + t] = v;
          za[((size_t)ch * g->Ca + c) * g->Na + t] = v * ac->latents_std[c] + ac->latents_mean[c];
        }
    dit_stage_begin(progress, "VAE decode");
    s = dit_h3_vae_decode(p->vae, g->T, g->lh, g->lw, z, tiling_of(p, r->vae_tile), pix, err);
  }
  if (s == DIT_OK) {
    const size_t fp = (size_t)H * W;
    for (int c = 0; c < 3; c++)
      for (size_t k = 0; k < (size_t)F * fp; k++) {
        float v = pix[(size_t)c * F * fp + k] * k_pixel_std[c] + k_pixel_mean[c];
        v = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
        out->video[k * 3 + (size_t)c] = v;
      }
    out->frames = F, out->height = H, out->width = W;
    dit_stage_begin(progress, "sound");
    out->audio = malloc((size_t)DIT_H3_AUDIO_CHANNELS * out->samples * sizeof(float));
    s = out->audio ? dit_h3_audio_decode(p->audio, DIT_H3_AUDIO_CHANNELS, g->Na, za, out->audio, err)
                   : dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory for the sound");
    out->channels = DIT_H3_AUDIO_CHANNELS, out->sample_rate = ac->sample_rate;
  }
  free(z), free(za), free(pix);
  return s;
}

dit_status dit_h3_generate(dit_backend *be, dit_h3_parts *p, const dit_h3_request *r, dit_h3_result *out,
                           dit_error *err) {
  if (!out) return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: NULL result");
  memset(out, 0, sizeof *out);
  if (!be || !p || !r || !r->prompt) return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: NULL argument");
  h3_geom g;
  DIT_TRY(geometry(p, r, &g, err));
  h3_run_state st;
  memset(&st, 0, sizeof st);
  int n = 0;
  out->t[0] = dit_time_now();
  dit_stage_begin(r->progress, "text encoder");
  dit_status s = part_get(p, DIT_SLOT_TEXT, err);
  if (s == DIT_OK) s = encode_prompt(be, p, r->prompt, &st.text, &n, err);
  part_done(p, DIT_SLOT_TEXT);
  out->t[1] = dit_time_now();
  const dit_h3_layout_in li = {.n_text = n, .frames = g.T, .lh = g.lh, .lw = g.lw, .patch_h = g.ph, .patch_w = g.pw,
                               .audio_latents = g.Na, .audio_channels = DIT_H3_AUDIO_CHANNELS};
  if (s == DIT_OK) s = dit_h3_layout_make(&li, &st.lay, err);
  if (s == DIT_OK && !(st.ti = malloc((size_t)st.lay.S * sizeof *st.ti)))
    s = dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory");
  if (s == DIT_OK) s = part_get(p, DIT_SLOT_TRANSFORMER, err);
  if (s == DIT_OK) s = prepare(p, r, &g, &st, err);
  out->t[2] = dit_time_now();
  h3_step_ctx sc = {p, &g, &st};
  if (s == DIT_OK) s = dit_sampler_run(r->rt, r->progress, st.evals, step_fn, &sc, NULL, 0, err);
  out->t[3] = dit_time_now();
  if (p->tr) dit_h3_unfold(p->tr);
  part_done(p, DIT_SLOT_TRANSFORMER);
  if (s == DIT_OK) s = part_get(p, DIT_SLOT_VAE, err);
  if (s == DIT_OK) s = decode(p, &g, &st, r, out, err);
  part_done(p, DIT_SLOT_VAE);
  out->t[4] = dit_time_now();
  out->steps = st.evals;
  state_free(&st);
  if (s != DIT_OK) dit_h3_result_free(out);
  return s;
}

/* ---- the registry row (family.h) ---- */

/* resolve_canvas_size(16, 9, multiple, short_edge, max_pixels): the canvas a request without a size gets. */
static void canvas_16_9(int multiple, double short_edge, double max_pixels, int *h, int *w) {
  const double ratio = 16.0 / 9.0;
  double width = short_edge * ratio, height = short_edge;
  if (width * height > max_pixels) {
    const double scale = sqrt(max_pixels / (width * height));
    width *= scale, height *= scale;
  }
  const int hh = (int)rint(height / multiple) * multiple, ww = (int)rint(width / multiple) * multiple;
  *h = hh > multiple ? hh : multiple, *w = ww > multiple ? ww : multiple;
}

/* The canvas multiple: the VAE's spatial compression times the transformer's patch (from their configs). */
static dit_status canvas_multiple(const dit_model_dir *dir, int *out, dit_error *err) {
  json_t *vae = NULL, *tr = NULL;
  DIT_TRY(dit_model_dir_component_config(dir, "vae", &vae, err));
  dit_status s = dit_model_dir_component_config(dir, "transformer", &tr, err);
  int ratio = 1, patch = 2;
  const json_t *f = json_object_get(vae, "spatial_downsample_factors");
  if (s == DIT_OK && !json_is_array(f)) ratio = 16; /* the class default (2, 2, 2, 2, 1, 1) */
  for (size_t i = 0; s == DIT_OK && json_is_array(f) && i < json_array_size(f) && i < 16; i++) {
    const json_int_t v = json_integer_value(json_array_get(f, i));
    if (v < 1 || v > 16)
      s = dit_errorf(err, DIT_ERR_FORMAT, "%s/vae: spatial_downsample_factors[%zu] is not 1..16", dir->root, i);
    ratio *= (int)v;
  }
  const json_t *p = json_object_get(tr, "patch_size");
  if (s == DIT_OK && json_is_array(p) && json_array_size(p) == 3) patch = (int)json_integer_value(json_array_get(p, 2));
  if (s == DIT_OK && (patch < 1 || patch > 16 || ratio > 1024))
    s = dit_errorf(err, DIT_ERR_FORMAT, "%s: the VAE's compression %d or the transformer's patch %d is out of range",
                   dir->root, ratio, patch);
  json_decref(vae), json_decref(tr);
  *out = ratio * patch;
  return s;
}

/* The modular pipeline's defaults: its 16:9 canvas, 124 frames (5 + 17 n) at 24 fps, 49 model evaluations
 * (diffusers' num_inference_steps 50 counts the terminal sigma), no guidance (distilled). */
static dit_status h3_defaults(const dit_model_dir *dir, dit_gen_defaults *d, dit_error *err) {
  int m = 0;
  DIT_TRY(canvas_multiple(dir, &m, err));
  double short_edge = 768, max_pixels = 768 * 1344;
  DIT_TRY(dit_json_double_opt(dir->index, "canvas_short_edge", &short_edge, dir->root, err));
  DIT_TRY(dit_json_double_opt(dir->index, "canvas_max_pixels", &max_pixels, dir->root, err));
  memset(d, 0, sizeof *d);
  d->family = "minimax-h3";
  canvas_16_9(m, short_edge, max_pixels, &d->height, &d->width);
  d->steps = 49;
  d->guidance = 0.0;
  d->size_multiple = m;
  d->frames = 124, d->frames_multiple = 17, d->frames_offset = 5, d->fps = DIT_H3_FPS;
  return DIT_OK;
}

/* The family's components, each in its slot (the text encoder Z-Image's kind: the folder's tokenizer and
 * Qwen3-VL language model). */
static dit_status h3_dit_prepare(const dit_model_rt *rt, dit_h3 *m, dit_error *err) {
  return dit_rt_on_device(rt) ? dit_h3_set_act_dtype(m, DIT_BF16, err) : DIT_OK; /* bf16 activations on a GPU */
}
DIT_COMPONENT_KIND_SRC(h3_dit, "transformer", DIT_KEEP_TRANSFORMER, "transformer", dit_h3, dit_h3_load_file,
                       h3_dit_prepare, dit_h3_free);

static void decoders_free(void *obj) {
  h3_decoders *d = obj;
  if (!d) return;
  dit_h3_vae_free(d->vae);
  dit_h3_audio_free(d->audio);
  free(d);
}

static dit_status decoders_load(const dit_model_rt *rt, void **obj, dit_error *err) {
  char path[4096];
  h3_decoders *d = calloc(1, sizeof *d);
  if (!d) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  dit_status s = dit_model_dir_component_path(rt->dir, "vae", path, sizeof path, err);
  if (s == DIT_OK) s = dit_h3_vae_load(rt->dev, path, &d->vae, err);
  if (s == DIT_OK) s = dit_model_dir_component_path(rt->dir, "audio_vae", path, sizeof path, err);
  if (s == DIT_OK) s = dit_h3_audio_load(rt->dev, path, &d->audio, err);
  DIT_HAND_OVER(s, d, obj, decoders_free);
}

static const dit_component_kind h3_decoders_kind = {"VAE decode", DIT_KEEP_VAE, decoders_load, decoders_free, false,
                                                    NULL};

/* The family's state: its slots (first, for dit_components_state_close) and the parts a run reads. */
typedef struct h3_state {
  dit_components c;
  dit_h3_parts p;
} h3_state;

static dit_status h3_open(const dit_model_rt *rt, void **state, dit_error *err) {
  *state = NULL;
  h3_state *h = calloc(1, sizeof *h);
  if (!h) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  h->p.rt = rt, h->p.slots = &h->c;
  dit_status s = dit_h3_parts_configs(rt->dir->root, &h->p, err);
  if (s == DIT_OK) s = dit_components_start_with(rt, &h->c, &dit_qwen3_text_encoder, &h3_dit, &h3_decoders_kind, err);
  DIT_HAND_OVER(s, h, state, free);
}

/* ---- the plan (plan.h): text encoder, transformer steps, both decoders ---- */

/* The text stage: the prompt's ids through the encoder to hidden_states[50], the host copy kept (*n tokens). */
static dit_status plan_text(const dit_model_rt *rt, dit_h3_parts *P, const char *prompt, dit_plan *pl, int *n,
                            dit_error *err) {
  DIT_TRY(part_get(P, DIT_SLOT_TEXT, err));
  int32_t *ids = NULL;
  size_t count = 0;
  dit_cost run = {0};
  dit_status s = dit_tok_encode(P->tok, prompt, strlen(prompt), &ids, &count, err);
  free(ids);
  if (s == DIT_OK && (count < 1 || count > MAX_PROMPT_TOKENS))
    s = dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: the prompt has %zu tokens (1..%d)", count, MAX_PROMPT_TOKENS);
  if (s == DIT_OK) s = dit_qwen3_cost(P->te, 1, (int)count, DIT_H3_TEXT_LAYER, false, &run, err);
  /* encode_prompt's backend buffer and host copy, the ids; the tokenizer's tables */
  run.act_bytes += 2 * count * (size_t)P->tc.text_dim * sizeof(float) + count * sizeof(int32_t);
  run.act_bytes += dit_tok_table_bytes(P->tok);
  const dit_plan_run r = {"text encoder", "text_encoder", DIT_KEEP_TEXT_ENCODER, run, 0, dit_tok_load_bytes(P->tok), 1,
                          dit_qwen3_stream_bytes(P->te)}; /* encode_prompt streams it */
  part_done(P, DIT_SLOT_TEXT);
  *n = (int)count;
  pl->text_tokens = (int)count;
  return s == DIT_OK ? dit_plan_add(rt, pl, &r, err) : s;
}

/* The denoising loop's host state (h3_run_state, the layout) with n text rows; the schedules' evaluations and
 * the distinct timesteps the fold holds. */
static dit_status plan_loop(const dit_h3_parts *P, const dit_h3_request *r, const h3_geom *g, const dit_h3_layout *l,
                             int *evals, int *n_fold, size_t *bytes, dit_error *err) {
  float sv[DIT_H3_MAX_SIGMAS], tv[DIT_H3_MAX_SIGMAS], sa[DIT_H3_MAX_SIGMAS], ta[DIT_H3_MAX_SIGMAS];
  float fold[2 * DIT_H3_MAX_SIGMAS];
  int nv = 0, na = 0;
  DIT_TRY(dit_h3_sched_set(P->video_shift, r->steps, sv, &nv, tv, err));
  DIT_TRY(dit_h3_sched_set(P->audio_shift, r->steps, sa, &na, ta, err));
  *evals = (nv < na ? nv : na) - 1;
  *n_fold = distinct_timesteps(tv, ta, *evals, fold);
  const size_t S = (size_t)l->S, nlat = (size_t)l->n_video * g->pd, na_rows = (size_t)l->n_audio * g->Ca;
  *bytes = (size_t)l->n_text * P->tc.text_dim * sizeof(float) + 2 * (nlat + na_rows) * sizeof(float) +
           S * (3 * sizeof(double) + 3 * sizeof(int32_t)); /* text, rows and outputs; the layout and ti */
  return DIT_OK;
}

/* The decode stage: both decoders' costs, the buffers decode() and the clip hold (the loop's state too). */
static dit_status plan_decode(dit_h3_parts *P, const h3_geom *g, int vae_tile, size_t loop, dit_cost *out,
                              dit_error *err) {
  DIT_TRY(part_get(P, DIT_SLOT_VAE, err));
  const int F = dit_h3_vae_frames(P->vae, g->T);
  const size_t px = (size_t)F * g->lh * P->vc.patch * g->lw * P->vc.patch * 3 * sizeof(float);
  const size_t nlat = (size_t)g->C * g->T * g->lh * g->lw * sizeof(float);
  const size_t alat = (size_t)DIT_H3_AUDIO_CHANNELS * g->Ca * g->Na * sizeof(float);
  dit_cost v = {0}, a = {0};
  dit_status s = dit_h3_vae_cost(P->vae, g->T, g->lh, g->lw, tiling_of(P, vae_tile), &v, err);
  dit_h3_audio_cost(P->audio, DIT_H3_AUDIO_CHANNELS, g->Na, &a);
  /* held: the loop's state, the latents and z of both; then the video decodes into pix (the frames' buffer is
   * not written yet), and the sound decodes beside pix and the frames */
  const size_t held = loop + 2 * nlat + 2 * alat;
  const size_t sound = (size_t)DIT_H3_AUDIO_CHANNELS * dit_h3_audio_samples(P->audio, g->Na) * sizeof(float);
  const size_t video_peak = px + v.act_bytes, sound_peak = 2 * px + sound + a.act_bytes;
  out->flops = v.flops + a.flops;
  out->act_bytes = held + (video_peak > sound_peak ? video_peak : sound_peak);
  part_done(P, DIT_SLOT_VAE);
  return s;
}

static dit_status h3_plan(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_plan *pl,
                          dit_error *err) {
  dit_h3_parts *P = &((h3_state *)state)->p;
  const dit_h3_request r = {.prompt = p->prompt ? p->prompt : "", .height = p->height, .width = p->width,
                            .frames = p->frames, .steps = p->steps + 1};
  h3_geom g;
  DIT_TRY(geometry(P, &r, &g, err));
  int n = 0, evals = 0, n_fold = 0;
  DIT_TRY(plan_text(rt, P, r.prompt, pl, &n, err));
  const dit_h3_layout_in li = {.n_text = n, .frames = g.T, .lh = g.lh, .lw = g.lw, .patch_h = g.ph, .patch_w = g.pw,
                               .audio_latents = g.Na, .audio_channels = DIT_H3_AUDIO_CHANNELS};
  dit_h3_layout l;
  DIT_TRY(dit_h3_layout_make(&li, &l, err));
  size_t loop = 0;
  dit_cost run = {0};
  dit_status s = plan_loop(P, &r, &g, &l, &evals, &n_fold, &loop, err);
  if (s == DIT_OK) s = part_get(P, DIT_SLOT_TRANSFORMER, err);
  if (s == DIT_OK) s = dit_h3_cost(P->tr, l.n_text, l.n_video, l.n_audio, n_fold, &run, err);
  dit_h3_layout_free(&l);
  const size_t kept = run.act_bytes; /* the activation space stays with a kept transformer (the tables do not) */
  run.act_bytes += loop;
  run.flops *= evals; /* the fold's projections once (under 0.1% at real sizes): not counted */
  part_done(P, DIT_SLOT_TRANSFORMER);
  pl->steps = evals;
  const dit_plan_run tr = {"transformer", "transformer", DIT_KEEP_TRANSFORMER, run, kept, 0, evals, 0};
  if (s == DIT_OK) s = dit_plan_add(rt, pl, &tr, err);
  dit_cost dec = {0};
  if (s == DIT_OK) s = plan_decode(P, &g, p->vae_tile, loop, &dec, err);
  const dit_plan_run vr = {"VAE decode", "vae+audio_vae", DIT_KEEP_VAE, dec, 0, 0, 1, 0};
  if (s == DIT_OK) s = dit_plan_add(rt, pl, &vr, err);
  return s;
}

static dit_status h3_generate_clip(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_clip *out,
                                   dit_gen_stats *st, dit_error *err) {
  if (p->guidance > 0.0)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3: the model is guidance-distilled: no --guidance");
  if (p->fps > 0.0 && p->fps != DIT_H3_FPS)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "minimax-h3 makes %d fps (--fps %g)", DIT_H3_FPS, p->fps);
  const dit_h3_request r = {.prompt = p->prompt ? p->prompt : "", .height = p->height, .width = p->width,
                            .frames = p->frames, .steps = p->steps + 1, .seed = p->seed, .vae_tile = p->vae_tile,
                            .rt = rt, .progress = p};
  dit_h3_result res;
  DIT_TRY(dit_h3_generate(rt->dev, &((h3_state *)state)->p, &r, &res, err));
  memset(out, 0, sizeof *out);
  const size_t n = (size_t)res.frames * res.height * res.width * 3;
  out->rgb = malloc(n);
  out->samples = malloc((size_t)res.samples * res.channels * sizeof(float));
  dit_status s = out->rgb && out->samples ? dit_image_to_u8(res.video, n, out->rgb, err)
                                          : dit_errorf(err, DIT_ERR_NOMEM, "minimax-h3: out of memory for the clip");
  if (s == DIT_OK) {
    out->width = res.width, out->height = res.height, out->n_frames = res.frames, out->fps = DIT_H3_FPS;
    out->channels = res.channels, out->sample_rate = res.sample_rate, out->n_samples = res.samples;
    for (int64_t i = 0; i < res.samples; i++) /* [channels, samples] -> interleaved */
      for (int c = 0; c < res.channels; c++)
        out->samples[i * res.channels + c] = res.audio[(int64_t)c * res.samples + i];
  }
  const double t[5] = {res.t[0], res.t[1], res.t[2], res.t[3], res.t[4]};
  const int steps = res.steps;
  dit_h3_result_free(&res);
  if (s != DIT_OK) {
    dit_clip_free(out);
    return s;
  }
  if (st) dit_fill_stats(st, t, steps);
  return DIT_OK;
}

static const char *const h3_pipelines[] = {"MiniMaxH3ModularPipeline", NULL};

const dit_family dit_family_minimax_h3 = {
    .name = "minimax-h3",
    .title = "MiniMax-H3 (video with stereo sound)",
    .pipelines = h3_pipelines,
    .chat = DIT_CHAT_NONE,
    .defaults = h3_defaults,
    .open = h3_open,
    .generate_clip = h3_generate_clip,
    .plan = h3_plan,
    .close = dit_components_state_close,
    .latent = {32, 1, 1},
    .bench = dit_minimax_h3_bench,
};
