/* `ditrun serve`, the HTTP side (see serve.h, docs/SERVER.md) over libmicrohttpd with a thread
 * per connection: a handler may wait for its job (POST /v1/images/generations) or stream its
 * events without holding up anyone else. Bodies are collected up to max_body (413 past it);
 * the headers are bounded by the connection's memory limit; idle connections time out. Every
 * error answer is JSON: {"error": {"message", "type", "code"}}. */
#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "serve.h"

struct srv_http {
  srv_http_params p;
  struct MHD_Daemon *d;
};

/* Per request: the body as it arrives. */
typedef struct req_state {
  char *body;
  size_t n, cap;
  bool too_large, answered;
  size_t discarded;              /* bytes past the limit, read and dropped */
} req_state;

/* ---- answers ------------------------------------------------------------------------- */
static enum MHD_Result send_bytes(struct MHD_Connection *c, unsigned status, const char *type, void *data, size_t n,
                                  enum MHD_ResponseMemoryMode mode, const char *extra_h, const char *extra_v) {
  struct MHD_Response *r = MHD_create_response_from_buffer(n, data, mode);
  if (!r) {
    if (mode == MHD_RESPMEM_MUST_FREE) free(data);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", type);
  MHD_add_response_header(r, "Cache-Control", "no-store");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  if (extra_h) MHD_add_response_header(r, extra_h, extra_v);
  enum MHD_Result res = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return res;
}

/* Sends j (stolen) as JSON. */
static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *j, const char *extra_h,
                                 const char *extra_v) {
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (!s) return MHD_NO;
  return send_bytes(c, status, "application/json", s, strlen(s), MHD_RESPMEM_MUST_FREE, extra_h, extra_v);
}

static const char *error_type(unsigned status) {
  switch (status) {
    case 400: case 404: case 405: case 409: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 429: return "rate_limit_error";
    case 503: return "unavailable_error";
    default: return "server_error";
  }
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_t *j = json_pack("{s:{s:s,s:s,s:i}}", "error", "message", msg, "type", error_type(status), "code", (int)status);
  const char *h = status == 429 ? "Retry-After" : status == 401 ? "WWW-Authenticate" : NULL;
  return send_json(c, status, j, h, status == 429 ? "2" : "Bearer");
}

/* ---- JSON of jobs and models ------------------------------------------------------------ */
static json_t *job_json(const srv_job_view *v) {
  char size[32];
  snprintf(size, sizeof size, "%dx%d", v->width, v->height);
  json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:s,s:i,s:f,s:I,s:f}", "id", v->id, "object", "job", "model",
                        v->model, "state", srv_job_state_name(v->state), "step", v->step, "total_steps",
                        v->total_steps, "n", v->n, "n_done", v->n_done, "size", size, "steps", v->steps, "guidance",
                        v->guidance, "seed", (json_int_t)v->seed, "created", v->created);
  if (!j) return NULL;
  json_object_set_new(j, "started", v->started > 0 ? json_real(v->started) : json_null());
  json_object_set_new(j, "finished", v->finished > 0 ? json_real(v->finished) : json_null());
  json_object_set_new(j, "eta_s", v->eta_s >= 0 ? json_real(v->eta_s) : json_null());
  json_object_set_new(j, "stats", json_pack("{s:f,s:f,s:f,s:f}", "load_s", v->load_s, "encode_s", v->encode_s,
                                            "denoise_s", v->denoise_s, "decode_s", v->decode_s));
  json_object_set_new(j, "error", v->error[0] ? json_string(v->error) : json_null());
  json_t *imgs = json_array();
  for (int i = 0; i < v->n_done; i++) {
    char u[96];
    snprintf(u, sizeof u, "/v1/jobs/%s/image?index=%d", v->id, i);
    json_array_append_new(imgs, json_string(u));
  }
  json_object_set_new(j, "images", imgs);
  return j;
}

static json_t *models_json(const srv_http *h) {
  json_t *data = json_array();
  for (int i = 0; i < h->p.n_models; i++) {
    const dit_gen_defaults *d = &h->p.models[i].defaults;
    char size[32];
    snprintf(size, sizeof size, "%dx%d", d->width, d->height);
    json_array_append_new(data, json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:f,s:i,s:s}", "id", h->p.models[i].name,
                                          "object", "model", "owned_by", "local", "family", d->family,
                                          "default_size", size, "default_steps", d->steps, "default_guidance",
                                          d->guidance, "size_multiple", d->size_multiple, "sample_prompt",
                                          d->prompt));
  }
  return json_pack("{s:s,s:o}", "object", "list", "data", data);
}

