/* The Krea 2 fixtures (models/krea2-raw-tiny, krea2-turbo-tiny; made by
 * gen/make_fixtures_krea2.py) against what ditrun already has: the prompt the pipeline hands
 * its Qwen3-VL text encoder is Qwen-Image's chat template tokenized as a fixed-length block,
 * [system prefix + prompt | pad to max_sequence_length + 34 - 5 | the 5 suffix tokens]; the
 * reference's prompt_ids and suffix_ids must be what ditrun's tokenizer gives for those
 * strings (the prompt's tokens, then the tokenizer's pad id), and its mask after the 34 prefix
 * tokens must mark the prompt and the suffix, not the padding. The files the family will
 * load are checked for the geometry the generator wrote (taps, distilled flag, latents). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture.h"
#include "models/krea2.h"
#include "models/qwen3.h"
#include "models/vae_qwen.h"
#include "pipeline/prompt.h"
#include "testing.h"
#include "text/tokenizer.h"

#define PREFIX                                                                                                 \
  "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "       \
  "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n"
#define SUFFIX "<|im_end|>\n<|im_start|>assistant\n"
#define PREFIX_TOKENS 34
#define SUFFIX_TOKENS 5

static void check_folder(const dt_args *a, const char *name, bool distilled, int steps) {
  char dir[1024], sub[256], ref[1200], tokdir[1200];
  snprintf(sub, sizeof sub, "models/%s", name);
  dt_path(dir, sizeof dir, a->data, sub);
  json_t *rj = dt_load_reference(dir, ref, sizeof ref);
  if (!rj) return;
  const char *prompt = json_string_value(json_object_get(rj, "prompt"));
  const int msl = (int)json_integer_value(json_object_get(rj, "max_sequence_length"));
  CHECK(prompt && msl > 0);
  CHECK(json_is_true(json_object_get(rj, "is_distilled")) == distilled);
  CHECK(json_integer_value(json_object_get(rj, "steps")) == steps);
  dt_path(tokdir, sizeof tokdir, dir, "tokenizer");
  dit_tokenizer *t = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_tok_load(tokdir, &t, &e) == DIT_OK, "%s tokenizer: %s", name, e.msg);
  int32_t *want = NULL, *sfx = NULL, *got = NULL, *gs = NULL;
  int64_t shp[8], shs[8];
  int nd = 0, nds = 0;
  if (t && prompt && !dt_load_i32(ref, "prompt_ids", &want, shp, &nd) &&
      !dt_load_i32(ref, "suffix_ids", &sfx, shs, &nds)) {
    const size_t block = (size_t)(msl + PREFIX_TOKENS - SUFFIX_TOKENS);
    CHECK_MSG(nd == 1 && (size_t)shp[0] == block, "%s: prompt_ids of %lld, expected %zu", name, (long long)shp[0],
              block);
    char *text = malloc(strlen(PREFIX) + strlen(prompt) + 1);
    size_t n = 0, ns = 0;
    if (text) {
      strcpy(text, PREFIX);
      strcat(text, prompt);
      CHECK(dit_tok_encode(t, text, strlen(text), &got, &n, &e) == DIT_OK);
    }
    const int32_t pad = dit_tok_pad_id(t);
    bool same = got && n <= block;
    for (size_t i = 0; same && i < block; i++) same = want[i] == (i < n ? got[i] : pad);
    CHECK_MSG(same, "%s: the prefix + prompt block differs from the pipeline's (%zu tokens, pad %d)", name, n, pad);
    CHECK(dit_tok_encode(t, SUFFIX, strlen(SUFFIX), &gs, &ns, &e) == DIT_OK);
    same = ns == SUFFIX_TOKENS && nds == 1 && shs[0] == SUFFIX_TOKENS;
    for (size_t i = 0; same && i < ns; i++) same = gs[i] == sfx[i];
    CHECK_MSG(same, "%s: the suffix tokens differ from the pipeline's", name);
    /* the mask after the system prefix: the prompt's tokens, no padding, the suffix */
    int32_t *mask = NULL;
    int64_t shm[8];
    int ndm = 0;
    if (n > PREFIX_TOKENS && !dt_load_i32(ref, "prompt_mask", &mask, shm, &ndm)) {
      CHECK(ndm == 1 && shm[0] == msl);
      bool ok = ndm == 1 && shm[0] == msl;
      for (int i = 0; ok && i < msl; i++) {
        const bool real = (size_t)i < n - PREFIX_TOKENS || i >= msl - SUFFIX_TOKENS;
        ok = mask[i] == (real ? 1 : 0);
      }
      CHECK_MSG(ok, "%s: prompt_mask is not [prompt | no padding | suffix]", name);
      printf("%s: %zu prompt tokens after the prefix, %d padding, %d suffix: as the pipeline\n", name,
             n - PREFIX_TOKENS, msl - SUFFIX_TOKENS - (int)(n - PREFIX_TOKENS), SUFFIX_TOKENS);
    }
    free(mask);
    free(text);
  }
  /* the packed latents the transformer takes: [1, (H/16)(W/16), 64] */
  float *lat = NULL;
  int64_t shl[8];
  int ndl = 0;
  if (!dt_load_f32(ref, "latents_init", &lat, shl, &ndl)) {
    const int64_t h = json_integer_value(json_object_get(rj, "height")), w = json_integer_value(json_object_get(rj, "width"));
    CHECK(ndl == 3 && shl[0] == 1 && shl[1] == (h / 16) * (w / 16) && shl[2] == 64);
  }
  free(lat);
  free(want), free(sfx), free(got), free(gs);
  dit_tok_free(t);
  json_decref(rj);
}

