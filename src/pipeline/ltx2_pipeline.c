/* LTX-2 pipeline: the family's row, its components, the text stage and one clip's run (see
 * ltx2_pipeline.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "io/json.h"
#include "models/gemma3.h"
#include "models/ltx2.h"
#include "models/ltx2_connectors.h"
#include "pipeline/ltx2_pipeline_internal.h"
#include "pipeline/pipeline_common.h"
#include "pipeline/plan.h"
#include "pipeline/rng_torch.h"
#include "text/tokenizer.h"

#define DEFAULT_MAX_SEQ 1024 /* LTX2Pipeline's max_sequence_length */
#define DEFAULT_STG_BLOCK 28 /* its spatio_temporal_guidance_blocks */

void dit_ltx2_opts_default(dit_ltx2_opts *o) {
  memset(o, 0, sizeof *o);
  dit_ltx2_guidance_defaults(&o->video, &o->audio);
  o->stg_blocks[0] = DEFAULT_STG_BLOCK;
  o->n_stg_blocks = 1;
}

/* ---- the components ---- */

/* The text stage's slot object: Gemma 3 with its tokenizer, and the text connectors. */
typedef struct ltx2_text {
  dit_tokenizer *tok;
  dit_gemma3 *te;
  dit_ltx2_connectors *conn;
} ltx2_text;

static void text_free(void *obj) {
  ltx2_text *t = obj;
  if (!t) return;
  dit_tok_free(t->tok);
  dit_gemma3_free(t->te);
  dit_ltx2_connectors_free(t->conn);
  free(t);
}

static dit_status text_load(const dit_model_rt *rt, void **obj, dit_error *err) {
  char path[4096];
  ltx2_text *t = calloc(1, sizeof *t);
  if (!t) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  dit_status s = dit_model_dir_component_path(rt->dir, "tokenizer", path, sizeof path, err);
  if (s == DIT_OK) s = dit_tok_load(path, &t->tok, err);
  if (s == DIT_OK) s = dit_model_dir_component_path(rt->dir, "text_encoder", path, sizeof path, err);
  if (s == DIT_OK) s = dit_gemma3_load(rt->dev, path, &t->te, err);
  if (s == DIT_OK) s = dit_model_dir_component_path(rt->dir, "connectors", path, sizeof path, err);
  if (s == DIT_OK) s = dit_ltx2_connectors_load(rt->dev, path, &t->conn, err);
  if (s == DIT_OK && dit_ltx2_connectors_get_config(t->conn)->caption_channels != dit_gemma3_get_config(t->te)->hidden_size)
    s = dit_errorf(err, DIT_ERR_FORMAT, "connectors: caption_channels %d is not the text encoder's width %d",
                   dit_ltx2_connectors_get_config(t->conn)->caption_channels, dit_gemma3_get_config(t->te)->hidden_size);
  DIT_HAND_OVER(s, t, obj, text_free);
}

static const dit_component_kind ltx2_text_kind = {"text encoder", DIT_KEEP_TEXT_ENCODER, text_load, text_free, false,
                                                  NULL};

/* The transformer on rt->dev: bf16 activations on a GPU, as every family's. */
static dit_status dit_prepare(const dit_model_rt *rt, dit_ltx2 *m, dit_error *err) {
  return dit_rt_on_device(rt) ? dit_ltx2_set_act_dtype(m, DIT_BF16, err) : DIT_OK;
}
DIT_COMPONENT_KIND(ltx2_dit, "transformer", DIT_KEEP_TRANSFORMER, "transformer", dit_ltx2, dit_ltx2_load,
                   dit_prepare, dit_ltx2_free);

/* ---- text ---- */

/* text without the white space Python's str.strip() removes (ASCII's). */
static void strip(const char *text, size_t *b, size_t *len) {
  static const char ws[] = " \t\n\r\v\f\x1c\x1d\x1e\x1f";
  *b = 0, *len = strlen(text);
  while (*b < *len && strchr(ws, text[*b])) (*b)++;
  while (*len > *b && strchr(ws, text[*len - 1])) (*len)--;
}

/* One prompt's ids [S] left-padded with the tokenizer's pad id, mask [S]. */
static dit_status tokenize(const dit_tokenizer *tok, const char *text, int S, int32_t *ids, uint8_t *mask,
                           dit_error *err) {
  size_t b, len, n = 0;
  int32_t *got = NULL;
  strip(text, &b, &len);
  DIT_TRY(dit_tok_encode_model(tok, text + b, len - b, (size_t)S, &got, &n, err));
  const int pad = S - (int)n;
  for (int i = 0; i < S; i++) {
    ids[i] = i < pad ? dit_tok_pad_id(tok) : got[i - pad];
    mask[i] = i >= pad;
  }
  free(got);
  return DIT_OK;
}

