/* Special tokens added around an encoding (the post_processor of tokenizer.json, single
 * sequence), HF-style truncation, and the pad token of tokenizer_config.json. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/tok_internal.h"

/* Appends the ids of special token `name` (from the template's special_tokens map). */
static dit_status template_special(dit_tokenizer *t, const json_t *specials, const char *name, int32_t *dst,
                                   size_t *n, dit_error *err) {
  const json_t *ids = json_object_get(json_object_get(specials, name), "ids");
  if (!json_is_array(ids))
    return dit_errorf(err, DIT_ERR_FORMAT, "post_processor: special token \"%.64s\" has no \"ids\" array", name);
  for (size_t i = 0; i < json_array_size(ids); i++) {
    const json_t *v = json_array_get(ids, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (size_t)json_integer_value(v) >= t->n_ids)
      return dit_errorf(err, DIT_ERR_FORMAT, "post_processor: special token \"%.64s\": id outside [0, %zu)", name,
                        t->n_ids);
    if (*n == TOK_MAX_STEPS) return dit_errorf(err, DIT_ERR_UNSUPPORTED, "post_processor: too many special tokens");
    dst[(*n)++] = (int32_t)json_integer_value(v);
  }
  return DIT_OK;
}

static dit_status load_template(dit_tokenizer *t, const json_t *p, dit_error *err) {
  const json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
  if (!json_is_array(single) || !json_is_object(specials))
    return dit_errorf(err, DIT_ERR_FORMAT, "TemplateProcessing needs a \"single\" array and a \"special_tokens\" object");
  bool seen = false;
  for (size_t i = 0; i < json_array_size(single); i++) {
    const json_t *e = json_array_get(single, i), *seq = json_object_get(e, "Sequence");
    const char *sp = json_string_value(json_object_get(json_object_get(e, "SpecialToken"), "id"));
    if (seq && !seen && !strcmp(json_string_value(json_object_get(seq, "id")) ? json_string_value(json_object_get(seq, "id")) : "", "A")) {
      seen = true;
    } else if (sp) {
      DIT_TRY(seen ? template_special(t, specials, sp, t->post_post, &t->n_post_post, err)
                   : template_special(t, specials, sp, t->post_pre, &t->n_post_pre, err));
    } else {
      return dit_errorf(err, DIT_ERR_FORMAT, "TemplateProcessing single[%zu]: must be the sequence A (once) or a "
                        "SpecialToken", i);
    }
  }
  if (!seen) return dit_errorf(err, DIT_ERR_FORMAT, "TemplateProcessing single: lacks the sequence A");
  return DIT_OK;
}

/* RobertaProcessing / BertProcessing: cls and sep are [token, id]. */
static dit_status load_cls_sep(dit_tokenizer *t, const json_t *p, dit_error *err) {
  static const char *const keys[] = {"cls", "sep"};
  int32_t *dst[] = {t->post_pre, t->post_post};
  size_t *n[] = {&t->n_post_pre, &t->n_post_post};
  for (int k = 0; k < 2; k++) {
    const json_t *v = json_array_get(json_object_get(p, keys[k]), 1);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (size_t)json_integer_value(v) >= t->n_ids)
      return dit_errorf(err, DIT_ERR_FORMAT, "post_processor.%s must be [token, id] with an id in [0, %zu)", keys[k],
                        t->n_ids);
    dst[k][(*n[k])++] = (int32_t)json_integer_value(v);
  }
  return DIT_OK;
}

dit_status tok_load_post(dit_tokenizer *t, const json_t *p, dit_error *err) {
  if (!p || json_is_null(p)) return DIT_OK;
  const char *type = json_string_value(json_object_get(p, "type"));
  if (!type) return dit_errorf(err, DIT_ERR_FORMAT, "post_processor needs a string \"type\"");
  if (!strcmp(type, "TemplateProcessing")) return load_template(t, p, err);
  if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) return load_cls_sep(t, p, err);
  if (!strcmp(type, "ByteLevel")) return DIT_OK; /* offsets only */
  return dit_errorf(err, DIT_ERR_UNSUPPORTED, "post_processor \"%.64s\" is not supported (TemplateProcessing, "
                    "RobertaProcessing, BertProcessing, ByteLevel)", type);
}

/* The token named by a tokenizer_config.json entry: a string or {"content": ...}. */
static const char *config_token(const json_t *cfg, const char *key) {
  const json_t *v = json_object_get(cfg, key);
  return json_is_string(v) ? json_string_value(v) : json_string_value(json_object_get(v, "content"));
}

dit_status tok_load_pad(dit_tokenizer *t, const char *dir, dit_error *err) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s/tokenizer_config.json", dir) >= (int)sizeof path || access(path, F_OK) != 0)
    return DIT_OK;
  json_t *cfg;
  DIT_TRY(dit_json_load_file(path, DIT_TOK_MAX_FILE_BYTES, &cfg, err));
  dit_status st = DIT_OK;
  const json_t *v = json_object_get(cfg, "pad_token");
  const char *pad = config_token(cfg, "pad_token");
  if (v && !json_is_null(v) && !pad)
    st = dit_errorf(err, DIT_ERR_FORMAT, "%s: pad_token must be a string or {\"content\": ...}", path);
  else if (pad && (t->pad_id = dit_tok_token_id(t, pad)) < 0)
    st = dit_errorf(err, DIT_ERR_FORMAT, "%s: pad_token \"%.64s\" is not a token", path, pad);
  json_decref(cfg);
  return st;
}

int32_t dit_tok_pad_id(const dit_tokenizer *t) { return t ? t->pad_id : -1; }

dit_status dit_tok_encode_model(const dit_tokenizer *t, const char *text, size_t len, size_t max_length,
                                int32_t **ids, size_t *n, dit_error *err) {
  *ids = NULL;
  *n = 0;
  if (!t) return dit_errorf(err, DIT_ERR_INVALID_ARG, "tokenizer: NULL argument");
  size_t n_special = t->n_post_pre + t->n_post_post;
  if (max_length && max_length < n_special)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "tokenizer: max_length %zu is less than the %zu special tokens",
                      max_length, n_special);
  int32_t *body;
  size_t nb;
  DIT_TRY(dit_tok_encode(t, text, len, &body, &nb, err));
  if (max_length && nb > max_length - n_special) nb = max_length - n_special; /* truncation: right side */
  size_t total = nb + n_special;
  if (total == 0) {
    free(body);
    return DIT_OK;
  }
  int32_t *o = malloc(total * sizeof *o);
  if (!o) {
    free(body);
    return dit_errorf(err, DIT_ERR_NOMEM, "tokenizer: cannot allocate %zu ids", total);
  }
  memcpy(o, t->post_pre, t->n_post_pre * sizeof *o);
  if (nb) memcpy(o + t->n_post_pre, body, nb * sizeof *o);
  memcpy(o + t->n_post_pre + nb, t->post_post, t->n_post_post * sizeof *o);
  free(body);
  *ids = o;
  *n = total;
  return DIT_OK;
}
