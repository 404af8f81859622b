/* `ditrun serve` driven from outside, as its users drive it: the CLI started on a free loopback
 * port with the shipped model, then real HTTP requests from libcurl (and raw sockets for the
 * malformed ones): every endpoint and error code, the acceptance request (a red circle),
 * jobs with their event stream, cancellation within a step, a client that disconnects, a
 * slow client, oversize headers and bodies, API keys, a bounded load test (16 clients x 8
 * requests: only 200 and 429, none lost; latency and RSS printed), SIGTERM draining, and the
 * web page in headless Chromium and Firefox (tests/support/browser.c). */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "browser.h"
#include "testing.h"

static dt_cli_env env;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the server process ------------------------------------------------------------------ */
typedef struct server {
  pid_t pid;
  int port;
  char log[4096];
} server;

/* Starts `ditrun serve -m MODEL --port 0 ARGS...` and waits for its "listening on" line. */
static bool server_start(server *s, const char *name, const char *const *args) {
  memset(s, 0, sizeof *s);
  snprintf(s->log, sizeof s->log, "%s/%s.log", env.tmp, name);
  int fd[2];
  if (pipe(fd)) return false;
  s->pid = fork();
  if (s->pid < 0) return false;
  if (s->pid == 0) {
    const char *argv[32] = {env.cli, "serve", "-m", env.model, "--port", "0", "--threads", "2"};
    int n = 8;
    for (; args && *args && n < 30; args++) argv[n++] = *args;
    argv[n] = NULL;
    FILE *lf = fopen(s->log, "w");
    if (lf) dup2(fileno(lf), 2);
    dup2(fd[1], 1);
    close(fd[0]);
    execv(env.cli, (char *const *)argv);
    _exit(127);
  }
  close(fd[1]);
  char buf[512];
  size_t n = 0;
  double t0 = now_s();
  while (n + 1 < sizeof buf && now_s() - t0 < 120) {
    struct pollfd pf = {fd[0], POLLIN, 0};
    if (poll(&pf, 1, 1000) <= 0) continue;
    ssize_t k = read(fd[0], buf + n, 1);
    if (k <= 0) break;
    if (buf[n++] == '\n') break;
  }
  buf[n] = 0;
  close(fd[0]);
  const char *p = strstr(buf, "listening on http://127.0.0.1:");
  if (p) s->port = atoi(p + strlen("listening on http://127.0.0.1:"));
  CHECK_MSG(s->port > 0, "%s: no \"listening on\" line (got \"%s\"; log %s)", name, buf, s->log);
  return s->port > 0;
}

/* Sends sig and waits up to limit seconds; returns the exit status (-1: killed / not exited). */
static int server_stop(server *s, int sig, double limit, double *took) {
  double t0 = now_s();
  kill(s->pid, sig);
  int st = 0;
  while (waitpid(s->pid, &st, WNOHANG) == 0) {
    if (now_s() - t0 > limit) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, &st, 0);
      if (took) *took = now_s() - t0;
      return -1;
    }
    usleep(20000);
  }
  if (took) *took = now_s() - t0;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static long rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) kib = atol(line + 6);
  if (f) fclose(f);
  return kib;
}

/* ---- HTTP ---------------------------------------------------------------------------------- */
typedef struct resp {
  long status;
  char *body;
  size_t n;
  char headers[2048];
  CURLcode rc;
  double seconds;
} resp;

static size_t on_body(char *p, size_t sz, size_t nm, void *u) {
  resp *r = u;
  size_t k = sz * nm;
  char *b = realloc(r->body, r->n + k + 1);
  if (!b) return 0;
  memcpy(b + r->n, p, k);
  r->body = b, r->n += k, r->body[r->n] = 0;
  return k;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *u) {
  resp *r = u;
  size_t k = sz * nm, used = strlen(r->headers);
  if (used + k < sizeof r->headers) memcpy(r->headers + used, p, k), r->headers[used + k] = 0;
  return k;
}

/* One request; body NULL for none. timeout_ms 0: 300 s (the sanitizer build is slow). */
static resp http(const server *s, const char *method, const char *path, const char *body, const char *key,
                 long timeout_ms) {
  resp r;
  memset(&r, 0, sizeof r);
  CURL *c = curl_easy_init();
  char url[512], auth[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  if (key) {
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
    h = curl_slist_append(h, auth);
  }
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms ? timeout_ms : 300000L);
  double t0 = now_s();
  r.rc = curl_easy_perform(c);
  r.seconds = now_s() - t0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  return r;
}

static json_t *resp_json(const resp *r) { return r->body ? json_loads(r->body, 0, NULL) : NULL; }