static void cond_free(dit_backend *be, dit_ltx2_cond *c) {
  if (c->video) be->ops->free(be, c->video);
  if (c->audio) be->ops->free(be, c->audio);
  free(c->mask);
  memset(c, 0, sizeof *c);
}

/* Gemma 3 on each prompt ([negative, positive] under guidance), then the connectors. */
static dit_status encode_prompts(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p, bool cfg,
                                 dit_ltx2_cond *out, dit_error *err) {
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_TEXT, &obj, err));
  ltx2_text *t = obj;
  dit_backend *be = rt->dev;
  const dit_gemma3_config *gc = dit_gemma3_get_config(t->te);
  const int S = p->max_sequence_length > 0 ? p->max_sequence_length : DEFAULT_MAX_SEQ, nb = cfg ? 2 : 1;
  const size_t per = (size_t)S * gc->hidden_size * (gc->num_layers + 1);
  out->nb = nb, out->S = S;
  out->video_dim = dit_ltx2_connectors_video_dim(t->conn), out->audio_dim = dit_ltx2_connectors_audio_dim(t->conn);
  int32_t *ids = malloc((size_t)S * sizeof *ids);
  uint8_t *mask = malloc((size_t)nb * S);
  out->mask = malloc((size_t)nb * S);
  void *hidden = NULL;
  dit_status s = ids && mask && out->mask ? DIT_OK : dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  if (s == DIT_OK) s = be->ops->alloc(be, (size_t)nb * per * sizeof(float), &hidden, err);
  for (int b = 0; b < nb && s == DIT_OK; b++) {
    const char *text = b == nb - 1 ? p->prompt : (p->negative_prompt ? p->negative_prompt : "");
    s = tokenize(t->tok, text, S, ids, mask + (size_t)b * S, err);
    if (s == DIT_OK) s = dit_gemma3_encode_all(t->te, 1, S, ids, mask + (size_t)b * S, (float *)hidden + b * per, err);
  }
  if (s == DIT_OK) s = be->ops->alloc(be, (size_t)nb * S * out->video_dim * sizeof(float), &out->video, err);
  if (s == DIT_OK) s = be->ops->alloc(be, (size_t)nb * S * out->audio_dim * sizeof(float), &out->audio, err);
  if (s == DIT_OK) s = dit_ltx2_connectors_forward(t->conn, nb, S, hidden, mask, out->video, out->audio, out->mask, err);
  if (hidden) be->ops->free(be, hidden);
  free(ids), free(mask);
  dit_component_done(rt, c, DIT_SLOT_TEXT);
  return s;
}

/* ---- one clip ---- */

/* What the pipeline reads of the configs before any weights load (diffusers' defaults where a
 * key is absent): the transformer's vae_scale_factors (temporal, spatial, spatial), latent
 * channels and blocks; the audio VAE's latent channels, mel bins, sample rate and hop. */
typedef struct ltx2_facts {
  int st, sp, channels, layers;
  int a_channels, a_mel, a_rate, a_hop;
} ltx2_facts;

/* dir's component/config.json into *j (path: its name, for messages). */
static dit_status component_json(const dit_model_dir *dir, const char *name, char *path, size_t len, json_t **j,
                                 dit_error *err) {
  DIT_TRY(dit_model_dir_component_path(dir, name, path, len, err));
  if (strlen(path) + 13 >= len) return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s: path too long", name);
  strcat(path, "/config.json");
  return dit_json_load_file(path, 1 << 20, j, err);
}

static dit_status read_facts(const dit_model_dir *dir, ltx2_facts *f, dit_error *err) {
  char path[4096];
  json_t *j = NULL;
  int64_t v[3] = {8, 32, 32}, ch = 128, layers = 48, alc = 8, mel = 64, rate = 16000, hop = 160;
  size_t got = 0;
  DIT_TRY(component_json(dir, "transformer", path, sizeof path, &j, err));
  dit_status s = json_object_get(j, "vae_scale_factors")
                     ? dit_json_int_array(j, "vae_scale_factors", 1, 1024, v, 3, &got, path, err)
                     : DIT_OK;
  if (s == DIT_OK) s = dit_json_int_opt(j, "in_channels", 1, 65536, &ch, path, err);
  if (s == DIT_OK) s = dit_json_int_opt(j, "num_layers", 1, 4096, &layers, path, err);
  json_decref(j);
  DIT_TRY(s);
  if (got && (got != 3 || v[1] != v[2]))
    return dit_errorf(err, DIT_ERR_UNSUPPORTED, "%s: vae_scale_factors must be (temporal, spatial, spatial)", path);
  DIT_TRY(component_json(dir, "audio_vae", path, sizeof path, &j, err));
  s = dit_json_int_opt(j, "latent_channels", 1, 4096, &alc, path, err);
  if (s == DIT_OK) s = dit_json_int_opt(j, "mel_bins", 4, 65536, &mel, path, err);
  if (s == DIT_OK) s = dit_json_int_opt(j, "sample_rate", 1000, 1000000, &rate, path, err);
  if (s == DIT_OK) s = dit_json_int_opt(j, "mel_hop_length", 1, 100000, &hop, path, err);
  json_decref(j);
  DIT_TRY(s);
  *f = (ltx2_facts){(int)v[0], (int)v[1], (int)ch, (int)layers, (int)alc, (int)mel, (int)rate, (int)hop};
  return DIT_OK;
}

