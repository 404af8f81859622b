/* MiniMax-H3 against its fixture (models/minimax-h3-tiny, made by gen/make_fixtures_minimax_h3.py
 * from diffusers' modular pipeline at the pinned commit), fp32 on the CPU:
 * - the conditioning: the prompt tokenized verbatim (no template, no special tokens) and the
 *   Qwen3-VL language model's hidden_states[50] (after decoder layer 50, no final norm), through
 *   ditrun's Qwen3 tokenizer and Qwen3 / Qwen3-VL encoder (the fixture's text encoder has 51 layers
 *   of width 4, its embedding stored as float8_e4m3fn);
 * - the packed layout (pipeline/minimax_h3_layout.h): the run's positions, tags and indices, and the grids at
 *   the real 768x1344 canvas;
 * - the schedulers (pipeline/minimax_h3_sched.h): both schedules bit for bit (4 and 50 sigmas) and every
 *   scheduler step of the run;
 * - the transformer (models/minimax_h3.h): the token refiner and a one-frame, audio-free forward
 *   (components.safetensors), and every call of the pipeline's run with its packed
 *   [text | audio | video] layout, one or two distinct timesteps (reference.safetensors);
 * - the video VAE (models/vae_minimax_h3.h): the ViT decoder on one latent frame, the whole decode (temporal
 *   chunks) and one clip in spatial tiles; the audio VAE's decoder (models/vae_minimax_h3_audio.h);
 * - the whole t2va run (pipeline/minimax_h3_pipeline.h) against the pipeline's: the latents, the frames and
 *   the sound; and the same through the public API (the registry's family: defaults, 8-bit frames and
 *   interleaved sound) and the CLI (an MP4, and frame counts refused before any model runs). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "ditrun.h"
#include "fixture.h"
#include "io/safetensors.h"
#include "models/minimax_h3.h"
#include "models/qwen3.h"
#include "models/vae_minimax_h3.h"
#include "models/vae_minimax_h3_audio.h"
#include "pipeline/minimax_h3_layout.h"
#include "pipeline/minimax_h3_pipeline.h"
#include "pipeline/minimax_h3_sched.h"
#include "testing.h"
#include "text/tokenizer.h"

#define TOL 1e-5    /* fp32 CPU against transformers' float32 */
#define DIT_TOL 1e-4 /* the transformer against diffusers' float32 (the acceptance's bound); on a GPU
                        (DIT_TEST_DEVICE=cuda) every check is a normalized MSE of 1e-4 */
#define NMSE_BF16_ACT 1e-3 /* BF16 activations on a GPU (test_krea2_gpu's and test_flux2_gpu's bound) */
#define H3_TEXT_LAYER 50 /* MiniMax-H3's conditioning layer (the pipeline refuses fewer than 51 layers) */

static bool g_gpu;

static dit_backend *g_be;

/* The fixture folder's reference.json (NULL and a failed check when unreadable); ref, comp (when not NULL):
 * the paths of reference.safetensors and components.safetensors; dir (when not NULL) the folder's. */
static json_t *fixture(const dt_args *a, char dir[1024], char ref[1200], char comp[1200]) {
  char d[1024];
  dt_path(d, sizeof d, a->data, "models/minimax-h3-tiny");
  if (dir) memcpy(dir, d, sizeof d);
  if (comp) dt_path(comp, 1200, d, "components.safetensors");
  return dt_load_reference(d, ref, 1200);
}

/* The prompt's ids as the pipeline made them, and ditrun's for the same text. */
static void test_tokens(const dt_args *a) {
  char dir[1024], ref[1200], sub[1200];
  json_t *rj = fixture(a, dir, ref, NULL);
  if (!rj) return;
  const char *prompt = json_string_value(json_object_get(json_object_get(rj, "call"), "prompt"));
  CHECK(prompt != NULL);
  int32_t *want = NULL, *mask = NULL, *ids = NULL;
  int64_t ws[8], ms[8];
  int wn = 0, mn = 0;
  CHECK(dt_load_i32(ref, "text_encoder.0.input_ids", &want, ws, &wn) == 0);
  CHECK(dt_load_i32(ref, "text_encoder.0.attention_mask", &mask, ms, &mn) == 0);
  dit_tokenizer *tok = NULL;
  dit_error e = {0};
  dt_path(sub, sizeof sub, dir, "tokenizer");
  CHECK_MSG(dit_tok_load(sub, &tok, &e) == DIT_OK, "%s", e.msg);
  size_t n = 0;
  if (tok && prompt) CHECK_MSG(dit_tok_encode(tok, prompt, strlen(prompt), &ids, &n, &e) == DIT_OK, "%s", e.msg);
  if (want && mask && ids) {
    CHECK_MSG(wn == 2 && ws[0] == 1 && (size_t)ws[1] == n, "%zu ids, the pipeline's %lld", n, (long long)ws[1]);
    for (size_t i = 0; i < n && (size_t)ws[1] == n; i++) {
      CHECK_MSG(ids[i] == want[i], "id %zu: %d, the pipeline's %d", i, ids[i], want[i]);
      CHECK(mask[i] == 1); /* one prompt, no padding */
    }
    printf("prompt: %zu tokens, the pipeline's ids\n", n);
  }
  free(want), free(mask), free(ids);
  dit_tok_free(tok);
  json_decref(rj);
}

/* hidden_states[50] (what the pipeline conditions on) and the post-norm last state (what it must not
 * take, -1 here) for the pipeline's ids: the stacked reference [1, N, H, 52]. */