/* An error answer: the status, JSON {"error": {"message": non-empty, "code": status}}. */
static void check_error(const resp *r, long status, const char *what) {
  json_t *j = resp_json(r);
  json_t *e = json_object_get(j, "error");
  const char *m = json_string_value(json_object_get(e, "message"));
  CHECK_MSG(r->status == status && m && *m && json_integer_value(json_object_get(e, "code")) == status,
            "%s: expected %ld with a JSON error, got %ld: %.300s", what, status, r->status, r->body ? r->body : "");
  if (r->status == status && m) printf("  %ld %-28s %s\n", status, what, m);
  json_decref(j);
}

static void resp_free(resp *r) { free(r->body); }

/* ---- helpers ---------------------------------------------------------------------------------- */
/* The job's id from a JSON answer (static buffer). */
static const char *job_id(const resp *r) {
  static char id[64];
  json_t *j = resp_json(r);
  const char *s = json_string_value(json_object_get(j, "id"));
  snprintf(id, sizeof id, "%s", s ? s : "");
  json_decref(j);
  return id;
}

/* Polls GET /v1/jobs/ID until its state is not queued/running (or limit s); returns the JSON. */
static json_t *job_wait(const server *s, const char *id, double limit) {
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  double t0 = now_s();
  for (;;) {
    resp r = http(s, "GET", path, NULL, NULL, 0);
    json_t *j = resp_json(&r);
    resp_free(&r);
    const char *st = json_string_value(json_object_get(j, "state"));
    if (!st || (strcmp(st, "queued") && strcmp(st, "running")) || now_s() - t0 > limit) return j;
    json_decref(j);
    usleep(50000);
  }
}

/* Counts the red pixels of a PNG in memory (R > 170, G and B < 90) and the near-white ones
 * (all > 200) into *white. -1: not a PNG of w x h. */
static long red_pixels(const uint8_t *png, size_t n, int w, int h, long *white) {
  char path[4200];
  snprintf(path, sizeof path, "%s/answer.png", env.tmp);
  dt_write_bytes(path, png, n);
  int pw = 0, ph = 0;
  unsigned char *px = dt_read_png_rgb(path, &pw, &ph);
  if (!px || pw != w || ph != h) return free(px), -1;
  long red = 0;
  *white = 0;
  for (long i = 0; i < (long)w * h; i++) {
    red += px[3 * i] > 170 && px[3 * i + 1] < 90 && px[3 * i + 2] < 90;
    *white += px[3 * i] > 200 && px[3 * i + 1] > 200 && px[3 * i + 2] > 200;
  }
  free(px);
  return red;
}

/* ---- cases -------------------------------------------------------------------------------------- */
/* The acceptance request: the image is a PNG of a red circle, with its parameters; a second
 * request on the resident model spends no time loading. */
static void test_generate(const server *s) {
  static const char *body =
      "{\"prompt\":\"a red circle on a white background\",\"size\":\"128x128\",\"response_format\":\"b64_json\","
      "\"seed\":7}";
  for (int k = 0; k < 2; k++) {
    resp r = http(s, "POST", "/v1/images/generations", body, NULL, 0);
    json_t *j = resp_json(&r);
    json_t *item = json_array_get(json_object_get(j, "data"), 0);
    const char *b64 = json_string_value(json_object_get(item, "b64_json"));
    CHECK_MSG(r.status == 200 && b64, "images/generations: %ld %.200s", r.status, r.body ? r.body : "");
    size_t n = 0;
    uint8_t *png = b64 ? dt_base64_decode(b64, &n) : NULL;
    long white = 0, red = png ? red_pixels(png, n, 128, 128, &white) : -1;
    CHECK_MSG(red > 150 && white > 128 * 128 / 2, "the answer shows red on white: %ld red, %ld white pixels", red,
              white);
    CHECK_MSG(png && memmem(png, n, "parameters", 10) && memmem(png, n, "Seed: 7", 7),
              "the PNG carries its parameters text");
    CHECK(json_integer_value(json_object_get(item, "seed")) == 7);
    json_t *stats = json_object_get(json_object_get(j, "job"), "stats");
    double load = json_number_value(json_object_get(stats, "load_s"));
    printf("request %d: %.3f s, %ld red pixels, load %.4f s, denoise %.3f s\n", k + 1, r.seconds, red, load,
           json_number_value(json_object_get(stats, "denoise_s")));
    if (k == 1) CHECK_MSG(load < 0.05, "a request on the resident model loads nothing: load_s = %.4f", load);
    free(png);
    json_decref(j);
    resp_free(&r);
  }
  resp r = http(s, "POST", "/v1/images/generations", "{\"prompt\":\"a red circle\",\"n\":2,\"response_format\":\"url\"}",
                NULL, 0);
  json_t *j = resp_json(&r);
  json_t *data = json_object_get(j, "data");
  const char *url = json_string_value(json_object_get(json_array_get(data, 1), "url"));
  CHECK_MSG(r.status == 200 && json_array_size(data) == 2 && url && strstr(url, "/image?index=1"),
            "n=2, url: %.300s", r.body ? r.body : "");
  json_decref(j);
  resp_free(&r);
}