static void test_raw(const dt_args *a) { check_folder(a, "krea2-raw-tiny", false, 3); }
static void test_turbo(const dt_args *a) { check_folder(a, "krea2-turbo-tiny", true, 2); }

#define TOL 1e-4 /* the bound for CPU fp32 against diffusers float32 */

static dit_backend *g_be;

static dit_krea2 *load_transformer(const dt_args *a, const char *name) {
  char dir[1024], sub[256];
  snprintf(sub, sizeof sub, "models/%s/transformer", name);
  dt_path(dir, sizeof dir, a->data, sub);
  dit_krea2 *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_krea2_load(g_be, dir, &m, &e) == DIT_OK, "%s: %s", dir, e.msg);
  return m;
}

static uint8_t *ref_mask(const char *file, const char *key, size_t n) {
  int32_t *d = NULL;
  int64_t sh[8];
  int nd = 0;
  if (dt_load_i32(file, key, &d, sh, &nd) || nd != 1 || (size_t)sh[0] != n) {
    CHECK_MSG(0, "%s: %s is not a mask of %zu", file, key, n);
    free(d);
    return NULL;
  }
  uint8_t *m = malloc(n);
  for (size_t i = 0; m && i < n; i++) m[i] = (uint8_t)(d[i] != 0);
  free(d);
  return m;
}

static void check_close(const char *what, const float *got, const float *want, size_t n) {
  const double r = dt_rel_err(got, want, n);
  printf("%s: relative error %.3g\n", what, r);
  CHECK_MSG(r <= TOL, "%s: relative error %.3g > %g", what, r, TOL);
}

/* Text fusion, txt_in and one forward of the transformer on the components' explicit
 * inputs (a 12-token text, 3 of them padding; a 4 x 6 latent grid). */