int dit_ltx2_audio_latent_frames(int frames, double fps, int sample_rate, int hop) {
  const double per_second = (double)sample_rate / hop / 4.0; /* AutoencoderKLLTX2Audio's temporal compression: 4 */
  const int L = (int)nearbyint(frames / fps * per_second); /* Python's round: half to even */
  return L < 1 ? 1 : L;
}

/* The latent geometry from the configs (the components are checked against it when they
 * load): LTX2Pipeline's latent sizes and audio length. */
static dit_status geometry(const ltx2_facts *f, const dit_gen_params *p, dit_ltx2_geom *g, dit_error *err) {
  const int st = f->st, sp = f->sp;
  if (p->width % sp || p->height % sp)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "width and height must be multiples of %d for this LTX-2 model "
                      "(got %dx%d)", sp, p->width, p->height);
  if ((p->frames - 1) % st)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "frames must be 1 + a multiple of %d for this LTX-2 model (got %d; "
                      "%d or %d would do)", st, p->frames, (p->frames - 1) / st * st + 1, (p->frames - 1) / st * st + 1 + st);
  g->C = f->channels;
  g->F = (p->frames - 1) / st + 1, g->H = p->height / sp, g->W = p->width / sp;
  g->Ca = f->a_channels, g->M = f->a_mel / 4; /* AutoencoderKLLTX2Audio's mel compression: 4 */
  g->L = dit_ltx2_audio_latent_frames(p->frames, p->fps, f->a_rate, f->a_hop);
  g->frames = p->frames, g->height = p->height, g->width = p->width;
  g->fps = (float)p->fps;
  return DIT_OK;
}

/* The initial latents: torch.randn video [C, F, H, W], then audio [Ca, L, M], packed. */
static dit_status noise(uint64_t seed, const dit_ltx2_geom *g, float *video, float *audio, dit_error *err) {
  const size_t nv = dit_ltx2_video_n(g), na = dit_ltx2_audio_n(g);
  float *tmp = malloc((nv > na ? nv : na) * sizeof *tmp);
  if (!tmp) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the noise");
  dit_torch_rng r;
  dit_torch_rng_seed(&r, seed);
  dit_torch_randn(&r, tmp, nv);
  dit_ltx2_pack_video(tmp, g->C, g->F, g->H, g->W, video);
  dit_torch_randn(&r, tmp, na);
  dit_ltx2_pack_audio(tmp, g->Ca, g->L, g->M, audio);
  free(tmp);
  return DIT_OK;
}

/* The run's options: o with p's guidance, the STG blocks the transformer has (a model too shallow for the
 * pipeline's STG block runs without STG). */
static void run_opts(const dit_ltx2_opts *o, const dit_gen_params *p, int layers, dit_ltx2_opts *opt) {
  *opt = *o;
  opt->video.cfg = (float)p->guidance;
  int n = 0;
  for (int i = 0; i < opt->n_stg_blocks; i++)
    if (opt->stg_blocks[i] >= 0 && opt->stg_blocks[i] < layers) opt->stg_blocks[n++] = opt->stg_blocks[i];
  opt->n_stg_blocks = n;
}