/* ---- authentication ------------------------------------------------------------------- */
static bool same_secret(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  unsigned char d = na != nb;
  for (size_t i = 0; i < nb; i++) d |= (unsigned char)(a[i % (na ? na : 1)] ^ b[i]);
  return d == 0 && na == nb;
}

static bool authorized(const srv_http *h, struct MHD_Connection *c) {
  if (!h->p.api_key) return true;
  const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  return v && !strncmp(v, "Bearer ", 7) && same_secret(v + 7, h->p.api_key);
}

/* ---- a request's model and size ---------------------------------------------------------- */
/* The model index for r, or -1 after answering 400/404. */
static int pick_model(const srv_http *h, struct MHD_Connection *c, const srv_gen_req *r, enum MHD_Result *res) {
  int mi = 0;
  if (r->model[0]) {
    for (mi = 0; mi < h->p.n_models && strcmp(h->p.models[mi].name, r->model); mi++) {
    }
    if (mi == h->p.n_models) {
      *res = send_error(c, 404, "model \"%s\" is not loaded (GET /v1/models lists the models)", r->model);
      return -1;
    }
  }
  const dit_gen_defaults *d = &h->p.models[mi].defaults;
  int w = r->width ? r->width : d->width, ht = r->height ? r->height : d->height, m = d->size_multiple;
  if (m > 1 && (w % m || ht % m)) {
    *res = send_error(c, 400, "\"size\" = \"%dx%d\": model \"%s\" needs width and height multiples of %d", w, ht,
                      h->p.models[mi].name, m);
    return -1;
  }
  if ((int64_t)w * ht > h->p.limits.max_pixels) {
    *res = send_error(c, 400, "%dx%d (the model's default size) is more pixels than this server allows (%lld)", w, ht,
                      (long long)h->p.limits.max_pixels);
    return -1;
  }
  return mi;
}

/* Parses and queues the body; NULL after answering (400/404/429/503). */
static srv_job *submit(srv_http *h, struct MHD_Connection *c, const req_state *rs, enum MHD_Result *res, bool *b64) {
  srv_gen_req r;
  char msg[512];
  if (!srv_req_parse(rs->body ? rs->body : "", rs->n, &h->p.limits, &r, msg, sizeof msg)) {
    *res = send_error(c, 400, "%s", msg);
    return NULL;
  }
  int mi = pick_model(h, c, &r, res);
  *b64 = r.b64;
  srv_job *job = NULL;
  srv_submit_result sr = mi < 0 ? SRV_SUBMIT_OK : srv_jobs_submit(h->p.jobs, mi, &r, &job);
  srv_req_free(&r);
  if (sr == SRV_SUBMIT_FULL) *res = send_error(c, 429, "the queue is full; try again in a moment");
  if (sr == SRV_SUBMIT_STOPPING) *res = send_error(c, 503, "the server is shutting down");
  return job;
}

/* ---- POST /v1/images/generations: wait for the job, answer as OpenAI's images API --------- */
/* True when the client has closed its side (read end shut or the socket gone). */
static bool client_gone(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!ci) return false;
  struct pollfd pf = {ci->connect_fd, POLLRDHUP, 0};
  return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static enum MHD_Result images_answer(srv_http *h, struct MHD_Connection *c, srv_job *job, const srv_job_view *v,
                                     bool b64) {
  if (v->state == SRV_JOB_CANCELLED)
    return send_error(c, v->error_http == 503 ? 503 : 409, "job %s: %s", v->id, v->error);
  if (v->state != SRV_JOB_SUCCEEDED) return send_error(c, v->error_http ? v->error_http : 500, "%s", v->error);
  json_t *data = json_array();
  for (int i = 0; i < v->n_done; i++) {
    uint8_t *png = NULL;
    size_t len = 0;
    uint64_t seed = 0;
    if (!srv_job_png(h->p.jobs, job, i, &png, &len, &seed)) continue;
    json_t *item = json_pack("{s:I}", "seed", (json_int_t)seed);
    if (b64) {
      char *s = srv_base64(png, len);
      json_object_set_new(item, "b64_json", s ? json_string(s) : json_null());
      free(s);
    } else {
      const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
      char u[512];
      snprintf(u, sizeof u, "http://%s/v1/jobs/%s/image?index=%d", host ? host : "localhost", v->id, i);
      json_object_set_new(item, "url", json_string(u));
    }
    free(png);
    json_array_append_new(data, item);
  }
  json_t *out = json_pack("{s:I,s:o,s:o}", "created", (json_int_t)v->created, "data", data, "job", job_json(v));
  return send_json(c, 200, out, NULL, NULL);
}