static void test_simple_endpoints(const server *s) {
  resp r = http(s, "GET", "/health", NULL, NULL, 0);
  CHECK_MSG(r.status == 200 && r.body && strstr(r.body, "\"ok\""), "health: %ld", r.status);
  resp_free(&r);
  r = http(s, "GET", "/v1/models", NULL, NULL, 0);
  CHECK_MSG(r.status == 200 && r.body && strstr(r.body, "\"shapes-128\"") && strstr(r.body, "\"zimage\""),
            "models: %ld %.200s", r.status, r.body ? r.body : "");
  resp_free(&r);
  r = http(s, "GET", "/", NULL, NULL, 0);
  CHECK_MSG(r.status == 200 && r.body && strstr(r.body, "<title>ditrun</title>") && strstr(r.headers, "text/html"),
            "the page: %ld", r.status);
  resp_free(&r);
}

/* Jobs: 202 with Location, the event stream of a job that waits behind another (job, progress,
 * preview, done), its image, and the errors of the job routes. */
static void test_jobs(const server *s) {
  /* a runs first and long enough for b's stream to connect while b waits */
  resp a = http(s, "POST", "/v1/jobs", "{\"prompt\":\"a blue square\",\"size\":\"256x256\",\"steps\":12}", NULL, 0);
  resp b = http(s, "POST", "/v1/jobs", "{\"prompt\":\"a green triangle\",\"steps\":6,\"seed\":11}", NULL, 0);
  CHECK_MSG(a.status == 202 && b.status == 202 && strstr(b.headers, "Location: /v1/jobs/job_"), "jobs: %ld %ld",
            a.status, b.status);
  char id[64], path[160];
  snprintf(id, sizeof id, "%s", job_id(&b));
  snprintf(path, sizeof path, "/v1/jobs/%s/events", id);
  resp ev = http(s, "GET", path, NULL, NULL, 600000); /* under ASan a job takes seconds */
  const char *t = ev.body ? ev.body : "";
  CHECK_MSG(ev.status == 200 && strstr(ev.headers, "text/event-stream"), "events: %ld", ev.status);
  CHECK_MSG(strstr(t, "event: job\n") && strstr(t, "event: progress\n") && strstr(t, "event: preview\n") &&
                strstr(t, "event: done\n") && strstr(t, "\"state\":\"succeeded\""),
            "the stream has job, progress, preview and done events: %.400s", t);
  int progress = 0;
  for (const char *p = t; (p = strstr(p, "event: progress\n")); p++) progress++;
  printf("event stream of a queued job: %zu bytes, %d progress events\n", ev.n, progress);
  snprintf(path, sizeof path, "/v1/jobs/%s/image", id);
  resp img = http(s, "GET", path, NULL, NULL, 0);
  CHECK_MSG(img.status == 200 && strstr(img.headers, "image/png") && img.n > 100 && !memcmp(img.body, "\x89PNG", 4),
            "image: %ld", img.status);
  resp_free(&img);
  static const struct {
    const char *method, *suffix;
    long status;
    const char *what;
  } bad[] = {{"GET", "/image?index=3", 404, "image index past n"},
             {"GET", "/image?index=x", 400, "image index not a number"},
             {"DELETE", "", 409, "cancel a finished job"},
             {"POST", "", 405, "POST on a job"},
             {"GET", "/nothing", 404, "unknown job path"}};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    snprintf(path, sizeof path, "/v1/jobs/%s%s", id, bad[k].suffix);
    resp r = http(s, bad[k].method, path, NULL, NULL, 0);
    check_error(&r, bad[k].status, bad[k].what);
    resp_free(&r);
  }
  resp r = http(s, "GET", "/v1/jobs/job_0000", NULL, NULL, 0);
  check_error(&r, 404, "unknown job");
  resp_free(&r);
  json_decref(job_wait(s, job_id(&a), 300));
  resp_free(&a);
  resp_free(&b);
  resp_free(&ev);
}