static void test_transformer(const dt_args *a) {
  char dir[1024], file[1200];
  dt_path(dir, sizeof dir, a->data, "models/krea2-raw-tiny");
  dt_path(file, sizeof file, dir, "components.safetensors");
  dit_krea2 *m = load_transformer(a, "krea2-raw-tiny");
  if (!m) return;
  const dit_krea2_config *c = dit_krea2_get_config(m);
  CHECK(c->dim == 128 && c->n_kv_heads == 2 && c->n_taps == 3 && c->text_dim == 8);
  const int64_t L = 12, Si = 24, C = c->in_channels, T = c->n_taps, td = c->text_dim, D = c->dim;
  float *enc = dt_load_f32_n(file, "dit_encoder", (size_t)(L * T * td)), *x = dt_load_f32_n(file, "dit_hidden", (size_t)(Si * C));
  float *t = dt_load_f32_n(file, "dit_t", 1), *pos = dt_load_f32_n(file, "dit_position_ids", (size_t)(3 * (L + Si)));
  float *want_f = dt_load_f32_n(file, "dit_text_fusion", (size_t)(L * td)), *want_t = dt_load_f32_n(file, "dit_txt_in", (size_t)(L * D));
  float *want = dt_load_f32_n(file, "dit_out", (size_t)(Si * C));
  uint8_t *mask = ref_mask(file, "dit_mask", (size_t)L);
  float *fused = calloc((size_t)(L * td), sizeof *fused), *txt = calloc((size_t)(L * D), sizeof *txt);
  float *out = calloc((size_t)(Si * C), sizeof *out);
  if (enc && x && t && pos && want_f && want_t && want && mask) {
    dit_tensor te = dit_tensor_make(DIT_F32, enc, 4, (int64_t[]){1, L, T, td});
    dit_tensor tf = dit_tensor_make(DIT_F32, fused, 3, (int64_t[]){1, L, td});
    dit_tensor tt = dit_tensor_make(DIT_F32, txt, 3, (int64_t[]){1, L, D});
    dit_tensor tx = dit_tensor_make(DIT_F32, x, 3, (int64_t[]){1, Si, C});
    dit_tensor to = dit_tensor_make(DIT_F32, out, 3, (int64_t[]){1, Si, C});
    dit_error e = {0};
    CHECK_MSG(dit_krea2_encode_text(m, &te, mask, &tf, &tt, &e) == DIT_OK, "encode_text: %s", e.msg);
    /* the padded tokens' own rows are never read (their keys are masked): compare the real ones */
    check_close("text fusion (9 real tokens)", fused, want_f, (size_t)(9 * td));
    check_close("txt_in (9 real tokens)", txt, want_t, (size_t)(9 * D));
    CHECK_MSG(dit_krea2_forward(m, &tx, &tt, mask, t, pos, &to, &e) == DIT_OK, "forward: %s", e.msg);
    check_close("transformer output", out, want, (size_t)(Si * C));
    /* the same weights as one file with the folder's config, and with the released geometry
     * (no config: the tiny file's shapes do not fit it, named) */
    char st[1200], cfg[1200];
    dt_path(st, sizeof st, dir, "transformer/diffusion_pytorch_model.safetensors");
    dt_path(cfg, sizeof cfg, dir, "transformer/config.json");
    dit_krea2 *f = NULL;
    float *out2 = calloc((size_t)(Si * C), sizeof *out2);
    dit_tensor to2 = dit_tensor_make(DIT_F32, out2, 3, (int64_t[]){1, Si, C});
    CHECK_MSG(dit_krea2_load_file(g_be, st, cfg, &f, &e) == DIT_OK, "%s", e.msg);
    if (f && out2) {
      CHECK(dit_krea2_forward(f, &tx, &tt, mask, t, pos, &to2, &e) == DIT_OK);
      CHECK_MSG(!memcmp(out, out2, (size_t)(Si * C) * sizeof *out), "a single file gives another result");
    }
    dit_krea2_free(f);
    free(out2);
    f = NULL;
    CHECK(dit_krea2_load_file(g_be, st, NULL, &f, &e) == DIT_ERR_FORMAT && !f);
    CHECK_MSG(strstr(e.msg, "img_in.weight") != NULL, "%s", e.msg);
    /* bad inputs: a wrong latent width, a non-finite t */
    dit_tensor bad = dit_tensor_make(DIT_F32, x, 3, (int64_t[]){1, Si, C / 2});
    CHECK(dit_krea2_forward(m, &bad, &tt, mask, t, pos, &to, &e) == DIT_ERR_INVALID_ARG);
    const float nan_t = NAN;
    CHECK(dit_krea2_forward(m, &tx, &tt, mask, &nan_t, pos, &to, &e) == DIT_ERR_INVALID_ARG);
  }
  free(enc), free(x), free(t), free(pos), free(want_f), free(want_t), free(want), free(mask);
  free(fused), free(txt), free(out);
  dit_krea2_free(m);
}

/* Every transformer call of the pipeline run: the reference's tapped prompt states (and the
 * empty negative prompt's, with CFG) with their padded rows zeroed, the latents before the
 * step and its timestep. */