static void test_encoder(const dt_args *a) {
  char dir[1024], ref[1200], sub[1200];
  json_t *rj = fixture(a, dir, ref, NULL);
  if (!rj) return;
  dit_qwen3 *te = NULL;
  dit_error e = {0};
  dt_path(sub, sizeof sub, dir, "text_encoder");
  CHECK_MSG(dit_qwen3_load(g_be, sub, &te, &e) == DIT_OK, "%s", e.msg);
  int32_t *ids = NULL;
  float *hs = NULL;
  int64_t is[8], hsh[8];
  int in = 0, hn = 0;
  CHECK(dt_load_i32(ref, "text_encoder.0.input_ids", &ids, is, &in) == 0);
  CHECK(dt_load_f32(ref, "text_encoder.0.hidden_states", &hs, hsh, &hn) == 0);
  if (te && ids && hs) {
    const dit_qwen3_config *c = dit_qwen3_get_config(te);
    const int N = (int)is[1], H = c->hidden_size, L = (int)hsh[3];
    CHECK_MSG(c->num_layers == 51 && hn == 4 && hsh[1] == N && hsh[2] == H && L == 52,
              "%d layers, hidden states [%lld, %lld, %lld, %lld]", c->num_layers, (long long)hsh[0],
              (long long)hsh[1], (long long)hsh[2], (long long)hsh[3]);
    const int layers[2] = {H3_TEXT_LAYER, -1}, taps[2] = {H3_TEXT_LAYER, L - 1};
    float *got[2] = {calloc((size_t)N * H, sizeof(float)), calloc((size_t)N * H, sizeof(float))};
    float *want = calloc((size_t)N * H, sizeof(float));
    CHECK(got[0] && got[1] && want);
    void *dev[2] = {NULL, NULL}; /* the encoder writes backend memory (host memory on the CPU) */
    const size_t bytes = (size_t)N * H * sizeof(float);
    for (int k = 0; g_gpu && k < 2; k++) CHECK(g_be->ops->alloc(g_be, bytes, &dev[k], &e) == DIT_OK);
    if (got[0] && got[1] && want && c->num_layers == 51 && L == 52 && (!g_gpu || (dev[0] && dev[1]))) {
      float *const outs[2] = {g_gpu ? dev[0] : got[0], g_gpu ? dev[1] : got[1]};
      CHECK_MSG(dit_qwen3_encode(te, 1, N, ids, NULL, 2, layers, outs, &e) == DIT_OK, "%s", e.msg);
      for (int k = 0; g_gpu && k < 2; k++) CHECK(g_be->ops->download(g_be, got[k], dev[k], bytes, &e) == DIT_OK);
      for (int k = 0; k < 2; k++) {
        for (int64_t i = 0; i < (int64_t)N * H; i++) want[i] = hs[i * L + taps[k]];
        const double r = dt_error_of(g_gpu, got[k], want, (size_t)N * H), tol = g_gpu ? DIT_TOL : TOL;
        printf("hidden_states[%d] (%s, %d tokens): %s %.3g\n", taps[k], k ? "after the final norm" : "the conditioning",
               N, g_gpu ? "nmse" : "relative error", r);
        CHECK_MSG(r <= tol, "hidden_states[%d]: error %.3g > %g", taps[k], r, tol);
      }
      /* the two differ (the check can tell the conditioning from the normed last state) */
      for (int64_t i = 0; i < (int64_t)N * H; i++) want[i] = hs[i * L + L - 1];
      CHECK(dt_error_of(g_gpu, got[0], want, (size_t)N * H) > 0.01);
      /* streamed (each layer's pages released once it ran): the same states, twice in a row */
      memcpy(want, got[0], bytes);
      dit_qwen3_set_stream(te, true);
      for (int rep = 0; rep < 2; rep++) {
        CHECK_MSG(dit_qwen3_encode(te, 1, N, ids, NULL, 2, layers, outs, &e) == DIT_OK, "%s", e.msg);
        if (g_gpu) CHECK(g_be->ops->download(g_be, got[0], dev[0], bytes, &e) == DIT_OK);
        CHECK_MSG(!memcmp(got[0], want, bytes), "streamed encode %d differs", rep);
      }
      dit_qwen3_set_stream(te, false);
    }
    for (int k = 0; k < 2; k++)
      if (dev[k]) g_be->ops->free(g_be, dev[k]);
    free(got[0]), free(got[1]), free(want);
  }
  free(ids), free(hs);
  dit_qwen3_free(te);
  json_decref(rj);
}

static dit_h3 *load_h3(const dt_args *a) {
  char dir[1024];
  dt_path(dir, sizeof dir, a->data, "models/minimax-h3-tiny/transformer");
  dit_h3 *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_h3_load(g_be, dir, &m, &e) == DIT_OK, "%s", e.msg);
  return m;
}

static void check_rel(const char *what, const float *got, const float *want, size_t n, double tol) {
  const double r = dt_error_of(g_gpu, got, want, n);
  printf("%s: %s %.3g\n", what, g_gpu ? "nmse" : "relative error", r);
  CHECK_MSG(r <= tol, "%s: error %.3g > %g", what, r, tol);
}

/* The token refiner (context_embedder, 2 refiner blocks, final_norm) on the one-frame case's 7 text rows. */
static void test_refiner(const dt_args *a) {
  char file[1200];
  dt_path(file, sizeof file, a->data, "models/minimax-h3-tiny/components.safetensors");
  dit_h3 *m = load_h3(a);
  float *txt = dt_load_f32_n(file, "dit_image_encoder_hidden_states", 7 * 4);
  float *want = dt_load_f32_n(file, "dit_image_refiner_out", 7 * 24), *got = calloc(7 * 24, sizeof(float));
  dit_error e = {0};
  if (m && txt && want && got) {
    CHECK(dit_h3_get_config(m)->hidden == 24 && dit_h3_get_config(m)->text_dim == 4);
    CHECK_MSG(dit_h3_refine_text(m, 7, txt, got, &e) == DIT_OK, "%s", e.msg);
    check_rel("token refiner (7 rows)", got, want, 7 * 24, DIT_TOL);
  }
  free(txt), free(want), free(got);
  dit_h3_free(m);
}

/* One call's layout from `file`: prefix names the tensors (pfx + "position_ids" ...), or the reference's
 * shared layout tensors when shared. Returns the call with malloc'd arrays in bufs (freed by the caller). */
typedef struct h3_case {
  dit_h3_call c;
  float *text, *video, *audio, *ts, *pos32;
  double *pos;
  int32_t *ti, *tags, *tidx, *vidx, *aidx;
} h3_case;

static void case_free(h3_case *k) {
  free(k->text), free(k->video), free(k->audio), free(k->ts), free(k->pos32), free(k->pos);
  free(k->ti), free(k->tags), free(k->tidx), free(k->vidx), free(k->aidx);
}

/* Tensor `name` of file as float32 (f32) or int32 (i32, when f32 is NULL), and its element count. */
static int load_n(const char *file, const char *name, float **f32, int32_t **i32, int64_t *n) {
  int64_t sh[8];
  int nd = 0;
  if ((f32 ? dt_load_f32(file, name, f32, sh, &nd) : dt_load_i32(file, name, i32, sh, &nd)) != 0) return -1;
  *n = 1;
  for (int i = 0; i < nd; i++) *n *= sh[i];
  return 0;
}
static int load_i32(const char *file, const char *name, int32_t **out, int64_t *n) {
  return load_n(file, name, NULL, out, n);
}
static int load_f32(const char *file, const char *name, float **out, int64_t *n) {
  return load_n(file, name, out, NULL, n);
}

/* names[]: text, video, audio (NULL: none), timestep, timestep_indices, token_tags, position_ids, text /
 * video / audio indices. */
static bool case_load(const char *file, const char *const names[10], h3_case *k) {
  memset(k, 0, sizeof *k);
  int64_t n[10] = {0};
  int bad = load_f32(file, names[0], &k->text, &n[0]) | load_f32(file, names[1], &k->video, &n[1]);
  if (names[2]) bad |= load_f32(file, names[2], &k->audio, &n[2]);
  bad |= load_f32(file, names[3], &k->ts, &n[3]) | load_i32(file, names[4], &k->ti, &n[4]);
  bad |= load_i32(file, names[5], &k->tags, &n[5]) | load_f32(file, names[6], &k->pos32, &n[6]);
  bad |= load_i32(file, names[7], &k->tidx, &n[7]) | load_i32(file, names[8], &k->vidx, &n[8]);
  if (names[9]) bad |= load_i32(file, names[9], &k->aidx, &n[9]);
  CHECK(!bad);
  if (bad) return false;
  /* the pipeline's positions are float64; the model casts them to float32 first, so float32 loses nothing */
  k->pos = malloc((size_t)n[6] * sizeof *k->pos);
  if (!k->pos) return false;
  for (int64_t i = 0; i < n[6]; i++) k->pos[i] = k->pos32[i];
  k->c = (dit_h3_call){.n_text = n[7], .n_video = n[8], .n_audio = names[9] ? n[9] : 0, .text = k->text,
                       .video = k->video, .audio = k->audio, .n_timesteps = (int)n[3], .timesteps = k->ts,
                       .timestep_index = k->ti, .tags = k->tags, .positions = k->pos, .text_index = k->tidx,
                       .video_index = k->vidx, .audio_index = k->aidx};
  return true;
}

