/* `ditrun serve`: a request body to a generation request (see serve.h). OpenAI's images API
 * fields (model, prompt, n, size, response_format, user) plus ditrun's (negative_prompt,
 * steps, guidance, seed, loras). Strict: every field's type and range checked, unknown fields and
 * duplicate keys refused, so a typo is a 400 naming it instead of a silently ignored option. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static bool fail(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *msg, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, len, fmt, ap);
  va_end(ap);
  return false;
}

void srv_req_free(srv_gen_req *r) {
  free(r->prompt);
  free(r->negative);
  r->prompt = r->negative = NULL;
}

static bool get_string(json_t *v, const char *key, size_t max, bool empty_ok, char **out, char *msg, size_t ml) {
  if (!json_is_string(v)) return fail(msg, ml, "\"%s\" must be a string", key);
  size_t n = json_string_length(v);
  if (n > max) return fail(msg, ml, "\"%s\" is %zu bytes (at most %zu)", key, n, max);
  if (!n && !empty_ok) return fail(msg, ml, "\"%s\" is empty", key);
  if (memchr(json_string_value(v), 0, n)) return fail(msg, ml, "\"%s\" holds a NUL character", key);
  *out = strdup(json_string_value(v));
  if (!*out) return fail(msg, ml, "out of memory");
  return true;
}

static bool get_int(json_t *v, const char *key, long long lo, long long hi, long long *out, char *msg, size_t ml) {
  if (!json_is_integer(v)) return fail(msg, ml, "\"%s\" must be an integer", key);
  long long x = json_integer_value(v);
  if (x < lo || x > hi) return fail(msg, ml, "\"%s\" = %lld is outside %lld..%lld", key, x, lo, hi);
  *out = x;
  return true;
}

/* "WxH" (or "auto": the model's default). */
static bool get_size(json_t *v, const srv_limits *lim, int *w, int *h, char *msg, size_t ml) {
  if (!json_is_string(v)) return fail(msg, ml, "\"size\" must be a string \"WIDTHxHEIGHT\"");
  const char *s = json_string_value(v);
  if (!strcmp(s, "auto")) return *w = *h = 0, true;
  long a = 0, b = 0;
  const char *q = s;
  int da = 0, db = 0;
  for (; *q >= '0' && *q <= '9' && da < 6; q++, da++) a = a * 10 + (*q - '0');
  bool x = *q == 'x';
  for (q += x; x && *q >= '0' && *q <= '9' && db < 6; q++, db++) b = b * 10 + (*q - '0');
  if (!x || !da || !db || *q)
    return fail(msg, ml, "\"size\" = \"%.40s\" is not \"WIDTHxHEIGHT\" (e.g. \"1024x1024\") or \"auto\"", s);
  if (a < 16 || b < 16 || a > SRV_MAX_SIDE || b > SRV_MAX_SIDE)
    return fail(msg, ml, "\"size\" = \"%s\": each side must be 16..%d pixels", s, SRV_MAX_SIDE);
  if ((int64_t)a * b > lim->max_pixels)
    return fail(msg, ml, "\"size\" = \"%s\" is %lld pixels (this server allows at most %lld)", s, (long long)a * b,
                (long long)lim->max_pixels);
  *w = (int)a, *h = (int)b;
  return true;
}

/* "loras": [{"name": "NAME", "scale": S}, ...], NAME a file NAME.safetensors of the server's
 * --lora-dir: letters, digits, '_', '-', '.', not starting with '.' (no paths). */
static bool get_loras(json_t *v, const srv_limits *lim, srv_gen_req *r, char *msg, size_t ml) {
  if (!lim->loras) return fail(msg, ml, "\"loras\": this server takes no LoRAs in requests (it has no --lora-dir)");
  if (!json_is_array(v) || json_array_size(v) > DIT_MAX_LORAS)
    return fail(msg, ml, "\"loras\" must be an array of at most %d {\"name\", \"scale\"} objects", DIT_MAX_LORAS);
  size_t i;
  json_t *e;
  json_array_foreach(v, i, e) {
    if (!json_is_object(e)) return fail(msg, ml, "\"loras\"[%zu] must be an object {\"name\", \"scale\"}", i);
    const char *k;
    json_t *x;
    bool named = false;
    r->lora_scale[i] = 1.0;
    json_object_foreach(e, k, x) {
      if (!strcmp(k, "name")) {
        const char *n = json_is_string(x) ? json_string_value(x) : "";
        const size_t len = json_is_string(x) ? json_string_length(x) : 0;
        bool ok = len && n[0] != '.';
        for (size_t c = 0; ok && c < len; c++)
          ok = (n[c] >= 'a' && n[c] <= 'z') || (n[c] >= 'A' && n[c] <= 'Z') || (n[c] >= '0' && n[c] <= '9') ||
               n[c] == '_' || n[c] == '-' || n[c] == '.';
        if (!ok || len > SRV_LORA_NAME_MAX)
          return fail(msg, ml, "\"loras\"[%zu].name must be 1..%d letters, digits, '_', '-' or '.' (not first)", i,
                      SRV_LORA_NAME_MAX);
        snprintf(r->lora_name[i], sizeof r->lora_name[i], "%s", n);
        named = true;
      } else if (!strcmp(k, "scale")) {
        double sc = json_is_number(x) ? json_number_value(x) : NAN;
        if (!isfinite(sc) || sc < -100 || sc > 100)
          return fail(msg, ml, "\"loras\"[%zu].scale must be a number in -100..100", i);
        r->lora_scale[i] = sc;
      } else {
        return fail(msg, ml, "\"loras\"[%zu]: unknown field \"%.64s\" (known: name, scale)", i, k);
      }
    }
    if (!named) return fail(msg, ml, "\"loras\"[%zu] has no \"name\"", i);
  }
  r->n_loras = (int)json_array_size(v);
  return true;
}