static void check_steps(const dt_args *a, const char *name) {
  char dir[1024], sub[256], ref[1200];
  snprintf(sub, sizeof sub, "models/%s", name);
  dt_path(dir, sizeof dir, a->data, sub);
  json_t *rj = dt_load_reference(dir, ref, sizeof ref);
  dit_krea2 *m = load_transformer(a, name);
  if (!rj || !m) {
    json_decref(rj);
    dit_krea2_free(m);
    return;
  }
  const dit_krea2_config *c = dit_krea2_get_config(m);
  const int L = (int)json_integer_value(json_object_get(rj, "max_sequence_length"));
  const int steps = (int)json_integer_value(json_object_get(rj, "steps"));
  const bool cfg = json_number_value(json_object_get(rj, "guidance_scale")) > 0;
  const int gh = (int)json_integer_value(json_object_get(rj, "height")) / 16;
  const int gw = (int)json_integer_value(json_object_get(rj, "width")) / 16;
  const int64_t Si = (int64_t)gh * gw, C = c->in_channels, T = c->n_taps, td = c->text_dim, D = c->dim;
  float *pos = calloc((size_t)(3 * (L + Si)), sizeof *pos);
  for (int64_t i = 0; i < Si; i++) pos[3 * (L + i) + 1] = (float)(i / gw), pos[3 * (L + i) + 2] = (float)(i % gw);
  float *ts = dt_load_f32_n(ref, "timesteps", (size_t)steps);
  float *txt[2] = {calloc((size_t)(L * D), sizeof(float)), calloc((size_t)(L * D), sizeof(float))};
  uint8_t *masks[2] = {NULL, NULL};
  float *out = calloc((size_t)(Si * C), sizeof *out);
  dit_error e = {0};
  for (int k = 0; k < (cfg ? 2 : 1); k++) {
    float *h = dt_load_f32_n(ref, k ? "negative_hidden" : "prompt_hidden", (size_t)(L * T * td));
    masks[k] = ref_mask(ref, k ? "negative_mask" : "prompt_mask", (size_t)L);
    /* the padded rows zeroed, as dit_krea2_encode_prompt leaves them: the outputs must not move */
    for (int64_t i = 0; h && masks[k] && i < L; i++)
      if (!masks[k][i]) memset(h + i * T * td, 0, (size_t)(T * td) * sizeof *h);
    dit_tensor te = dit_tensor_make(DIT_F32, h, 4, (int64_t[]){1, L, T, td});
    dit_tensor tt = dit_tensor_make(DIT_F32, txt[k], 3, (int64_t[]){1, L, D});
    if (h && masks[k]) CHECK_MSG(dit_krea2_encode_text(m, &te, masks[k], NULL, &tt, &e) == DIT_OK, "%s", e.msg);
    free(h);
  }
  for (int i = 0; ts && i < steps; i++) {
    char key[64], what[128];
    snprintf(key, sizeof key, i ? "latents_step%d" : "latents_init", i - 1);
    float *lat = dt_load_f32_n(ref, key, (size_t)(Si * C));
    const float t = ts[i] / 1000.0f;
    for (int k = 0; lat && k < (cfg ? 2 : 1); k++) {
      snprintf(key, sizeof key, "dit_step%d_%s", i, k ? "uncond" : "cond");
      float *want = dt_load_f32_n(ref, key, (size_t)(Si * C));
      dit_tensor tx = dit_tensor_make(DIT_F32, lat, 3, (int64_t[]){1, Si, C});
      dit_tensor tt = dit_tensor_make(DIT_F32, txt[k], 3, (int64_t[]){1, L, D});
      dit_tensor to = dit_tensor_make(DIT_F32, out, 3, (int64_t[]){1, Si, C});
      CHECK_MSG(dit_krea2_forward(m, &tx, &tt, masks[k], &t, pos, &to, &e) == DIT_OK, "%s", e.msg);
      snprintf(what, sizeof what, "%s %s", name, key);
      if (want) check_close(what, out, want, (size_t)(Si * C));
      free(want);
    }
    free(lat);
  }
  free(pos), free(ts), free(txt[0]), free(txt[1]), free(masks[0]), free(masks[1]), free(out);
  dit_krea2_free(m);
  json_decref(rj);
}

static void test_steps_raw(const dt_args *a) { check_steps(a, "krea2-raw-tiny"); }
static void test_steps_turbo(const dt_args *a) { check_steps(a, "krea2-turbo-tiny"); }

/* The prompt's tapped text-encoder states as the pipeline computes them (its template, the
 * fixed-length block, the Qwen3-VL language model): mask equal, the real rows within TOL. */