/* The one-frame, audio-free layout of components.safetensors (7 text rows, 6 video rows, timestep 0.3). */
/* The one-frame, audio-free case of components.safetensors. */
static const char *const one_frame_names[10] = {
    "dit_image_encoder_hidden_states", "dit_image_hidden_states", NULL, "dit_image_timestep",
    "dit_image_timestep_indices", "dit_image_token_tags", "dit_image_position_ids", "dit_image_text_indices",
    "dit_image_video_indices", NULL};

static void test_one_frame(const dt_args *a) {
  char file[1200];
  dt_path(file, sizeof file, a->data, "models/minimax-h3-tiny/components.safetensors");
  dit_h3 *m = load_h3(a);
  h3_case k;
  if (m && case_load(file, one_frame_names, &k)) {
    const int64_t pd = dit_h3_get_config(m)->patch_dim;
    float *want = dt_load_f32_n(file, "dit_image_out", (size_t)(k.c.n_video * pd));
    float *got = calloc((size_t)(k.c.n_video * pd), sizeof(float));
    dit_error e = {0};
    if (want && got) {
      CHECK_MSG(dit_h3_forward(m, &k.c, got, NULL, &e) == DIT_OK, "%s", e.msg);
      check_rel("one frame, no audio (7 text + 6 video rows)", got, want, (size_t)(k.c.n_video * pd), DIT_TOL);
      /* layouts the model refuses by name: a row placed twice, a tag and a timestep index out of range */
      const int32_t v0 = k.vidx[0];
      k.vidx[0] = k.tidx[0];
      CHECK(dit_h3_forward(m, &k.c, got, NULL, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "already placed"));
      printf("a row placed twice: %s\n", e.msg);
      k.vidx[0] = v0;
      k.tags[3] = 3;
      CHECK(dit_h3_forward(m, &k.c, got, NULL, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "row 3 has tag 3"));
      k.tags[3] = 1, k.ti[5] = 1;
      CHECK(dit_h3_forward(m, &k.c, got, NULL, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "timestep index 1"));
      printf("a timestep index out of range: %s\n", e.msg);
    }
    free(want), free(got);
  }
  case_free(&k);
  dit_h3_free(m);
}

/* ---- MiniMax's release checkpoint (fused, per-head interleaved qkv_proj, mlp.fc1 as [gate; value], its own
 * module names): written here from the fixture's diffusers file by this test's own table (the inverse of
 * diffusers' convert_minimax_h3_to_diffusers.py), then loaded by ditrun. ---- */
static const dit_wrename to_release[] = {
    {"^transformer_blocks.", "^blocks.", NULL},
    {"^token_refiner.refiner_blocks.", "^token_refiner.blocks.", NULL},
    {"^time_embedder.linear_1.", "^time_embedder.proj_in.", NULL},
    {"^time_embedder.linear_2.", "^time_embedder.proj_out.", NULL},
    {"^proj_in.", "^video_patch_proj.", NULL},
    {"^audio_proj_in.", "^audio_patch_proj.", NULL},
    {"^context_embedder.", "^condition_proj.", NULL},
    {"^norm_out.norm.", "^final_layer.norm.", NULL},
    {"^norm_out.linear.", "^final_layer.adaln_proj.linear.", NULL},
    {"^proj_out.", "^final_layer.video_out.", NULL},
    {"^audio_proj_out.", "^final_layer.audio_out.", NULL},
    {".attn.norm_q.", ".attn.q_norm.", NULL},
    {".attn.norm_k.", ".attn.k_norm.", NULL},
    {".attn.to_out.0.", ".attn.out_proj.", NULL},
    {".ff.net.0.proj.", ".mlp.fc1.", NULL},
    {".ff.net.2.", ".mlp.fc2.", NULL},
};

/* The pieces of the release file made from the diffusers file f (qkv: the q, k and v of each head in turn, or
 * with bad_qkv only q and k; fc1: the gate half first); *n of them, plus the dropped rope.inv_freq. */
static dt_st_piece *release_pieces(const dit_st_file *f, int head_dim, bool bad_qkv, size_t *n) {
  dt_st_piece *p = calloc(f->n_tensors + 1, sizeof *p);
  *n = 0;
  for (size_t i = 0; p && i < f->n_tensors; i++) {
    const char *nm = f->tensors[i].name;
    const size_t len = strlen(nm), q = strlen(".attn.to_q.weight");
    if (len > q && (!strcmp(nm + len - q, ".attn.to_k.weight") || !strcmp(nm + len - q, ".attn.to_v.weight")))
      continue;
    dt_st_piece *o = &p[(*n)++];
    dit_wname_rename(to_release, sizeof to_release / sizeof *to_release, false, nm, o->name, sizeof o->name);
    snprintf(o->src[0], sizeof o->src[0], "%s", nm);
    o->n_src = 1;
    if (len > q && !strcmp(nm + len - q, ".attn.to_q.weight")) {
      snprintf(o->name + strlen(o->name) - strlen("to_q.weight"), 32, "qkv_proj.weight");
      for (int k = 1; k < 3; k++)
        snprintf(o->src[k], sizeof o->src[k], "%.*sto_%c.weight", (int)(len - 11), nm, "qkv"[k]);
      o->n_src = bad_qkv ? 2 : 3, o->group = head_dim;
    } else if (strstr(nm, ".ff.net.0.proj.weight")) {
      snprintf(o->src[1], sizeof o->src[1], "%s", nm);
      o->n_src = 2, o->half[0] = 2, o->half[1] = 1;
    }
  }
  if (p) { /* a buffer the release ships and diffusers recomputes: any vector stands in for it */
    snprintf(p[*n].name, sizeof p[*n].name, "rope.inv_freq");
    snprintf(p[*n].src[0], sizeof p[*n].src[0], "transformer_blocks.0.attn.norm_q.weight");
    p[(*n)++].n_src = 1;
  }
  return p;
}

/* dir/config.json from the fixture's with its fields renamed as the release names them (release) or with one
 * field under both names, disagreeing; dir/model.safetensors from release_pieces. 0 on success. */