/* DELETE stops a running job within one step; a queued one at once. */
static void test_cancel(const server *s) {
  resp a = http(s, "POST", "/v1/jobs", "{\"prompt\":\"a red circle\",\"size\":\"256x256\",\"steps\":200}", NULL, 0);
  resp b = http(s, "POST", "/v1/jobs", "{\"prompt\":\"a red circle\",\"steps\":3}", NULL, 0);
  char ida[64], idb[64], path[128];
  snprintf(ida, sizeof ida, "%s", job_id(&a));
  snprintf(idb, sizeof idb, "%s", job_id(&b));
  snprintf(path, sizeof path, "/v1/jobs/%s", idb);
  resp d = http(s, "DELETE", path, NULL, NULL, 0);
  json_t *jb = job_wait(s, idb, 5);
  CHECK_MSG(d.status == 200 && !strcmp(json_string_value(json_object_get(jb, "state")) ?: "", "cancelled") &&
                json_integer_value(json_object_get(jb, "step")) == 0,
            "a queued job is cancelled before it runs: %ld %.200s", d.status, d.body ? d.body : "");
  json_decref(jb);
  resp_free(&d);
  snprintf(path, sizeof path, "/v1/jobs/%s", ida);
  json_int_t at = 0;
  for (double t0 = now_s(); now_s() - t0 < 120 && at < 2;) { /* running, a couple of steps done */
    resp g = http(s, "GET", path, NULL, NULL, 0);
    json_t *j = resp_json(&g);
    at = json_integer_value(json_object_get(j, "step"));
    json_decref(j);
    resp_free(&g);
    usleep(20000);
  }
  d = http(s, "DELETE", path, NULL, NULL, 0);
  json_t *jd = resp_json(&d);
  json_int_t asked = json_integer_value(json_object_get(jd, "step"));
  json_t *ja = job_wait(s, ida, 120);
  json_int_t stopped = json_integer_value(json_object_get(ja, "step"));
  CHECK_MSG(!strcmp(json_string_value(json_object_get(ja, "state")) ?: "", "cancelled") && stopped <= asked + 1,
            "cancelled within one step: asked at step %lld, stopped at %lld", (long long)asked, (long long)stopped);
  printf("cancel: asked at step %lld of 200, stopped after step %lld\n", (long long)asked, (long long)stopped);
  json_decref(jd);
  json_decref(ja);
  resp_free(&d);
  resp_free(&a);
  resp_free(&b);
}

/* 400/404/405/413 with JSON messages. */
static void test_bad_requests(const server *s) {
  static const struct {
    const char *method, *path, *body;
    long status;
    const char *what;
  } cases[] = {
      {"POST", "/v1/images/generations", "{", 400, "truncated JSON"},
      {"POST", "/v1/images/generations", "[1,2]", 400, "not an object"},
      {"POST", "/v1/images/generations", "{}", 400, "no prompt"},
      {"POST", "/v1/images/generations", "{\"prompt\":\"\"}", 400, "empty prompt"},
      {"POST", "/v1/images/generations", "{\"prompt\":7}", 400, "prompt not a string"},
      {"POST", "/v1/images/generations", "{\"prompt\":\"x\",\"size\":\"100x100\"}", 400, "size not a multiple"},
      {"POST", "/v1/images/generations", "{\"prompt\":\"x\",\"size\":\"128\"}", 400, "size not WxH"},
      {"POST", "/v1/images/generations", "{\"prompt\":\"x\",\"size\":\"4096x4096\"}", 400, "too many pixels"},
      {"POST", "/v1/images/generations", "{\"prompt\":\"x\",\"n\":0}", 400, "n = 0"},
      {"POST", "/v1/images/generations", "{\"prompt\":\"x\",\"steps\":1.5}", 400, "steps not an integer"},
      {"POST", "/v1/images/generations", "{\"prompt\":\"x\",\"seed\":-1}", 400, "negative seed"},
      {"POST", "/v1/images/generations", "{\"prompt\":\"x\",\"guidance\":\"high\"}", 400, "guidance not a number"},
      {"POST", "/v1/images/generations", "{\"prompt\":\"x\",\"response_format\":\"png\"}", 400, "response_format"},
      {"POST", "/v1/images/generations", "{\"prompt\":\"x\",\"quality\":\"hd\"}", 400, "unknown field"},
      {"POST", "/v1/images/generations", "{\"prompt\":\"x\",\"prompt\":\"y\"}", 400, "duplicate key"},
      {"POST", "/v1/images/generations", "{\"prompt\":\"x\",\"model\":\"sdxl\"}", 404, "model not loaded"},
      {"GET", "/v1/images/generations", NULL, 405, "GET on generations"},
      {"PUT", "/v1/models", NULL, 405, "PUT on models"},
      {"GET", "/v2/anything", NULL, 404, "unknown path"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    resp r = http(s, cases[k].method, cases[k].path, cases[k].body, NULL, 0);
    check_error(&r, cases[k].status, cases[k].what);
    resp_free(&r);
  }
  size_t big = (1u << 20) + 10;
  char *body = malloc(big + 1);
  memset(body, ' ', big);
  body[big] = 0;
  resp r = http(s, "POST", "/v1/jobs", body, NULL, 0);
  check_error(&r, 413, "body over the limit");
  resp_free(&r);
  free(body);
}

/* ---- raw connections ------------------------------------------------------------------------- */
static int connect_to(const server *s) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) close(fd), fd = -1;
  return fd;
}