static enum MHD_Result images_generations(srv_http *h, struct MHD_Connection *c, const req_state *rs) {
  enum MHD_Result res = MHD_NO;
  bool b64 = true;
  srv_job *job = submit(h, c, rs, &res, &b64);
  if (!job) return res;
  srv_job_view v;
  unsigned seen = 0;
  bool cancelled = false;
  for (;;) {
    srv_job_wait(h->p.jobs, job, seen, 0.25, &v);
    seen = v.version;
    if (v.state >= SRV_JOB_SUCCEEDED) break;
    if (!cancelled && client_gone(c)) { /* nobody to answer: stop the job at its next step */
      srv_job_cancel(h->p.jobs, job);
      cancelled = true;
    }
  }
  res = images_answer(h, c, job, &v, b64);
  srv_job_release(h->p.jobs, job);
  return res;
}

/* ---- GET /v1/jobs/{id}/events: server-sent events ------------------------------------------ */
typedef struct sse {
  srv_http *h;
  srv_job *job;
  unsigned seen;
  int preview_sent;              /* step of the last preview sent (-1: none) */
  bool started, done;
  char *pending;                 /* text not yet handed to the connection */
  size_t pending_n, pending_off;
} sse;

/* "event: NAME\ndata: JSON\n\n" appended to f (j stolen). */
static void sse_event(FILE *f, const char *event, json_t *j) {
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (s) fprintf(f, "event: %s\ndata: %s\n\n", event, s);
  free(s);
}

/* The events for what changed since the last call, into e->pending (or a keepalive comment). */
static void sse_next(sse *e) {
  srv_job_view v;
  /* a keepalive well inside --timeout: the connection counts as idle while nothing is sent */
  double every = e->h->p.timeout_s / 2.0 < 10.0 ? e->h->p.timeout_s / 2.0 : 10.0;
  if (!e->started) srv_job_view_get(e->h->p.jobs, e->job, &v);
  else srv_job_wait(e->h->p.jobs, e->job, e->seen, every, &v);
  char *text = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&text, &n);
  if (!f) return;
  if (!e->started) {
    sse_event(f, "job", job_json(&v));
    e->started = true;
  } else if (v.version == e->seen && v.state < SRV_JOB_SUCCEEDED) {
    fputs(": keepalive\n\n", f);
  } else {
    sse_event(f, "progress", json_pack("{s:s,s:s,s:i,s:i,s:o}", "id", v.id, "state", srv_job_state_name(v.state),
                                       "step", v.step, "total_steps", v.total_steps, "eta_s",
                                       v.eta_s >= 0 ? json_real(v.eta_s) : json_null()));
    uint8_t *png = NULL;
    size_t len = 0;
    int step = -1;
    if (v.preview_step > e->preview_sent && srv_job_preview(e->h->p.jobs, e->job, &png, &len, &step)) {
      char *b = srv_base64(png, len);
      if (b) sse_event(f, "preview", json_pack("{s:i,s:s}", "step", step, "png_b64", b));
      free(b);
      free(png);
      e->preview_sent = step;
    }
  }
  e->seen = v.version;
  if (v.state >= SRV_JOB_SUCCEEDED) {
    sse_event(f, "done", job_json(&v));
    e->done = true;
  }
  fclose(f);
  free(e->pending);
  e->pending = text, e->pending_n = n, e->pending_off = 0;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  sse *e = cls;
  while (e->pending_off == e->pending_n) {
    if (e->done) return MHD_CONTENT_READER_END_OF_STREAM;
    sse_next(e);
    if (!e->pending) return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  size_t k = e->pending_n - e->pending_off;
  if (k > max) k = max;
  memcpy(buf, e->pending + e->pending_off, k);
  e->pending_off += k;
  return (ssize_t)k;
}

static void sse_free(void *cls) {
  sse *e = cls;
  srv_job_release(e->h->p.jobs, e->job);
  free(e->pending);
  free(e);
}

static enum MHD_Result job_events(srv_http *h, struct MHD_Connection *c, srv_job *job) {
  sse *e = calloc(1, sizeof *e);
  if (!e) {
    srv_job_release(h->p.jobs, job);
    return MHD_NO;
  }
  e->h = h, e->job = job, e->preview_sent = -1;
  struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, e, sse_free);
  if (!r) {
    sse_free(e);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", "text/event-stream");
  MHD_add_response_header(r, "Cache-Control", "no-store");
  enum MHD_Result res = MHD_queue_response(c, 200, r);
  MHD_destroy_response(r);
  return res;
}