static int write_release(const char *fixture_dir, const char *dir, bool bad_qkv, bool disagree) {
  char src[1200], cfg[1200], dst[1200];
  dt_path(src, sizeof src, fixture_dir, "transformer/diffusion_pytorch_model.safetensors");
  dt_path(cfg, sizeof cfg, fixture_dir, "transformer/config.json");
  dt_path(dst, sizeof dst, dir, "config.json");
  json_error_t je;
  json_t *j = json_load_file(cfg, 0, &je);
  mkdir(dir, 0755);
  if (!j) return -1;
  static const char *const names[][2] = {{"num_refiner_layers", "token_refiner_num_layers"},
                                         {"ffn_dim", "ffn_hidden_size"},
                                         {"in_channels", "latents_dim"},
                                         {"freq_dim", "timestep_input_dim"},
                                         {"rope_freq_dim", "rope_inv_freq_len"}};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    json_object_set(j, names[i][1], json_object_get(j, names[i][0]));
    if (!disagree) json_object_del(j, names[i][0]);
  }
  if (disagree) json_object_set_new(j, "ffn_hidden_size", json_integer(dt_json_int(j, "ffn_dim") * 2));
  const int head_dim = dt_json_int(j, "attention_head_dim");
  int rc = json_dump_file(j, dst, JSON_INDENT(2));
  json_decref(j);
  dit_st_file *f = NULL;
  dit_error e = {0};
  if (rc || dit_st_open(src, NULL, &f, &e) != DIT_OK) return -1;
  size_t n = 0;
  dt_st_piece *p = release_pieces(f, head_dim, bad_qkv, &n);
  dit_st_close(f);
  dt_path(dst, sizeof dst, dir, "model.safetensors");
  rc = p ? dt_st_compose(src, dst, p, n) : -1;
  free(p);
  return rc;
}

/* The release checkpoint loads to the same model: the one-frame forward bit for bit (unfolded, so the
 * modulation is read through its own remapped mapping too); a QKV layout that is not the release's, and a
 * config whose two names for one field disagree, are refused by name. */
static void test_release_names(const dt_args *a) {
  char fdir[1024], file[1200], dir[1200];
  dt_path(fdir, sizeof fdir, a->data, "models/minimax-h3-tiny");
  dt_path(file, sizeof file, fdir, "components.safetensors");
  dt_path(dir, sizeof dir, a->tmp, "h3_release");
  CHECK(write_release(fdir, dir, false, false) == 0);
  dit_h3 *want = load_h3(a), *got = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_h3_load(g_be, dir, &got, &e) == DIT_OK, "%s", e.msg);
  h3_case k;
  if (want && got && case_load(file, one_frame_names, &k)) {
    const size_t n = (size_t)(k.c.n_video * dit_h3_get_config(want)->patch_dim);
    float *o[2] = {calloc(n, sizeof(float)), calloc(n, sizeof(float))};
    CHECK(o[0] && o[1] && dit_h3_forward(want, &k.c, o[0], NULL, &e) == DIT_OK &&
          dit_h3_forward(got, &k.c, o[1], NULL, &e) == DIT_OK);
    CHECK_MSG(o[0] && o[1] && !memcmp(o[0], o[1], n * sizeof(float)), "release checkpoint: %.3g from diffusers'",
              o[0] && o[1] ? dt_rel_err(o[1], o[0], n) : -1.0);
    printf("the release's checkpoint (interleaved qkv, [gate; value], its names): the same forward bit for bit\n");
    free(o[0]), free(o[1]);
    case_free(&k);
  }
  dit_h3_free(want), dit_h3_free(got);
  got = NULL;
  CHECK(write_release(fdir, dir, true, false) == 0);
  CHECK(dit_h3_load(g_be, dir, &got, &e) == DIT_ERR_FORMAT && strstr(e.msg, "QKV layout is not recognized") && !got);
  printf("q and k only: %s\n", e.msg);
  CHECK(write_release(fdir, dir, false, true) == 0);
  CHECK(dit_h3_load(g_be, dir, &got, &e) == DIT_ERR_FORMAT && strstr(e.msg, "disagree") && !got);
  printf("two names for one field: %s\n", e.msg);
  char st[1400];
  snprintf(st, sizeof st, "%s/model.safetensors", dir); /* neither layout: block 0 without q, k, v */
  CHECK(write_release(fdir, dir, false, false) == 0 &&
        dt_st_rewrite(st, st, "blocks.0.attn.qkv_proj.weight", NULL) == 0);
  CHECK(dit_h3_load(g_be, dir, &got, &e) == DIT_ERR_FORMAT && strstr(e.msg, "neither") && !got);
  printf("no q, k, v in block 0: %s\n", e.msg);
}

/* Quantized transformer files (`ditrun quantize`: Q8_0 GGUF, scaled e4m3 safetensors) load through
 * dit_h3_load_file with the folder's config: the one-frame forward moves from the stored weights' by what
 * the format's rounding allows (Q8_0: 8-bit steps of each 32-value block's max; e4m3: 3 mantissa bits), and
 * a file without the folder's config is refused. */
static void test_quantized(const dt_args *a) {
  char fdir[1024], file[1200], cfg[1200], out[2][1200];
  dt_path(fdir, sizeof fdir, a->data, "models/minimax-h3-tiny");
  dt_path(file, sizeof file, fdir, "components.safetensors");
  dt_path(cfg, sizeof cfg, fdir, "transformer/config.json");
  dt_path(out[0], sizeof out[0], a->tmp, "h3_q8_0.gguf");
  dt_path(out[1], sizeof out[1], a->tmp, "h3_fp8.safetensors");
  const dit_dtype types[2] = {DIT_Q8_0, DIT_F8_E4M3};
  const double bound[2] = {2e-2, 1.5e-1}; /* relative error of the output: a few times each format's step */
  dit_ctx *ctx = NULL;
  dit_ctx_params cp;
  dit_ctx_params_default(&cp);
  CHECK(dit_ctx_create(&cp, &ctx) == DIT_OK);
  dit_h3 *want = load_h3(a);
  h3_case k;
  const bool have = want && ctx && case_load(file, one_frame_names, &k);
  const size_t n = have ? (size_t)(k.c.n_video * dit_h3_get_config(want)->patch_dim) : 0;
  float *ref = have ? calloc(n, sizeof(float)) : NULL, *got = have ? calloc(n, sizeof(float)) : NULL;
  dit_error e = {0};
  CHECK(!have || (ref && got && dit_h3_forward(want, &k.c, ref, NULL, &e) == DIT_OK));
  for (int t = 0; have && ref && got && t < 2; t++) {
    const dit_quantize_params q = {.model_dir = fdir, .type = types[t], .output = out[t], .overwrite = 1};
    CHECK_MSG(dit_quantize(ctx, &q) == DIT_OK, "%s", dit_ctx_last_error(ctx));
    dit_h3 *m = NULL;
    CHECK_MSG(dit_h3_load_file(g_be, out[t], cfg, &m, &e) == DIT_OK, "%s", e.msg);
    if (m) CHECK_MSG(dit_h3_forward(m, &k.c, got, NULL, &e) == DIT_OK, "%s", e.msg);
    const double r = dt_rel_err(got, ref, n);
    printf("%s transformer: one-frame forward %.3g from the stored weights'\n", t ? "e4m3" : "Q8_0", r);
    CHECK_MSG(m && r > 0 && r <= bound[t], "%s: %.3g", out[t], r);
    dit_h3_free(m);
  }
  dit_h3 *none = NULL;
  CHECK(dit_h3_load_file(g_be, out[0], NULL, &none, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "config.json"));
  if (have) case_free(&k);
  free(ref), free(got);
  dit_h3_free(want);
  dit_ctx_free(ctx);
}