/* Reads what the server sends until it closes or limit s pass; returns bytes (buf NUL-ended). */
static long read_all(int fd, char *buf, size_t len, double limit, bool *closed) {
  size_t n = 0;
  double t0 = now_s();
  *closed = false;
  while (n + 1 < len && now_s() - t0 < limit) {
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, 100) <= 0) continue;
    ssize_t k = recv(fd, buf + n, len - 1 - n, 0);
    if (k <= 0) {
      *closed = true;
      break;
    }
    n += (size_t)k;
  }
  buf[n] = 0;
  return (long)n;
}

/* Headers past the connection's memory, a chunked body past the limit, a client that stops
 * halfway through its headers: each answered or closed, and the server still answers. */
static void test_raw_clients(const server *s) {
  char buf[8192];
  bool closed;
  int fd = connect_to(s);
  size_t hl = 100 * 1024;
  char *req = malloc(hl + 256);
  int o = snprintf(req, 256, "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ");
  memset(req + o, 'a', hl);
  memcpy(req + o + hl, "\r\n\r\n", 5);
  (void)!send(fd, req, strlen(req), MSG_NOSIGNAL);
  free(req);
  read_all(fd, buf, sizeof buf, 10, &closed);
  CHECK_MSG(!strncmp(buf, "HTTP/1.1 431", 12) || !strncmp(buf, "HTTP/1.1 413", 12) || (closed && !buf[0]),
            "oversize headers: refused (%.40s)", buf);
  printf("oversize headers (100 KiB): %.40s\n", strtok(buf, "\r") ? buf : "(closed)");
  close(fd);

  fd = connect_to(s);
  const char *head = "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  (void)!send(fd, head, strlen(head), MSG_NOSIGNAL);
  char chunk[70000];
  int cl = snprintf(chunk, 32, "%x\r\n", 65536);
  memset(chunk + cl, ' ', 65536);
  memcpy(chunk + cl + 65536, "\r\n", 2);
  for (int i = 0; i < 17; i++) /* 1.06 MiB, past the 1 MiB limit */
    if (send(fd, chunk, (size_t)cl + 65538, MSG_NOSIGNAL) < 0) break;
  (void)!send(fd, "0\r\n\r\n", 5, MSG_NOSIGNAL);
  read_all(fd, buf, sizeof buf, 10, &closed);
  CHECK_MSG(!strncmp(buf, "HTTP/1.1 413", 12), "chunked body past the limit: 413 (%.60s)", buf);
  close(fd);
}

/* A client silent for longer than --timeout is disconnected. */
static void test_slow_client(const server *s) {
  int fd = connect_to(s);
  (void)!send(fd, "GET /health HTTP/1.1\r\nHo", 24, MSG_NOSIGNAL);
  char buf[1024];
  bool closed;
  double t0 = now_s();
  read_all(fd, buf, sizeof buf, 15, &closed);
  double took = now_s() - t0;
  CHECK_MSG(closed && took < 10, "a client silent past --timeout 2 is closed (after %.1f s, closed %d)", took, closed);
  printf("slow client: closed after %.1f s\n", took);
  close(fd);
}

/* A synchronous request whose client goes away: the job is cancelled, the server goes on. */
static void test_disconnect(const server *s) {
  resp r = http(s, "POST", "/v1/images/generations", "{\"prompt\":\"a red circle\",\"size\":\"256x256\",\"steps\":200}",
                NULL, 700);
  CHECK_MSG(r.rc == CURLE_OPERATION_TIMEDOUT, "the client gave up (curl %d)", (int)r.rc);
  resp_free(&r);
  bool idle = false;
  double t0 = now_s();
  while (!idle && now_s() - t0 < 20) {
    resp h = http(s, "GET", "/health", NULL, NULL, 0);
    idle = h.status == 200 && h.body && strstr(h.body, "\"running\":false");
    resp_free(&h);
    if (!idle) usleep(50000);
  }
  CHECK_MSG(idle, "the abandoned job was cancelled (server idle within 20 s)");
  printf("disconnect mid-job: server idle again after %.2f s\n", now_s() - t0);
  r = http(s, "POST", "/v1/images/generations", "{\"prompt\":\"a red circle\",\"steps\":2}", NULL, 0);
  CHECK_MSG(r.status == 200, "the next request is served: %ld", r.status);
  resp_free(&r);
}

