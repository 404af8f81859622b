/* Public tokenizer API (include/ditrun.h "tokenizer"): loads a model folder's
 * tokenizer.json, picks the chat template from model_index.json's pipeline class, and
 * encodes prompts the way the pipelines do before their text encoder. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/ctx.h"
#include "pipeline/family.h"
#include "io/json.h"
#include "text/chat.h"
#include "text/tokenizer.h"

static bool is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The chat style named by model_dir/model_index.json's _class_name; -1 if unknown. */
static dit_status chat_style_of(const char *model_dir, int *style, dit_error *err) {
  char path[4096];
  *style = -1;
  if (snprintf(path, sizeof path, "%s/model_index.json", model_dir) >= (int)sizeof path)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "model folder path is too long");
  if (!is_file(path)) return DIT_OK;
  json_t *j;
  DIT_TRY(dit_json_load_file(path, (size_t)1 << 20, &j, err));
  const char *cls = NULL;
  dit_status s = dit_json_string(j, "_class_name", &cls, path, err);
  if (s == DIT_OK) {
    const dit_family *f = dit_family_find(cls);
    *style = f ? (int)f->chat : -1;
  }
  json_decref(j);
  return s;
}

/* dir has a tokenizer: tokenizer.json, or the vocab.json + merges.txt layout. */
static bool holds_tokenizer(const char *dir) {
  char path[4096];
  const char *names[] = {"tokenizer.json", "vocab.json"};
  for (int i = 0; i < 2; i++)
    if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) < (int)sizeof path && is_file(path)) return true;
  return false;
}

dit_status dit_tokenizer_load(dit_ctx *ctx, const char *model_dir, dit_tokenizer **out) {
  dit_error e = {0};
  if (!out) return DIT_ERR_INVALID_ARG;
  *out = NULL;
  if (!model_dir) {
    dit_errorf(&e, DIT_ERR_INVALID_ARG, "tokenizer: no model folder given");
    return dit_ctx_fail(ctx, &e);
  }
  char sub[4096];
  if (snprintf(sub, sizeof sub, "%s/tokenizer", model_dir) >= (int)sizeof sub) {
    dit_errorf(&e, DIT_ERR_INVALID_ARG, "model folder path is too long");
    return dit_ctx_fail(ctx, &e);
  }
  int style = -1;
  dit_status s;
  if (holds_tokenizer(model_dir)) {
    s = dit_tok_load(model_dir, out, &e);
  } else {
    s = chat_style_of(model_dir, &style, &e);
    if (s == DIT_OK && !holds_tokenizer(sub))
      s = dit_errorf(&e, DIT_ERR_INVALID_ARG,
                     "%s: no tokenizer here nor in its tokenizer/ folder (tokenizer.json, or vocab.json + merges.txt)",
                     model_dir);
    if (s == DIT_OK) s = dit_tok_load(sub, out, &e);
  }
  if (s != DIT_OK) return dit_ctx_fail(ctx, &e);
  dit_tok_set_chat_style(*out, style);
  return DIT_OK;
}

dit_status dit_tokenizer_encode(dit_ctx *ctx, const dit_tokenizer *tok, const char *text, size_t len, int chat,
                                int32_t **ids, size_t *n) {
  dit_error e = {0};
  if (!ids || !n) return DIT_ERR_INVALID_ARG;
  *ids = NULL;
  *n = 0;
  if (!tok || (!text && len)) {
    dit_errorf(&e, DIT_ERR_INVALID_ARG, "tokenizer: NULL argument");
    return dit_ctx_fail(ctx, &e);
  }
  if (!chat) {
    dit_status s = dit_tok_encode(tok, text, len, ids, n, &e);
    return s == DIT_OK ? DIT_OK : dit_ctx_fail(ctx, &e);
  }
  int style = dit_tok_chat_style(tok);
  if (style < 0) {
    char list[512];
    dit_errorf(&e, DIT_ERR_INVALID_ARG, "tokenizer: no chat template is known for this model (model_index.json's "
               "_class_name must be one of %s)", dit_family_pipeline_list(list, sizeof list));
    return dit_ctx_fail(ctx, &e);
  }
  /* validate first so that the offset in the message is the prompt's, not the template's */
  dit_status s = dit_utf8_validate(text, len, &e);
  char *rendered = NULL;
  size_t rlen = 0;
  if (s == DIT_OK) s = dit_chat_render_n((dit_chat_style)style, text, len, &rendered, &rlen, &e);
  if (s == DIT_OK) s = dit_tok_encode(tok, rendered, rlen, ids, n, &e);
  free(rendered);
  return s == DIT_OK ? DIT_OK : dit_ctx_fail(ctx, &e);
}

dit_status dit_tokenizer_encode_model(dit_ctx *ctx, const dit_tokenizer *tok, const char *text, size_t len,
                                      size_t max_length, int32_t **ids, size_t *n) {
  dit_error e = {0};
  if (!ids || !n) return DIT_ERR_INVALID_ARG;
  *ids = NULL;
  *n = 0;
  if (!tok || (!text && len) || max_length < 1) {
    dit_errorf(&e, DIT_ERR_INVALID_ARG, "tokenizer: NULL argument or max_length 0");
    return dit_ctx_fail(ctx, &e);
  }
  dit_status s = dit_tok_encode_model(tok, text ? text : "", len, max_length, ids, n, &e);
  return s == DIT_OK ? DIT_OK : dit_ctx_fail(ctx, &e);
}

size_t dit_tokenizer_vocab_size(const dit_tokenizer *tok) { return dit_tok_vocab_size(tok); }

void dit_tokenizer_free(dit_tokenizer *tok) { dit_tok_free(tok); }