/* Call i of the pipeline's run (names: its tensor names, kept while k is used). */
static bool call_case(const char *ref, int i, char nm[6][64], h3_case *k) {
  const char *fmt[6] = {"hidden_states", "audio_hidden_states", "timestep", "timestep_indices", "out0", "out1"};
  for (int j = 0; j < 6; j++) snprintf(nm[j], 64, "transformer.%d.%s", i, fmt[j]);
  const char *const names[10] = {"prompt_embeds", nm[0], nm[1], nm[2], nm[3], "token_tags", "position_ids",
                                 "text_indices", "video_indices", "audio_indices"};
  return case_load(ref, names, k);
}

/* One pass over the run's three calls on m, to tol; tag starts each check's name. */
static void calls_pass(const char *ref, const json_t *rj, dit_h3 *m, const char *tag, double tol) {
  for (int i = 0; rj && m && i < 3; i++) {
    char nm[6][64];
    h3_case k;
    if (!call_case(ref, i, nm, &k)) {
      case_free(&k);
      break;
    }
    const dit_h3_config *g = dit_h3_get_config(m);
    const size_t nv = (size_t)(k.c.n_video * g->patch_dim), na = (size_t)(k.c.n_audio * g->audio_channels);
    float *wv = dt_load_f32_n(ref, nm[4], nv), *wa = dt_load_f32_n(ref, nm[5], na);
    float *gv = calloc(nv, sizeof(float)), *ga = calloc(na, sizeof(float));
    dit_error e = {0};
    if (wv && wa && gv && ga) {
      CHECK_MSG(dit_h3_forward(m, &k.c, gv, ga, &e) == DIT_OK, "%s", e.msg);
      char what[128];
      snprintf(what, sizeof what, "%scall %d (%d timestep%s): video", tag, i, k.c.n_timesteps,
               k.c.n_timesteps > 1 ? "s" : "");
      check_rel(what, gv, wv, nv, tol);
      snprintf(what, sizeof what, "%scall %d: audio", tag, i);
      check_rel(what, ga, wa, na, tol);
    }
    free(wv), free(wa), free(gv), free(ga);
    case_free(&k);
  }
}

/* Every transformer call of the pipeline's run: 25 text + 414 audio + 74 video rows; on a GPU again with BF16
 * activations (the pipeline's there), to the other families' bf16-activation bound, which the CPU refuses. */
static void test_calls(const dt_args *a) {
  char ref[1200];
  json_t *rj = fixture(a, NULL, ref, NULL);
  dit_h3 *m = load_h3(a);
  dit_error e = {0};
  if (m && !g_gpu) {
    CHECK(dit_h3_set_act_dtype(m, DIT_BF16, &e) == DIT_ERR_UNSUPPORTED && strstr(e.msg, "computes in F32"));
    printf("bf16 activations on the CPU: %s\n", e.msg);
  }
  for (int pass = 0; pass < (g_gpu ? 2 : 1); pass++) {
    if (pass) CHECK_MSG(m && dit_h3_set_act_dtype(m, DIT_BF16, &e) == DIT_OK, "%s", e.msg);
    calls_pass(ref, rj, m, pass ? "bf16 activations, " : "", pass ? NMSE_BF16_ACT : DIT_TOL);
  }
  dit_h3_free(m);
  json_decref(rj);
}

/* The fold: the run's distinct timesteps folded once; every call then gives what it gave unfolded (the
 * acceptance: identical up to float reassociation, 1e-6), and a timestep outside the fold is refused. */
static void test_fold(const dt_args *a) {
  char ref[1200];
  json_t *rj = fixture(a, NULL, ref, NULL);
  dit_h3 *m = load_h3(a);
  h3_case k[3];
  char nm[3][6][64];
  float *out[3][2][2] = {{{NULL}}}; /* [call][unfolded, folded][video, audio] */
  float ts[8];
  int n = 0, loaded = 0;
  dit_error e = {0};
  for (int i = 0; rj && m && i < 3 && call_case(ref, i, nm[i], &k[i]); i++, loaded++)
    for (int j = 0; j < k[i].c.n_timesteps; j++) {
      bool seen = false;
      for (int q = 0; q < n; q++) seen = seen || ts[q] == k[i].c.timesteps[j];
      if (!seen && n < 8) ts[n++] = k[i].c.timesteps[j];
    }
  CHECK(loaded == 3);
  const dit_h3_config *g = m ? dit_h3_get_config(m) : NULL;
  for (int f = 0; g && loaded == 3 && f < 2; f++) {
    if (f) {
      dit_h3_fold_info info;
      CHECK_MSG(dit_h3_fold(m, n, ts, &info, &e) == DIT_OK, "%s", e.msg);
      printf("fold of %d timesteps: %zu bytes of tables from %zu bytes of projections in %.3f ms\n", n,
             info.table_bytes, info.streamed_bytes, info.build_s * 1e3);
      CHECK(info.streamed_bytes == dit_h3_modulation_bytes(m) && info.streamed_bytes == 2 * (432 * 12 + 432) * 2);
    }
    for (int i = 0; i < 3; i++) {
      const size_t nv = (size_t)(k[i].c.n_video * g->patch_dim), na = (size_t)(k[i].c.n_audio * g->audio_channels);
      out[i][f][0] = calloc(nv, sizeof(float)), out[i][f][1] = calloc(na, sizeof(float));
      if (out[i][f][0] && out[i][f][1])
        CHECK_MSG(dit_h3_forward(m, &k[i].c, out[i][f][0], out[i][f][1], &e) == DIT_OK, "%s", e.msg);
      if (!f) continue;
      const double ev = dt_rel_err(out[i][1][0], out[i][0][0], nv), ea = dt_rel_err(out[i][1][1], out[i][0][1], na);
      printf("call %d folded against unfolded: video %.3g, audio %.3g\n", i, ev, ea);
      CHECK_MSG(ev <= 1e-6 && ea <= 1e-6, "call %d folded: %.3g / %.3g", i, ev, ea);
    }
  }
  if (g && loaded == 3) { /* a schedule that changed after the fold */
    const float t0 = k[2].ts[0];
    k[2].ts[0] = t0 + 0.01f;
    CHECK(dit_h3_forward(m, &k[2].c, out[2][1][0], out[2][1][1], &e) == DIT_ERR_INVALID_ARG &&
          strstr(e.msg, "folded"));
    printf("a timestep outside the fold: %s\n", e.msg);
    k[2].ts[0] = t0;
    /* the tables are in the activation dtype: the same one is kept, another refused while folded */
    CHECK(dit_h3_set_act_dtype(m, DIT_F32, &e) == DIT_OK);
    CHECK(dit_h3_set_act_dtype(m, DIT_BF16, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "before folding"));
    printf("another activation dtype while folded: %s\n", e.msg);
    dit_h3_unfold(m); /* and unfolded again, the call runs */
    CHECK(dit_h3_forward(m, &k[2].c, out[2][1][0], out[2][1][1], &e) == DIT_OK);
  }
  for (int i = 0; i < loaded; i++) case_free(&k[i]);
  for (int i = 0; i < 3; i++)
    for (int f = 0; f < 2; f++) free(out[i][f][0]), free(out[i][f][1]);
  dit_h3_free(m);
  json_decref(rj);
}