/* ---- /v1/jobs/{id}[/events|/image] ------------------------------------------------------------- */
static enum MHD_Result job_image(srv_http *h, struct MHD_Connection *c, srv_job *job) {
  const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "index");
  int i = 0;
  if (q) {
    char *end;
    long x = strtol(q, &end, 10);
    if (!*q || *end || x < 0 || x >= SRV_MAX_N) return send_error(c, 400, "index=%.20s is not an image index", q);
    i = (int)x;
  }
  srv_job_view v;
  srv_job_view_get(h->p.jobs, job, &v);
  uint8_t *png = NULL;
  size_t len = 0;
  if (!srv_job_png(h->p.jobs, job, i, &png, &len, NULL)) {
    if (i < v.n && v.state < SRV_JOB_SUCCEEDED)
      return send_error(c, 409, "job %s: image %d is not ready (%s)", v.id, i, srv_job_state_name(v.state));
    return send_error(c, 404, "job %s has no image %d (%s, %d of %d made)", v.id, i, srv_job_state_name(v.state),
                      v.n_done, v.n);
  }
  return send_bytes(c, 200, "image/png", png, len, MHD_RESPMEM_MUST_FREE, NULL, NULL);
}

static enum MHD_Result jobs_route(srv_http *h, struct MHD_Connection *c, const char *url, const char *method) {
  char id[48];
  const char *rest = url + strlen("/v1/jobs/");
  size_t n = strcspn(rest, "/");
  if (!n || n >= sizeof id) return send_error(c, 404, "no such job");
  memcpy(id, rest, n);
  id[n] = 0;
  const char *sub = rest + n;
  srv_job *job = srv_jobs_get(h->p.jobs, id);
  if (!job) return send_error(c, 404, "no job \"%s\" (finished jobs are kept for a while only)", id);
  enum MHD_Result res;
  srv_job_view v;
  bool get = !strcmp(method, "GET");
  if (!strcmp(sub, "") && get) {
    srv_job_view_get(h->p.jobs, job, &v);
    res = send_json(c, 200, job_json(&v), NULL, NULL);
  } else if (!strcmp(sub, "") && !strcmp(method, "DELETE")) {
    bool live = srv_job_cancel(h->p.jobs, job);
    srv_job_view_get(h->p.jobs, job, &v);
    res = live ? send_json(c, 200, job_json(&v), NULL, NULL)
               : send_error(c, 409, "job %s has already finished (%s)", id, srv_job_state_name(v.state));
  } else if (!strcmp(sub, "/events") && get) {
    return job_events(h, c, job); /* the stream releases the job */
  } else if (!strcmp(sub, "/image") && get) {
    res = job_image(h, c, job);
  } else if (!strcmp(sub, "") || !strcmp(sub, "/events") || !strcmp(sub, "/image")) {
    res = send_error(c, 405, "%s is not allowed on %s", method, url);
  } else {
    res = send_error(c, 404, "no such path: %s", url);
  }
  srv_job_release(h->p.jobs, job);
  return res;
}

/* ---- routing ------------------------------------------------------------------------------- */
static enum MHD_Result health(srv_http *h, struct MHD_Connection *c) {
  int queued;
  bool running;
  srv_jobs_load(h->p.jobs, &queued, &running);
  bool stopping = srv_jobs_stopping(h->p.jobs);
  return send_json(c, stopping ? 503 : 200,
                   json_pack("{s:s,s:i,s:b,s:i}", "status", stopping ? "shutting_down" : "ok", "queued", queued,
                             "running", running, "models", h->p.n_models),
                   NULL, NULL);
}