dit_status dit_ltx2_generate_with(const dit_model_rt *rt, void *state, const dit_gen_params *p, const dit_ltx2_opts *o,
                                  dit_clip *out, dit_gen_stats *st, dit_error *err) {
  dit_components *c = state;
  dit_ltx2_opts opt = *o;
  double t[5];
  t[0] = dit_time_now();
  dit_ltx2_geom g = {0};
  dit_ltx2_cond cond = {0};
  float *video = NULL, *audio = NULL, *sigmas = NULL, *timesteps = NULL;
  ltx2_facts f;
  /* the inputs are checked against the configs before any weights load */
  dit_status s = read_facts(rt->dir, &f, err);
  if (s == DIT_OK) s = geometry(&f, p, &g, err);
  if (s == DIT_OK) s = dit_ltx2_schedule(rt, p->steps, &g, &sigmas, &timesteps, err);
  if (s == DIT_OK) {
    run_opts(o, p, f.layers, &opt);
    video = malloc(dit_ltx2_video_n(&g) * sizeof *video), audio = malloc(dit_ltx2_audio_n(&g) * sizeof *audio);
    if (!video || !audio) s = dit_errorf(err, DIT_ERR_NOMEM, "out of memory for the latents");
  }
  if (s == DIT_OK) {
    dit_stage_begin(p, "text encoder");
    s = encode_prompts(rt, c, p, opt.video.cfg > 1 || opt.audio.cfg > 1, &cond, err);
    if (s != DIT_OK) dit_error_prefix(err, "text encoder");
  }
  t[1] = dit_time_now();
  if (s == DIT_OK) s = noise(p->seed, &g, video, audio, err);
  if (s == DIT_OK && p->init_image) {
    dit_stage_begin(p, "image encoder");
    s = dit_ltx2_condition_image(rt, c, p, &g, video, err);
    g.cond_tokens = g.H * g.W;
  }
  void *dit = NULL; /* loaded here, so the stats tell its load from the steps */
  if (s == DIT_OK) s = dit_component_get(rt, c, DIT_SLOT_TRANSFORMER, &dit, err);
  t[2] = dit_time_now();
  if (s == DIT_OK) s = dit_ltx2_denoise(rt, c, p, &opt, &cond, &g, sigmas, timesteps, video, audio, err);
  t[3] = dit_time_now();
  cond_free(rt->dev, &cond);
  if (s == DIT_OK) s = dit_ltx2_decode(rt, c, p, &g, video, audio, &opt, out, err);
  t[4] = dit_time_now();
  if (st && s == DIT_OK) dit_fill_stats(st, t, p->steps);
  free(video), free(audio), free(sigmas), free(timesteps);
  return s;
}

static dit_status ltx2_generate_clip(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_clip *out,
                                     dit_gen_stats *st, dit_error *err) {
  dit_ltx2_opts o;
  dit_ltx2_opts_default(&o);
  return dit_ltx2_generate_with(rt, state, p, &o, out, st, err);
}

static dit_status ltx2_open(const dit_model_rt *rt, void **state, dit_error *err) {
  *state = NULL;
  dit_components *c = calloc(1, sizeof *c);
  if (!c) return dit_errorf(err, DIT_ERR_NOMEM, "out of memory");
  c->kind[DIT_SLOT_VAE_ENC] = &dit_ltx2_vae_enc; /* image to video only: loaded on first use */
  dit_status s = dit_components_start_with(rt, c, &ltx2_text_kind, &ltx2_dit, &dit_ltx2_decoders, err);
  DIT_HAND_OVER(s, c, state, free);
}

/* LTX2Pipeline's defaults: 768 x 512, 121 frames at 24 fps, 30 steps, guidance 3; sizes in
 * multiples of the VAE's spatial compression, frames 1 + a multiple of its temporal one. */
static dit_status ltx2_defaults(const dit_model_dir *dir, dit_gen_defaults *d, dit_error *err) {
  ltx2_facts f;
  DIT_TRY(read_facts(dir, &f, err));
  const int st = f.st, sp = f.sp;
  memset(d, 0, sizeof *d);
  d->family = "ltx2";
  d->width = 768, d->height = 512;
  d->steps = 30;
  d->guidance = 3.0;
  d->size_multiple = sp;
  d->frames = 121, d->frames_multiple = st, d->frames_offset = 1, d->fps = 24.0;
  return DIT_OK;
}

/* ---- the plan (plan.h): text encoder and connectors, the transformer's steps, the decoders ---- */

/* The text stage: Gemma 3 on each prompt, the connectors on the batch (nb items); held: what the pipeline
 * holds through it. *dims: the conditioning's sizes. */