/* n float32 values against doubles cast to float32 (the transformer casts the positions so). */
static bool same_f32(const float *want, const double *got, int64_t n, int64_t stride) {
  for (int64_t i = 0; i < n; i++)
    if (want[i] != (float)got[i * stride]) return false;
  return true;
}

/* The run's layout (25 text, 2 x 207 audio, 37 frames of 1 x 2 patches) and the grids at the real canvas. */
static void test_layout(const dt_args *a) {
  char ref[1200], comp[1200];
  json_t *rj = fixture(a, NULL, ref, comp);
  const json_t *r = json_object_get(rj, "resolved");
  dit_h3_layout_in in = {.n_text = dt_json_int(r, "num_text_tokens"), .frames = dt_json_int(r, "num_latent_frames"),
                         .lh = dt_json_int(r, "latent_height"), .lw = dt_json_int(r, "latent_width"), .patch_h = 2,
                         .patch_w = 2, .audio_latents = dt_json_int(r, "num_audio_latents"), .audio_channels = 2};
  dit_h3_layout l;
  dit_error e = {0};
  if (!rj) return;
  CHECK_MSG(dit_h3_layout_make(&in, &l, &e) == DIT_OK, "%s", e.msg);
  CHECK(l.S == dt_json_int(r, "sequence_length"));
  float *pos = NULL;
  int32_t *tags = NULL, *idx[3] = {NULL, NULL, NULL};
  int64_t n = 0, ni[3] = {0, 0, 0};
  CHECK(load_f32(ref, "position_ids", &pos, &n) == 0 && load_i32(ref, "token_tags", &tags, &n) == 0);
  CHECK(load_i32(ref, "text_indices", &idx[0], &ni[0]) == 0 && load_i32(ref, "audio_indices", &idx[1], &ni[1]) == 0 &&
        load_i32(ref, "video_indices", &idx[2], &ni[2]) == 0);
  if (pos && tags && idx[0] && idx[1] && idx[2] && n == l.S) {
    CHECK_MSG(same_f32(pos, l.positions, 3 * l.S, 1), "the positions differ from the pipeline's");
    CHECK(!memcmp(tags, l.tags, (size_t)l.S * sizeof *tags));
    CHECK(ni[0] == l.n_text && !memcmp(idx[0], l.text_index, (size_t)ni[0] * sizeof(int32_t)));
    CHECK(ni[1] == l.n_audio && !memcmp(idx[1], l.audio_index, (size_t)ni[1] * sizeof(int32_t)));
    CHECK(ni[2] == l.n_video && !memcmp(idx[2], l.video_index, (size_t)ni[2] * sizeof(int32_t)));
    printf("layout: %lld rows (%lld text, %lld audio, %lld video), the pipeline's positions, tags and indices\n",
           (long long)l.S, (long long)l.n_text, (long long)l.n_audio, (long long)l.n_video);
  }
  /* the real canvas: 768x1344 -> 48x84 latents (patch 2: 24 x 42), 37 latent frames, origin 0 */
  double g[64];
  float *want = NULL;
  int64_t nw = 0;
  const double sa = sqrt(48.0 * 84.0);
  dit_h3_spatial_grid(48, 2, sa, g);
  CHECK(load_f32(comp, "pos_real_h", &want, &nw) == 0 && nw == 24 && same_f32(want, g, 24, 1));
  free(want), want = NULL;
  dit_h3_spatial_grid(84, 2, sa, g);
  CHECK(load_f32(comp, "pos_real_w", &want, &nw) == 0 && nw == 42 && same_f32(want, g, 42, 1));
  free(want), want = NULL;
  dit_h3_temporal_grid(37, 0.0, g);
  CHECK(load_f32(comp, "pos_real_t", &want, &nw) == 0 && nw == 37 && same_f32(want, g, 37, 1));
  free(want);
  in.lw = 5; /* not divisible by the patch */
  dit_h3_layout bad;
  CHECK(dit_h3_layout_make(&in, &bad, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "not divisible"));
  free(pos), free(tags), free(idx[0]), free(idx[1]), free(idx[2]);
  dit_h3_layout_free(&l);
  json_decref(rj);
}

/* Both schedules (the run's 4 sigmas, and 50) bit for bit, and every step of the run. */
static void test_scheduler(const dt_args *a) {
  char ref[1200], comp[1200];
  json_t *rj = fixture(a, NULL, ref, comp);
  const json_t *sj = json_object_get(rj, "schedulers");
  const double shift[2] = {json_real_value(json_object_get(sj, "video_shift")),
                           json_real_value(json_object_get(sj, "audio_shift"))};
  const char *kind[2] = {"video", "audio"};
  dit_error e = {0};
  for (int k = 0; rj && k < 2; k++) {
    CHECK(shift[k] > 0);
    float sig[DIT_H3_MAX_SIGMAS], ts[DIT_H3_MAX_SIGMAS];
    for (int r = 0; r < 2; r++) {
      const int n = r ? 50 : 4;
      int ns = 0;
      char sn[64], tn[64];
      snprintf(sn, sizeof sn, r ? "sched_%s_sigmas_50" : "sigmas_%s", kind[k]);
      snprintf(tn, sizeof tn, r ? "sched_%s_timesteps_50" : "timesteps_%s", kind[k]);
      const char *file = r ? comp : ref;
      CHECK_MSG(dit_h3_sched_set(shift[k], n, sig, &ns, ts, &e) == DIT_OK, "%s", e.msg);
      float *ws = dt_load_f32_n(file, sn, (size_t)ns), *wt = dt_load_f32_n(file, tn, (size_t)(ns - 1));
      if (ws && wt) {
        CHECK_MSG(!memcmp(ws, sig, (size_t)ns * sizeof *sig), "%s: the sigmas differ", sn);
        CHECK_MSG(!memcmp(wt, ts, (size_t)(ns - 1) * sizeof *ts), "%s: the timesteps differ", tn);
        printf("%s schedule of %d sigmas (shift %g): bit for bit\n", kind[k], ns, shift[k]);
      }
      free(ws), free(wt);
    }
    int ns = 0;
    CHECK(dit_h3_sched_set(shift[k], 4, sig, &ns, ts, &e) == DIT_OK && ns == 4);
    for (int i = 0; i < 3; i++) { /* the run's steps: rows [n, C] */
      char nm[3][64];
      snprintf(nm[0], 64, "step_%s.%d.sample", kind[k], i);
      snprintf(nm[1], 64, "step_%s.%d.model_output", kind[k], i);
      snprintf(nm[2], 64, "step_%s.%d.out0", kind[k], i);
      const size_t n = k ? 414 * 4 : 74 * 16;
      float *x = dt_load_f32_n(ref, nm[0], n), *v = dt_load_f32_n(ref, nm[1], n), *want = dt_load_f32_n(ref, nm[2], n);
      if (x && v && want) {
        dit_h3_sched_step(x, v, n, ts[i], sig[i], sig[i + 1]);
        const double r = dt_rel_err(x, want, n);
        CHECK_MSG(r <= 1e-6, "%s: %.3g", nm[2], r);
        if (i == 2) printf("%s steps 0..2: last relative error %.3g\n", kind[k], r);
      }
      free(x), free(v), free(want);
    }
  }
  int ns = 0;
  float sig[DIT_H3_MAX_SIGMAS], ts[DIT_H3_MAX_SIGMAS];
  CHECK(dit_h3_sched_set(12.0, 1, sig, &ns, ts, &e) == DIT_ERR_INVALID_ARG);
  CHECK(dit_h3_sched_set(0.0, 4, sig, &ns, ts, &e) == DIT_ERR_INVALID_ARG);
  json_decref(rj);
}