/* One field of the request. */
static bool field(const char *key, json_t *v, const srv_limits *lim, srv_gen_req *r, char *msg, size_t ml) {
  long long x;
  if (!strcmp(key, "prompt")) return get_string(v, key, SRV_MAX_PROMPT, false, &r->prompt, msg, ml);
  if (!strcmp(key, "negative_prompt")) return get_string(v, key, SRV_MAX_PROMPT, true, &r->negative, msg, ml);
  if (!strcmp(key, "model")) {
    if (!json_is_string(v) || json_string_length(v) >= sizeof r->model || !json_string_length(v))
      return fail(msg, ml, "\"model\" must be a model name (GET /v1/models lists them)");
    snprintf(r->model, sizeof r->model, "%s", json_string_value(v));
    return true;
  }
  if (!strcmp(key, "n")) {
    if (!get_int(v, key, 1, lim->max_n, &x, msg, ml)) return false;
    return r->n = (int)x, true;
  }
  if (!strcmp(key, "size")) return get_size(v, lim, &r->width, &r->height, msg, ml);
  if (!strcmp(key, "response_format")) {
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    if (strcmp(s, "b64_json") && strcmp(s, "url"))
      return fail(msg, ml, "\"response_format\" must be \"b64_json\" or \"url\"");
    return r->b64 = !strcmp(s, "b64_json"), true;
  }
  if (!strcmp(key, "steps")) {
    if (!get_int(v, key, 1, SRV_MAX_STEPS, &x, msg, ml)) return false;
    return r->steps = (int)x, true;
  }
  if (!strcmp(key, "guidance")) {
    if (!json_is_number(v)) return fail(msg, ml, "\"guidance\" must be a number");
    double g = json_number_value(v);
    if (!isfinite(g) || g < 0 || g > 100) return fail(msg, ml, "\"guidance\" = %g is outside 0..100", g);
    return r->guidance = g, r->guidance_set = true, true;
  }
  if (!strcmp(key, "seed")) {
    if (!get_int(v, key, 0, INT64_MAX, &x, msg, ml)) return false;
    return r->seed = (uint64_t)x, r->seed_set = true, true;
  }
  if (!strcmp(key, "user")) { /* OpenAI's end-user tag: accepted, not used */
    if (!json_is_string(v) || json_string_length(v) > 256) return fail(msg, ml, "\"user\" must be a short string");
    return true;
  }
  if (!strcmp(key, "loras")) return get_loras(v, lim, r, msg, ml);
  return fail(msg, ml,
              "unknown field \"%.64s\" (known: model, prompt, negative_prompt, n, size, response_format, steps, "
              "guidance, seed, loras, user)",
              key);
}

bool srv_req_parse(const char *body, size_t len, const srv_limits *lim, srv_gen_req *out, char *msg, size_t msglen) {
  memset(out, 0, sizeof *out);
  out->n = 1;
  out->b64 = true;
  json_error_t je;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) return fail(msg, msglen, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
  bool ok = true;
  if (!json_is_object(root)) ok = fail(msg, msglen, "the body must be a JSON object");
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (!ok) break;
    ok = field(key, v, lim, out, msg, msglen);
  }
  if (ok && !out->prompt) ok = fail(msg, msglen, "\"prompt\" is required");
  json_decref(root);
  if (!ok) srv_req_free(out);
  return ok;
}

char *srv_base64(const uint8_t *p, size_t n) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  if (n > (SIZE_MAX - 1) / 4 * 3 - 3) return NULL;
  char *s = malloc((n + 2) / 3 * 4 + 1), *o = s;
  if (!s) return NULL;
  size_t i = 0;
  for (; i + 2 < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
    *o++ = tab[v >> 18], *o++ = tab[(v >> 12) & 63], *o++ = tab[(v >> 6) & 63], *o++ = tab[v & 63];
  }
  if (i < n) {
    uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
    *o++ = tab[v >> 18], *o++ = tab[(v >> 12) & 63];
    *o++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
    *o++ = '=';
  }
  *o = 0;
  return s;
}