static void check_prompt(dit_qwen3 *te, const dit_tokenizer *tok, const char *prompt, int msl, const int *taps,
                         int n_taps, const char *ref, const char *hkey, const char *mkey) {
  const int H = dit_qwen3_get_config(te)->hidden_size;
  const size_t row = (size_t)n_taps * (size_t)H;
  float *want = dt_load_f32_n(ref, hkey, (size_t)msl * row), *got = NULL;
  uint8_t *wmask = ref_mask(ref, mkey, (size_t)msl), *mask = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_krea2_encode_prompt(te, tok, prompt, msl, taps, n_taps, &got, &mask, &e) == DIT_OK, "%s", e.msg);
  if (want && wmask && got && mask) {
    CHECK_MSG(!memcmp(mask, wmask, (size_t)msl), "%s: the mask differs from the pipeline's", mkey);
    size_t n = 0; /* the real rows, packed in place */
    for (int i = 0; i < msl; i++)
      if (wmask[i]) {
        memmove(want + n * row, want + (size_t)i * row, row * sizeof *want);
        memmove(got + n * row, got + (size_t)i * row, row * sizeof *got);
        n++;
      }
    char what[128];
    snprintf(what, sizeof what, "%s (%zu real tokens of %d)", hkey, n, msl);
    check_close(what, got, want, n * row);
  }
  free(want), free(got), free(wmask), free(mask);
}

static void test_text_encoder(const dt_args *a) {
  char dir[1024], sub[1200], ref[1200], comp[1200];
  dt_path(dir, sizeof dir, a->data, "models/krea2-raw-tiny");
  json_t *rj = dt_load_reference(dir, ref, sizeof ref);
  dt_path(comp, sizeof comp, dir, "components.safetensors");
  dit_qwen3 *te = NULL;
  dit_tokenizer *tok = NULL;
  dit_error e = {0};
  dt_path(sub, sizeof sub, dir, "text_encoder");
  CHECK_MSG(dit_qwen3_load(g_be, sub, &te, &e) == DIT_OK, "%s", e.msg);
  dt_path(sub, sizeof sub, dir, "tokenizer");
  CHECK_MSG(dit_tok_load(sub, &tok, &e) == DIT_OK, "%s", e.msg);
  if (rj && te && tok) {
    const dit_qwen3_config *c = dit_qwen3_get_config(te);
    CHECK(c->mrope_pairs == c->head_dim / 2 && c->num_layers == 6);
    /* the generator moved the pipeline to bf16 and back: the RoPE inv_freq buffer is bf16 */
    CHECK(dit_qwen3_set_rope_freq_dtype(te, DIT_BF16, &e) == DIT_OK);
    const json_t *tj = json_object_get(rj, "text_encoder_select_layers");
    int taps[16], n_taps = (int)json_array_size(tj);
    for (int i = 0; i < n_taps && i < 16; i++) taps[i] = (int)json_integer_value(json_array_get(tj, (size_t)i));
    const int msl = (int)json_integer_value(json_object_get(rj, "max_sequence_length"));
    CHECK(n_taps == 3);
    check_prompt(te, tok, json_string_value(json_object_get(rj, "prompt")), msl, taps, n_taps, ref, "prompt_hidden",
                 "prompt_mask");
    check_prompt(te, tok, "", msl, taps, n_taps, ref, "negative_hidden", "negative_mask");
    /* the generator's second prompt (PROMPTS[1] of make_fixtures_krea2.py) */
    check_prompt(te, tok, "Ein Fuchs im Schnee \xf0\x9f\xa6\x8a \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e"
                 "\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88, 3.14 CRLF\r\n  end",
                 msl, taps, n_taps, comp, "te_hidden", "te_mask");
  }
  dit_qwen3_free(te);
  dit_tok_free(tok);
  json_decref(rj);
}

/* The VAE decoder on the components' latent [1, 16, 1, 4, 6] (one frame) against diffusers'
 * decode (clamped to [-1, 1]). */