/* post_quant_conv + the ViT decoder on one latent frame [4, 1, 4, 6] -> [3, 4, 16, 24] (components' vae_dec1). */
static void test_vae_decoder(const dt_args *a) {
  char dir[1024], file[1200];
  dt_path(dir, sizeof dir, a->data, "models/minimax-h3-tiny/vae");
  dt_path(file, sizeof file, a->data, "models/minimax-h3-tiny/components.safetensors");
  dit_h3_vae *v = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_h3_vae_load(g_be, dir, &v, &e) == DIT_OK, "%s", e.msg);
  float *z = dt_load_f32_n(file, "vae_dec1_z", 4 * 1 * 4 * 6), *want = dt_load_f32_n(file, "vae_dec1_out", 3 * 4 * 16 * 24);
  float *got = calloc(3 * 4 * 16 * 24, sizeof(float));
  if (v && z && want && got) {
    const dit_h3_vae_config *c = dit_h3_vae_get_config(v);
    CHECK(c->patch == 4 && c->patch_t == 4 && c->latent_channels == 4 && c->registers == 4);
    CHECK_MSG(dit_h3_vae_decode_clip(v, 1, 4, 6, z, got, &e) == DIT_OK, "%s", e.msg);
    check_rel("VAE decoder, one latent frame -> 4 frames of 16x24", got, want, 3 * 4 * 16 * 24, DIT_TOL);
  }
  free(z), free(want), free(got);
  /* the whole decode at the pipeline's defaults: 7 latent frames -> 22 (one temporal chunk and its tail) */
  z = dt_load_f32_n(file, "vae_dec7_z", 4 * 7 * 2 * 4), want = dt_load_f32_n(file, "vae_dec7_out", 3 * 22 * 8 * 16);
  got = calloc(3 * 22 * 8 * 16, sizeof(float));
  if (v && z && want && got) {
    CHECK(dit_h3_vae_frames(v, 7) == 22 && dit_h3_vae_frames(v, 12) == 39 && dit_h3_vae_frames(v, 37) == 124);
    CHECK_MSG(dit_h3_vae_decode(v, 7, 2, 4, z, DIT_H3_VAE_TILING_DEFAULT, got, &e) == DIT_OK, "%s", e.msg);
    check_rel("VAE decode, 7 latent frames -> 22 frames of 8x16", got, want, 3 * 22 * 8 * 16, DIT_TOL);
  }
  free(z), free(want), free(got);
  /* one clip spatially tiled (tiles of 16 px, overlaps >= 8: 2 x 4 tiles over 24 x 36, overlaps 8 / 12, 8, 8) */
  z = dt_load_f32_n(file, "vae_tiled_z", 4 * 1 * 6 * 9), want = dt_load_f32_n(file, "vae_tiled_out", 3 * 4 * 24 * 36);
  got = calloc(3 * 4 * 24 * 36, sizeof(float));
  if (v && z && want && got) {
    CHECK_MSG(dit_h3_vae_decode_clip_tiled(v, 1, 6, 9, z, (dit_h3_vae_tiling){16, 8}, got, &e) == DIT_OK, "%s", e.msg);
    check_rel("VAE clip in 2 x 4 tiles of 16 px, 24x36", got, want, 3 * 4 * 24 * 36, DIT_TOL);
    CHECK(dit_h3_vae_decode_clip_tiled(v, 1, 6, 9, z, (dit_h3_vae_tiling){18, 8}, got, &e) == DIT_ERR_INVALID_ARG);
    printf("tiles off the latent grid: %s\n", e.msg);
  }
  free(z), free(want), free(got);
  dit_h3_vae_free(v);
}

/* The audio VAE's decode of the run's stereo latents [2, 4, 207] -> [2, 1, 828] (reference.safetensors). */
static void test_audio_decoder(const dt_args *a) {
  char dir[1024], ref[1200];
  json_t *rj = fixture(a, NULL, ref, NULL);
  dt_path(dir, sizeof dir, a->data, "models/minimax-h3-tiny/audio_vae");
  dit_h3_audio *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_h3_audio_load(g_be, dir, &m, &e) == DIT_OK, "%s", e.msg);
  float *z = dt_load_f32_n(ref, "audio_vae_decode.0.arg0", 2 * 4 * 207), *want = dt_load_f32_n(ref, "audio_vae_decode.0.out0", 2 * 828);
  float *got = calloc(2 * 828, sizeof(float));
  if (m && z && want && got) {
    const dit_h3_audio_config *c = dit_h3_audio_get_config(m);
    CHECK(c->hop == 4 && c->sample_rate == 32000 && c->latent_channels == 4);
    CHECK_MSG(dit_h3_audio_decode(m, 2, 207, z, got, &e) == DIT_OK, "%s", e.msg);
    check_rel("audio VAE decode, 2 x 207 latents -> 2 x 828 samples", got, want, 2 * 828, DIT_TOL);
  }
  free(z), free(want), free(got);
  dit_h3_audio_free(m);
  json_decref(rj);
}

/* The whole run on the call of reference.json (8x16, 124 frames, 4 sigmas, seed 42). */
static void test_pipeline(const dt_args *a) {
  char dir[1024], ref[1200];
  json_t *rj = fixture(a, dir, ref, NULL);
  if (!rj) return;
  const json_t *call = json_object_get(rj, "call");
  const dit_h3_request r = {.prompt = json_string_value(json_object_get(call, "prompt")),
                            .height = dt_json_int(call, "height"), .width = dt_json_int(call, "width"),
                            .frames = dt_json_int(call, "num_frames"), .steps = dt_json_int(call, "num_inference_steps"),
                            .seed = (uint64_t)dt_json_int(rj, "seed")};
  dit_h3_parts p;
  dit_h3_result out;
  dit_error e = {0};
  CHECK_MSG(dit_h3_parts_load(g_be, dir, &p, &e) == DIT_OK, "%s", e.msg);
  if (!p.tr) {
    json_decref(rj);
    return;
  }
  CHECK_MSG(dit_h3_generate(g_be, &p, &r, &out, &e) == DIT_OK, "%s", e.msg);
  if (out.video && out.audio) {
    CHECK(out.frames == 124 && out.height == 8 && out.width == 16 && out.channels == 2 && out.samples == 828);
    float *wl = dt_load_f32_n(ref, "latents", 4 * 37 * 2 * 4), *wal = dt_load_f32_n(ref, "audio_latents", 2 * 4 * 207);
    float *wv = dt_load_f32_n(ref, "video", 124 * 8 * 16 * 3), *wa = dt_load_f32_n(ref, "audio", 2 * 828);
    if (wl && wal && wv && wa) {
      check_rel("run: video latents after 3 steps", out.latents, wl, 4 * 37 * 2 * 4, DIT_TOL);
      check_rel("run: audio latents after 3 steps", out.audio_latents, wal, 2 * 4 * 207, DIT_TOL);
      check_rel("run: frames [124, 8, 16, 3] in [0, 1]", out.video, wv, 124 * 8 * 16 * 3, DIT_TOL);
      check_rel("run: sound [2, 828]", out.audio, wa, 2 * 828, DIT_TOL);
      int worst = 0;
      for (size_t k = 0; k < (size_t)124 * 8 * 16 * 3; k++) {
        const int d = abs((int)lrintf(out.video[k] * 255.0f) - (int)lrintf(wv[k] * 255.0f));
        worst = d > worst ? d : worst;
      }
      CHECK_MSG(g_gpu || worst <= 1, "8-bit frames: %d levels apart", worst);
      printf("run: 8-bit frames at most %d level(s) from the pipeline's\n", worst);
    }
    free(wl), free(wal), free(wv), free(wa);
  }
  dit_h3_result_free(&out); /* generate fills out afresh (it does not free what out held) */
  dit_h3_request bad = r;
  bad.frames = 100;
  CHECK(dit_h3_generate(g_be, &p, &bad, &out, &e) == DIT_ERR_INVALID_ARG && strstr(e.msg, "107 is the next"));
  printf("100 frames: %s\n", e.msg);
  dit_h3_result_free(&out);
  dit_h3_parts_free(&p);
  json_decref(rj);
}