static dit_status plan_text(const dit_model_rt *rt, dit_components *c, const dit_gen_params *p, int nb, size_t held,
                            dit_ltx2_cond *dims, dit_plan *pl, dit_error *err) {
  void *obj = NULL;
  DIT_TRY(dit_component_get(rt, c, DIT_SLOT_TEXT, &obj, err));
  const ltx2_text *t = obj;
  const dit_gemma3_config *gc = dit_gemma3_get_config(t->te);
  const int S = p->max_sequence_length > 0 ? p->max_sequence_length : DEFAULT_MAX_SEQ;
  *dims = (dit_ltx2_cond){.nb = nb, .S = S, .video_dim = dit_ltx2_connectors_video_dim(t->conn),
                          .audio_dim = dit_ltx2_connectors_audio_dim(t->conn)};
  dit_cost g = {0}, k = {0};
  size_t kept = 0;
  dit_status s = dit_gemma3_cost(t->te, 1, S, &g, err);
  if (s == DIT_OK) s = dit_ltx2_connectors_cost(t->conn, nb, S, &k, &kept, err);
  /* encode_prompts: the stacked hidden states of the batch, the ids, the masks and a prompt's tokens; then the
   * conditioning beside the connectors' own; the tokenizer's tables */
  const size_t hidden = (size_t)nb * S * gc->hidden_size * (gc->num_layers + 1) * sizeof(float);
  const size_t cond = (size_t)nb * S * (dims->video_dim + dims->audio_dim) * sizeof(float);
  const size_t conn = cond + k.act_bytes;
  dit_cost run = {nb * g.flops + k.flops, held + hidden + 2 * (size_t)S * sizeof(int32_t) + 2 * (size_t)nb * S +
                                              (g.act_bytes > conn ? g.act_bytes : conn) + dit_tok_table_bytes(t->tok)};
  const dit_plan_run r = {"text encoder", "text_encoder+connectors", DIT_KEEP_TEXT_ENCODER, run, kept,
                          dit_tok_load_bytes(t->tok), nb, 0}; /* the connectors' activation space stays with them */
  dit_component_done(rt, c, DIT_SLOT_TEXT);
  pl->text_tokens = S;
  return s == DIT_OK ? dit_plan_add(rt, pl, &r, err) : s;
}

static dit_status ltx2_plan(const dit_model_rt *rt, void *state, const dit_gen_params *p, dit_plan *pl,
                            dit_error *err) {
  if (p->init_image) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "plan: image-to-video is not planned yet");
  dit_components *c = state;
  ltx2_facts f;
  dit_ltx2_geom g = {0};
  dit_ltx2_opts o, opt;
  DIT_TRY(read_facts(rt->dir, &f, err));
  DIT_TRY(geometry(&f, p, &g, err));
  dit_ltx2_opts_default(&o);
  run_opts(&o, p, f.layers, &opt);
  const int nb = opt.video.cfg > 1 || opt.audio.cfg > 1 ? 2 : 1;
  /* held through every stage: the packed latents (and the schedule) */
  const size_t latents = (dit_ltx2_video_n(&g) + dit_ltx2_audio_n(&g)) * sizeof(float);
  const size_t held = latents + (2 * (size_t)p->steps + 1) * sizeof(float);
  dit_ltx2_cond dims;
  DIT_TRY(plan_text(rt, c, p, nb, held, &dims, pl, err));
  const size_t cond = (size_t)nb * dims.S * ((dims.video_dim + dims.audio_dim) * sizeof(float) + 1);
  dit_cost run = {0}, dec = {0};
  size_t kept = 0;
  DIT_TRY(dit_ltx2_denoise_cost(rt, c, &opt, &dims, &g, &run, &kept, err));
  run.act_bytes += held + cond;
  run.flops *= p->steps;
  pl->steps = p->steps, pl->batch = nb;
  const dit_plan_run tr = {"transformer", "transformer", DIT_KEEP_TRANSFORMER, run, kept, 0, p->steps, 0};
  DIT_TRY(dit_plan_add(rt, pl, &tr, err));
  DIT_TRY(dit_ltx2_decode_cost(rt, c, p, &g, &dec, err));
  dec.act_bytes += held - latents; /* dit_ltx2_decode_cost counts the latents */
  const dit_plan_run vr = {"VAE decode", "vae+audio_vae+vocoder", DIT_KEEP_VAE, dec, 0, 0, 1, 0};
  return dit_plan_add(rt, pl, &vr, err);
}

static const char *const ltx2_pipelines[] = {"LTX2Pipeline", "LTX2ImageToVideoPipeline", NULL};

const dit_family dit_family_ltx2 = {
    .name = "ltx2",
    .title = "LTX-2 / LTX-2.3 (video with sound)",
    .pipelines = ltx2_pipelines,
    .chat = DIT_CHAT_NONE,
    .inputs = DIT_INPUT_INIT_IMAGE, /* image-to-video: the first frame */
    .defaults = ltx2_defaults,
    .open = ltx2_open,
    .generate_clip = ltx2_generate_clip,
    .plan = ltx2_plan,
    .bench = dit_ltx2_bench,
    .close = dit_components_state_close,
    .latent = {32, 1, 1},
};