/* ---- separate servers ------------------------------------------------------------------------ */
/* --api-key: /v1/ needs the key (401 without or with a wrong one); /health and / do not. */
static void test_api_key(void) {
  server s;
  static const char *const args[] = {"--api-key", "s3cret", NULL};
  if (!server_start(&s, "serve_key", args)) return;
  resp r = http(&s, "GET", "/v1/models", NULL, NULL, 0);
  check_error(&r, 401, "no key");
  CHECK(strstr(r.headers, "WWW-Authenticate: Bearer") != NULL);
  resp_free(&r);
  r = http(&s, "POST", "/v1/images/generations", "{\"prompt\":\"x\"}", "s3cre", 0);
  check_error(&r, 401, "wrong key");
  resp_free(&r);
  r = http(&s, "GET", "/v1/models", NULL, "s3cret", 0);
  CHECK_MSG(r.status == 200, "the right key: %ld", r.status);
  resp_free(&r);
  r = http(&s, "GET", "/health", NULL, NULL, 0);
  CHECK_MSG(r.status == 200, "health needs no key: %ld", r.status);
  resp_free(&r);
  CHECK(server_stop(&s, SIGINT, 30, NULL) == 0);
}

typedef struct load_client {
  const server *s;
  int n;
  long ok, full, other;
  double lat[8];
} load_client;