/* The family through the public API and the CLI: the folder's defaults, the run as a dit_clip, bad requests. */
static void test_family(const dt_args *a) {
  char dir[1024], ref[1200];
  json_t *rj = fixture(a, dir, ref, NULL);
  if (!rj) return;
  dit_ctx *ctx = NULL;
  dit_model *m = dt_model_open(dir, g_gpu, &ctx);
  if (m) {
    dit_gen_defaults d;
    dit_model_get_defaults(m, &d);
    CHECK(!strcmp(d.family, "minimax-h3") && d.frames == 124 && d.frames_multiple == 17 && d.frames_offset == 5 &&
          d.fps == 24.0 && d.steps == 49 && d.size_multiple == 8);
    /* the 16:9 canvas of 768 x 1344 px (the index's short edge and area) rounded to the tiny model's multiple 8 */
    CHECK_MSG(d.height == 760 && d.width == 1352, "canvas %dx%d", d.width, d.height);
    const json_t *call = json_object_get(rj, "call");
    dit_gen_params p;
    dit_gen_params_default(&p);
    p.prompt = json_string_value(json_object_get(call, "prompt"));
    p.width = 16, p.height = 8, p.frames = 124, p.steps = 3, p.seed = (uint64_t)dt_json_int(rj, "seed");
    dit_clip c = {0};
    CHECK_MSG(dit_model_generate_clip(m, &p, &c, NULL) == DIT_OK, "%s", dit_ctx_last_error(ctx));
    float *wv = dt_load_f32_n(ref, "video", 124 * 8 * 16 * 3), *wa = dt_load_f32_n(ref, "audio", 2 * 828);
    if (c.rgb && c.samples && wv && wa) {
      CHECK(c.n_frames == 124 && c.width == 16 && c.height == 8 && c.fps == 24.0 && c.channels == 2 && c.n_samples == 828);
      int worst = 0;
      for (size_t k = 0; k < (size_t)124 * 8 * 16 * 3; k++) {
        const int dv = abs((int)c.rgb[k] - (int)lrintf(wv[k] * 255.0f));
        worst = dv > worst ? dv : worst;
      }
      double se = 0, sr = 0;
      for (int i = 0; i < 828; i++)
        for (int ch = 0; ch < 2; ch++) {
          const double dd = (double)c.samples[i * 2 + ch] - wa[ch * 828 + i];
          se += dd * dd, sr += (double)wa[ch * 828 + i] * wa[ch * 828 + i];
        }
      CHECK_MSG(g_gpu ? worst <= 12 : worst <= 1, "clip frames %d levels apart", worst);
      CHECK_MSG(sqrt(se / sr) <= (g_gpu ? 1e-2 : DIT_TOL), "clip sound %.3g", sqrt(se / sr));
      printf("public API: 124 frames within %d level(s), sound within %.3g\n", worst, sqrt(se / sr));
    }
    free(wv), free(wa);
    /* nothing kept: each stage loads its component and releases it after; the same clip */
    dit_model_opts mo;
    dit_model_opts_default(&mo);
    mo.device = g_gpu ? DIT_DEVICE_CUDA : DIT_DEVICE_CPU, mo.keep = 0;
    dit_model *lean = NULL;
    dit_clip c2 = {0};
    CHECK_MSG(dit_model_load(ctx, dir, &mo, &lean) == DIT_OK, "%s", dit_ctx_last_error(ctx));
    if (lean) CHECK_MSG(dit_model_generate_clip(lean, &p, &c2, NULL) == DIT_OK, "%s", dit_ctx_last_error(ctx));
    CHECK(c.rgb && c2.rgb && c2.n_frames == c.n_frames && c2.n_samples == c.n_samples &&
          !memcmp(c.rgb, c2.rgb, (size_t)c.n_frames * c.width * c.height * 3) &&
          !memcmp(c.samples, c2.samples, (size_t)c.n_samples * c.channels * sizeof(float)));
    printf("nothing kept between stages: the same clip\n");
    dit_clip_free(&c2);
    dit_model_free(lean);
    dit_clip_free(&c);
    p.guidance = 2.0, p.guidance_set = 1;
    CHECK(dit_model_generate_clip(m, &p, &c, NULL) == DIT_ERR_INVALID_ARG && strstr(dit_ctx_last_error(ctx), "distilled"));
    dit_model_free(m);
  }
  dit_ctx_free(ctx);
  char cmd[4096], out[1200], log[1200], msg[512], f1[1400];
  dt_path(out, sizeof out, a->tmp, "h3_clip"); /* a frames folder: PNG frames and audio.wav (no FFmpeg needed) */
  dt_path(log, sizeof log, a->tmp, "h3_cli.log");
  snprintf(f1, sizeof f1, "%s/frame_00107.png", out);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && '%s/ditrun' generate -m '%s' -p 'a fox' --width 16 --height 8 --frames 107 "
           "--steps 2 --quiet -o '%s'", out, a->bin, dir, out);
  int rc = dt_run_output(cmd, log, msg, sizeof msg);
  CHECK_MSG(rc == 0 && access(f1, F_OK) == 0, "frames folder: rc %d: %s", rc, msg);
  snprintf(cmd, sizeof cmd, "'%s/ditrun' generate -m '%s' -p 'a fox' --frames 100 -o '%s.mp4'", a->bin, dir, out);
  rc = dt_run_output(cmd, log, msg, sizeof msg);
  CHECK_MSG(rc == 2 && strstr(msg, "5 + a multiple of 17"), "--frames 100: rc %d: %s", rc, msg);
  printf("--frames 100: %s", msg);
  json_decref(rj);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {
      test_tokens, test_encoder,   test_layout, test_scheduler,   test_refiner,      test_one_frame, test_release_names,
      test_quantized, test_calls, test_fold,   test_vae_decoder, test_audio_decoder, test_pipeline,  test_family};
  return dt_main_on_env_backend(argc, argv, cases, sizeof cases / sizeof cases[0], &g_be, &g_gpu);
}