static void test_vae(const dt_args *a) {
  char dir[1024], comp[1200];
  dt_path(dir, sizeof dir, a->data, "models/krea2-raw-tiny/vae");
  dit_vae_qwen *m = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_vae_qwen_load(g_be, dir, &m, &e) == DIT_OK, "%s", e.msg);
  dt_path(comp, sizeof comp, a->data, "models/krea2-raw-tiny/components.safetensors");
  float *z = dt_load_f32_n(comp, "vae_z", 16 * 4 * 6), *want = dt_load_f32_n(comp, "vae_image", 3 * 32 * 48);
  float *img = calloc(3 * 32 * 48, sizeof *img);
  if (m && z && want) {
    const dit_vae_qwen_config *c = dit_vae_qwen_get_config(m);
    CHECK(c->z_dim == 16 && c->n_levels == 4 && c->base_dim == 8);
    dit_tensor tz = dit_tensor_make(DIT_F32, z, 4, (int64_t[]){1, 16, 4, 6});
    dit_tensor ti = dit_tensor_make(DIT_F32, img, 4, (int64_t[]){1, 3, 32, 48});
    CHECK_MSG(dit_vae_qwen_decode(m, &tz, &ti, 0, &e) == DIT_OK, "%s", e.msg);
    check_close("VAE decode 4x6 -> 32x48", img, want, 3 * 32 * 48);
    /* tiled: a tile covering the latent is the whole decode; 4 x 4 tiles (two across, blended
     * over their overlap) decode too, within [-1, 1] */
    float *tiled = calloc(3 * 32 * 48, sizeof *tiled);
    dit_tensor tt = dit_tensor_make(DIT_F32, tiled, 4, (int64_t[]){1, 3, 32, 48});
    CHECK(tiled && dit_vae_qwen_decode(m, &tz, &tt, 8, &e) == DIT_OK && !memcmp(tiled, img, 3 * 32 * 48 * sizeof *img));
    CHECK_MSG(tiled && dit_vae_qwen_decode(m, &tz, &tt, 4, &e) == DIT_OK, "%s", e.msg);
    bool in_range = tiled != NULL;
    for (int i = 0; in_range && i < 3 * 32 * 48; i++) in_range = tiled[i] >= -1.0f && tiled[i] <= 1.0f;
    CHECK(in_range);
    if (tiled) printf("VAE decode in 4 x 4 tiles: relative difference %.3g from the whole\n", dt_rel_err(tiled, img, 3 * 32 * 48));
    free(tiled);
    dit_tensor bad = dit_tensor_make(DIT_F32, z, 4, (int64_t[]){1, 8, 4, 12});
    CHECK(dit_vae_qwen_decode(m, &bad, &ti, 0, &e) == DIT_ERR_INVALID_ARG);
  }
  free(z), free(want), free(img);
  dit_vae_qwen_free(m);
}

/* Config errors the family must name: heads not divisible by KV heads; a missing text-fusion
 * block's weights. */
static void test_bad_inputs(const dt_args *a) {
  char src[1024], dir[1200], cmd[4096];
  dt_path(src, sizeof src, a->data, "models/krea2-raw-tiny/transformer");
  dt_path(dir, sizeof dir, a->tmp, "krea2_bad");
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp '%s'/* '%s'/ && "
           "sed -i 's/\"num_key_value_heads\": 2/\"num_key_value_heads\": 3/' '%s/config.json'",
           dir, dir, src, dir, dir);
  CHECK(system(cmd) == 0);
  dit_krea2 *m = NULL;
  dit_error e = {0};
  CHECK(dit_krea2_load(g_be, dir, &m, &e) == DIT_ERR_FORMAT);
  CHECK_MSG(strstr(e.msg, "num_key_value_heads") != NULL, "%s", e.msg);
  printf("KV heads 3 of 4: %s\n", e.msg);
  snprintf(cmd, sizeof cmd, "cp '%s/config.json' '%s/'", src, dir);
  CHECK(system(cmd) == 0);
  char st[1300], st2[1300];
  snprintf(st, sizeof st, "%s/diffusion_pytorch_model.safetensors", src);
  snprintf(st2, sizeof st2, "%s/diffusion_pytorch_model.safetensors", dir);
  CHECK(dt_st_rewrite(st, st2, "text_fusion.refiner_blocks.1.attn.to_q.weight", NULL) == 0);
  CHECK(dit_krea2_load(g_be, dir, &m, &e) == DIT_ERR_FORMAT && m == NULL);
  CHECK_MSG(strstr(e.msg, "text_fusion.refiner_blocks.1.attn.to_q.weight") != NULL, "%s", e.msg);
  dit_krea2_free(m);
  printf("a missing fusion block: %s\n", e.msg);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_raw,       test_turbo,       test_transformer, test_steps_raw,
                                                   test_steps_turbo, test_text_encoder, test_vae, test_bad_inputs};
  dit_error err = {0};
  if (dit_backend_cpu_create(2, &g_be, &err) != DIT_OK) {
    fprintf(stderr, "cpu backend: %s\n", err.msg);
    return 1;
  }
  int rc = dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
  dit_backend_free(g_be);
  return rc;
}