static enum MHD_Result route(srv_http *h, struct MHD_Connection *c, const char *url, const char *method,
                             const req_state *rs) {
  bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
  if (!strcmp(url, "/")) {
    if (!get) return send_error(c, 405, "%s is not allowed on /", method);
    return send_bytes(c, 200, "text/html; charset=utf-8", (void *)srv_page_html, srv_page_html_len,
                      MHD_RESPMEM_PERSISTENT, "Content-Security-Policy",
                      "default-src 'self'; img-src 'self' data: blob:; style-src 'unsafe-inline'; script-src 'unsafe-inline'");
  }
  if (!strcmp(url, "/health")) return get ? health(h, c) : send_error(c, 405, "%s is not allowed on /health", method);
  if (strncmp(url, "/v1/", 4)) return send_error(c, 404, "no such path: %.200s", url);
  if (!authorized(h, c)) return send_error(c, 401, "this server needs \"Authorization: Bearer <api key>\"");
  if (!strcmp(url, "/v1/models"))
    return get ? send_json(c, 200, models_json(h), NULL, NULL) : send_error(c, 405, "%s is not allowed on %s", method, url);
  bool gen = !strcmp(url, "/v1/images/generations"), jobs = !strcmp(url, "/v1/jobs");
  if ((gen || jobs) && !post) return send_error(c, 405, "%s is not allowed on %s (POST a JSON body)", method, url);
  if ((gen || jobs) && srv_jobs_stopping(h->p.jobs)) return send_error(c, 503, "the server is shutting down");
  if (gen) return images_generations(h, c, rs);
  if (jobs) {
    enum MHD_Result res = MHD_NO;
    bool b64;
    srv_job *job = submit(h, c, rs, &res, &b64);
    if (!job) return res;
    srv_job_view v;
    srv_job_view_get(h->p.jobs, job, &v);
    srv_job_release(h->p.jobs, job);
    char loc[96];
    snprintf(loc, sizeof loc, "/v1/jobs/%s", v.id);
    return send_json(c, 202, job_json(&v), "Location", loc);
  }
  if (!strncmp(url, "/v1/jobs/", 9)) return jobs_route(h, c, url, method);
  return send_error(c, 404, "no such path: %.200s", url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **req_cls) {
  (void)version;
  srv_http *h = cls;
  req_state *rs = *req_cls;
  if (!rs) { /* first call: headers only */
    rs = calloc(1, sizeof *rs);
    if (!rs) return MHD_NO;
    *req_cls = rs;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > h->p.max_body) { /* refused before the body is read */
      rs->too_large = rs->answered = true;
      return send_error(c, 413, "the body is %s bytes (this server takes at most %zu)", cl, h->p.max_body);
    }
    return MHD_YES;
  }
  if (*upload_size) {
    size_t k = *upload_size;
    *upload_size = 0;
    if (rs->too_large || k > h->p.max_body - rs->n) { /* a chunked body past the limit: read to its end, */
      rs->too_large = true;                           /* then 413; one that goes on and on is cut off */
      rs->discarded += k;
      return rs->answered || rs->discarded > 8 * h->p.max_body ? MHD_NO : MHD_YES;
    }
    if (rs->n + k + 1 > rs->cap) {
      size_t cap = (rs->n + k + 1) * 2;
      char *b = realloc(rs->body, cap);
      if (!b) return MHD_NO;
      rs->body = b, rs->cap = cap;
    }
    memcpy(rs->body + rs->n, upload, k);
    rs->n += k;
    rs->body[rs->n] = 0;
    return MHD_YES;
  }
  if (rs->answered) return MHD_YES;
  if (rs->too_large)
    return send_error(c, 413, "the body is over %zu bytes (this server's limit)", h->p.max_body);
  return route(h, c, url, method, rs);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode toe) {
  (void)cls, (void)c, (void)toe;
  req_state *rs = *req_cls;
  if (!rs) return;
  free(rs->body);
  free(rs);
  *req_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls, (void)fmt, (void)ap; /* connection-level noise (resets, timeouts): not errors of ours */
}

bool srv_http_start(const srv_http_params *p, srv_http **out, int *bound_port, char *msg, size_t msglen) {
  *out = NULL;
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
  if (inet_pton(AF_INET, p->host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET, a4->sin_port = htons((uint16_t)p->port);
  } else if (inet_pton(AF_INET6, p->host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6, a6->sin6_port = htons((uint16_t)p->port);
    flags |= MHD_USE_IPv6;
  } else {
    snprintf(msg, msglen, "--host %s is not a numeric IPv4 or IPv6 address", p->host);
    return false;
  }
  srv_http *h = calloc(1, sizeof *h);
  if (!h) return snprintf(msg, msglen, "out of memory"), false;
  h->p = *p;
  h->d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, &ss,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->timeout_s, MHD_OPTION_CONNECTION_LIMIT,
                          (unsigned)p->max_connections, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
                          MHD_OPTION_THREAD_STACK_SIZE, (size_t)512 * 1024, MHD_OPTION_END);
  if (!h->d) {
    snprintf(msg, msglen, "cannot listen on %s port %d (in use, or not an address of this machine?)", p->host, p->port);
    free(h);
    return false;
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
  *bound_port = di ? di->port : p->port;
  *out = h;
  return true;
}

void srv_http_stop(srv_http *h) {
  if (!h) return;
  MHD_stop_daemon(h->d);
  free(h);
}