static void *load_run(void *arg) {
  load_client *c = arg;
  for (int i = 0; i < c->n; i++) {
    resp r = http(c->s, "POST", "/v1/images/generations", "{\"prompt\":\"a red circle on a white background\"}", NULL, 0);
    if (r.status == 200 && r.body && strstr(r.body, "\"b64_json\"")) c->lat[c->ok++] = r.seconds;
    else if (r.status == 429 && strstr(r.headers, "Retry-After:")) c->full++;
    else c->other++, fprintf(stderr, "load: answer %ld (curl %d): %.200s\n", r.status, (int)r.rc, r.body ? r.body : "");
    resp_free(&r);
  }
  return NULL;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* 16 clients x 8 requests against --queue 4: every answer 200 or 429 (with Retry-After), none
 * lost, no crash; RSS after a warm-up and after the run. */
static void test_load(void) {
  server s;
  static const char *const args[] = {"--queue", "4", NULL};
  /* glibc gives threads that overlap their own malloc arenas, up to 8 per core, and how many a
   * run creates depends on timing: on a loaded machine that alone moved RSS by more than 5%.
   * Two arenas make RSS follow live memory, which is what the leak check below is about. */
  setenv("MALLOC_ARENA_MAX", "2", 1);
  const bool started = server_start(&s, "serve_load", args);
  unsetenv("MALLOC_ARENA_MAX");
  if (!started) return;
  enum { CLIENTS = 16, EACH = 8 };
  load_client c[CLIENTS];
  pthread_t t[CLIENTS];
  long rss_start = rss_kib(s.pid), rss0 = 0, ok = 0, full = 0, other = 0;
  double lat[CLIENTS * EACH], t0 = 0;
  /* round 0 warms up with the same load as the measured round 1: a burst of 16 connections x 8
   * requests brings its threads' stacks and malloc arenas (how many depends on how the threads
   * overlap, so a lighter warm-up left a few % of growth to chance); a leak still shows in round 1 */
  for (int round = 0; round < 2; round++) {
    rss0 = rss_kib(s.pid);
    t0 = now_s();
    for (int i = 0; i < CLIENTS; i++) {
      c[i] = (load_client){.s = &s, .n = EACH};
      pthread_create(&t[i], NULL, load_run, &c[i]);
    }
    for (int i = 0; i < CLIENTS; i++) pthread_join(t[i], NULL);
  }
  for (int i = 0; i < CLIENTS; i++) {
    for (long k = 0; k < c[i].ok; k++) lat[ok + k] = c[i].lat[k];
    ok += c[i].ok, full += c[i].full, other += c[i].other;
  }
  double wall = now_s() - t0;
  long rss1 = rss_kib(s.pid);
  qsort(lat, (size_t)ok, sizeof *lat, cmp_d);
  printf("load: %d clients x %d requests in %.1f s: %ld x 200, %ld x 429, %ld other; latency of 200s p50 %.3f s, "
         "p99 %.3f s; server RSS %ld KiB at start, %ld KiB after a warm-up round of %d x %d, %ld KiB after (%+.1f%%)\n",
         CLIENTS, EACH, wall, ok, full, other, ok ? lat[ok / 2] : 0, ok ? lat[(ok * 99) / 100] : 0, rss_start, rss0,
         CLIENTS, EACH, rss1,
         rss0 > 0 ? 100.0 * (rss1 - rss0) / rss0 : 0);
  CHECK_MSG(ok + full == CLIENTS * EACH && other == 0, "every answer 200 or 429: %ld + %ld of %d", ok, full,
            CLIENTS * EACH);
  CHECK_MSG(ok >= CLIENTS, "the queue served requests under load: %ld", ok);
#ifndef DT_ASAN /* AddressSanitizer keeps freed memory in quarantine: RSS only grows */
  CHECK_MSG(rss0 > 0 && rss1 < rss0 * 105 / 100, "RSS grows less than 5%%: %ld -> %ld KiB", rss0, rss1);
#endif
  CHECK(server_stop(&s, SIGTERM, 30, NULL) == 0);
}

/* SIGTERM with a job running: new requests get 503 while it drains; after --drain-timeout the
 * job is cancelled at its next step and the server exits 0. */
static void test_sigterm(void) {
  server s;
  static const char *const args[] = {"--drain-timeout", "1", NULL};
  if (!server_start(&s, "serve_term", args)) return;
  resp a = http(&s, "POST", "/v1/jobs", "{\"prompt\":\"a red circle\",\"size\":\"256x256\",\"steps\":200}", NULL, 0);
  CHECK(a.status == 202);
  resp_free(&a);
  usleep(300000);
  kill(s.pid, SIGTERM);
  usleep(200000);
  resp r = http(&s, "POST", "/v1/jobs", "{\"prompt\":\"x\"}", NULL, 0);
  check_error(&r, 503, "submit while draining");
  resp_free(&r);
  double took = 0;
  int code = server_stop(&s, SIGTERM, 30, &took);
  CHECK_MSG(code == 0, "SIGTERM: exit %d", code);
  CHECK_MSG(took < 10, "exited within the drain timeout and a step: %.1f s", took);
  printf("SIGTERM with a 200-step job running, --drain-timeout 1: exit %d after %.1f s more\n", code, took);
}

/* ---- the page, in headless Chromium and Firefox ------------------------------------------------ */
/* The page opened with ?prompt=...&run=1 fills its form, makes a job, follows its events and
 * shows the image in its gallery; a screenshot of it (Chromium's) goes to SCREENSHOT when set. */
static void test_page(const server *s, const char *kind) {
  char url[512], why[512];
  snprintf(url, sizeof url,
           "http://127.0.0.1:%d/?prompt=a%%20red%%20circle%%20on%%20a%%20white%%20background&seed=7&steps=8&run=1",
           s->port);
  dt_browser *b = dt_browser_open(kind, url, env.tmp, why, sizeof why);
  if (!b) {
    printf("SKIPPED: the page in %s: %s (scripts/setup-ci.sh installs Debian's chromium and firefox-esr)\n", kind,
           why);
    return;
  }
  char state[512] = "";
  int images = 0;
  double t0 = now_s();
  while (now_s() - t0 < 60 && !(images >= 1 && strstr(state, "|128"))) {
    char *v = dt_browser_eval(b, "document.querySelectorAll('#gallery img.result').length + '|' + "
                                 "document.getElementById('status').textContent + '|' + "
                                 "(document.querySelector('#gallery img.result') || {}).naturalWidth");
    snprintf(state, sizeof state, "%s", v ? v : "(no answer)");
    images = atoi(state);
    free(v);
    usleep(50000);
  }
  CHECK_MSG(images >= 1 && strstr(state, "Done") && strstr(state, "|128"),
            "%s: the page made an image and shows it: \"%s\"", kind, state);
  printf("page in headless %s: \"%s\" after %.1f s\n", kind, state, now_s() - t0);
  const char *shot = getenv("SCREENSHOT");
  if (shot && *shot && !strcmp(kind, "chromium") && dt_browser_screenshot(b, shot)) printf("screenshot: %s\n", shot);
  dt_browser_close(b);
}

/* A LoRA for the shipped model at DIR/NAME.safetensors: layer 0's to_q changed by a random
 * rank-4 update (PEFT names). */
static bool write_test_lora(const char *dir, const char *name) {
  char path[4300];
  snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
  enum { R = 4, D = 256 };
  static float a[R * D], b[D * R];
  uint32_t x = 12345;
  for (int i = 0; i < R * D; i++) a[i] = ((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
  for (int i = 0; i < D * R; i++) b[i] = ((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
  char h[512];
  int n = snprintf(h, sizeof h,
                   "{\"transformer.layers.0.attention.to_q.lora_A.weight\":{\"dtype\":\"F32\",\"shape\":[%d,%d],"
                   "\"data_offsets\":[0,%zu]},\"transformer.layers.0.attention.to_q.lora_B.weight\":{\"dtype\":\"F32\","
                   "\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}}",
                   R, D, sizeof a, D, R, sizeof a, sizeof a + sizeof b);
  while (n % 8) h[n++] = ' ';
  uint64_t len = (uint64_t)n;
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite(&len, 8, 1, f) == 1 && fwrite(h, 1, (size_t)n, f) == (size_t)n &&
            fwrite(a, sizeof a, 1, f) == 1 && fwrite(b, sizeof b, 1, f) == 1;
  return f && fclose(f) == 0 && ok;
}

/* One image's base64 PNG for body (NULL on failure, message in the check). */
static char *one_b64(const server *s, const char *body, long want, const char *what) {
  resp r = http(s, "POST", "/v1/images/generations", body, NULL, 0);
  json_t *j = resp_json(&r);
  const char *b64 = json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "b64_json"));
  CHECK_MSG(r.status == want && (want != 200 || b64), "%s: %ld %.300s", what, r.status, r.body ? r.body : "");
  char *out = want == 200 && b64 ? strdup(b64) : NULL;
  if (want != 200) check_error(&r, want, what);
  json_decref(j);
  resp_free(&r);
  return out;
}

/* Requests naming LoRAs of --lora-dir: the model's LoRAs change between requests without a
 * reload; a request without them gets the base model's image again, byte for byte. */
static void test_loras(const server *plain) {
  char dir[4300];
  snprintf(dir, sizeof dir, "%s/loras", env.tmp);
  mkdir(dir, 0777);
  CHECK(write_test_lora(dir, "q-shift"));
  const char *base_body = "{\"prompt\":\"a red circle on a white background\",\"seed\":7}";
  const char *lora_body = "{\"prompt\":\"a red circle on a white background\",\"seed\":7,"
                          "\"loras\":[{\"name\":\"q-shift\",\"scale\":0.8}]}";
  one_b64(plain, lora_body, 400, "loras on a server without --lora-dir");
  server s;
  const char *const args[] = {"--lora-dir", dir, NULL};
  if (!server_start(&s, "serve_loras", args)) return;
  char *base = one_b64(&s, base_body, 200, "no LoRA");
  char *with = one_b64(&s, lora_body, 200, "with a LoRA");
  char *again = one_b64(&s, base_body, 200, "no LoRA again");
  char *with2 = one_b64(&s, lora_body, 200, "with the LoRA again");
  CHECK_MSG(base && with && strcmp(base, with), "the LoRA changes the image");
  CHECK_MSG(base && again && !strcmp(base, again), "without the LoRA again: the base model's image, byte for byte");
  CHECK_MSG(with && with2 && !strcmp(with, with2), "the LoRA again: the same image");
  size_t n = 0;
  uint8_t *png = with ? dt_base64_decode(with, &n) : NULL;
  CHECK_MSG(png && memmem(png, n, "q-shift.safetensors: 0.8", 24), "the PNG names the request's LoRA");
  free(png), free(base), free(with), free(again), free(with2);
  one_b64(&s, "{\"prompt\":\"x\",\"loras\":[{\"name\":\"../q-shift\"}]}", 400, "a LoRA name with a path");
  one_b64(&s, "{\"prompt\":\"x\",\"loras\":[{\"name\":\"nope\"}]}", 400, "a LoRA the server lacks");
  one_b64(&s, "{\"prompt\":\"x\",\"loras\":[{\"name\":\"q-shift\",\"scale\":\"big\"}]}", 400, "a bad scale");
  one_b64(&s, "{\"prompt\":\"x\",\"loras\":[{\"name\":\"q-shift\",\"rank\":2}]}", 400, "an unknown LoRA field");
  double took = 0;
  CHECK(server_stop(&s, SIGTERM, 30, &took) == 0);
}

static void test_main_server(void) {
  server s;
  static const char *const args[] = {"--timeout", "2", NULL};
  if (!server_start(&s, "serve_main", args)) return;
  test_simple_endpoints(&s);
  test_generate(&s);
  test_jobs(&s);
  test_cancel(&s);
  test_bad_requests(&s);
  test_loras(&s);
  test_raw_clients(&s);
  test_slow_client(&s);
  test_disconnect(&s);
  test_page(&s, "chromium");
  test_page(&s, "firefox");
  resp r = http(&s, "GET", "/health", NULL, NULL, 0);
  CHECK_MSG(r.status == 200, "still healthy after all that: %ld", r.status);
  resp_free(&r);
  double took = 0;
  CHECK(server_stop(&s, SIGTERM, 30, &took) == 0);
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init_cli(argc, argv, &a, "shapes-128", true, &env);
  signal(SIGPIPE, SIG_IGN);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  test_main_server();
  test_api_key();
  test_load();
  test_sigterm();
  curl_global_cleanup();
  return dt_finish();
}
