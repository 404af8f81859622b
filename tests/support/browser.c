/* Headless browsers for tests (browser.h). */
#include "browser.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testing.h"

struct dt_browser {
  bool firefox;
  pid_t pid;
  int to, from;       /* Chromium: pipe ends; Firefox: the socket twice */
  int next_id;
  char session[128];  /* Chromium: the page's session */
  char *buf;
  size_t n, cap;
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

unsigned char *dt_base64_decode(const char *s, size_t *n) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t len = strlen(s);
  uint8_t *out = malloc(len / 4 * 3 + 3);
  uint32_t acc = 0;
  int bits = 0;
  *n = 0;
  for (size_t i = 0; out && i < len && s[i] != '='; i++) {
    const char *p = strchr(tab, s[i]);
    if (!p || !s[i]) return free(out), NULL;
    acc = acc << 6 | (uint32_t)(p - tab), bits += 6;
    if (bits >= 8) out[(*n)++] = (uint8_t)(acc >> (bits - 8)), bits -= 8;
  }
  return out;
}

/* Reads more bytes into b->buf (waiting up to 200 ms); false at end of stream. */
static bool fill(dt_browser *b) {
  struct pollfd pf = {b->from, POLLIN, 0};
  if (poll(&pf, 1, 200) <= 0) return true;
  if (b->n + 65536 > b->cap) {
    char *p = realloc(b->buf, b->cap = (b->n + 65536) * 2);
    if (!p) return false;
    b->buf = p;
  }
  ssize_t k = read(b->from, b->buf + b->n, b->cap - b->n - 1);
  if (k <= 0) return false;
  b->n += (size_t)k;
  return true;
}

/* The next whole message (malloc'd JSON text) within limit s, or NULL. */
static json_t *next_message(dt_browser *b, double limit) {
  for (double t0 = now(); now() - t0 < limit;) {
    size_t len = 0, skip = 0;
    if (!b->firefox) {
      char *nul = b->n ? memchr(b->buf, 0, b->n) : NULL;
      if (nul) len = (size_t)(nul - b->buf), skip = 1;
    } else {
      char *colon = b->n ? memchr(b->buf, ':', b->n) : NULL;
      if (colon) {
        size_t want = strtoul(b->buf, NULL, 10), head = (size_t)(colon - b->buf) + 1;
        if (b->n >= head + want) memmove(b->buf, b->buf + head, b->n - head), b->n -= head, len = want;
      }
    }
    if (!len && !skip) {
      if (!fill(b)) return NULL;
      continue;
    }
    json_t *j = json_loadb(b->buf, len, 0, NULL);
    memmove(b->buf, b->buf + len + skip, b->n - len - skip);
    b->n -= len + skip;
    return j;
  }
  return NULL;
}

/* Sends method(params) and returns the answer's result (Chromium: "result"; Firefox: the
 * response's fourth element), skipping events; NULL on an error answer or after limit s. */
static json_t *call(dt_browser *b, const char *method, json_t *params, double limit) {
  int id = b->next_id++;
  json_t *m = b->firefox ? json_pack("[i,i,s,o]", 0, id, method, params ? params : json_object())
                         : json_pack("{s:i,s:s,s:o}", "id", id, "method", method, "params", params ? params : json_object());
  if (!b->firefox && b->session[0]) json_object_set_new(m, "sessionId", json_string(b->session));
  char *s = json_dumps(m, JSON_COMPACT);
  json_decref(m);
  char head[32] = "";
  if (s && b->firefox) snprintf(head, sizeof head, "%zu:", strlen(s));
  size_t sl = s ? strlen(s) + (b->firefox ? 0 : 1) : 0;
  bool sent = s && write(b->to, head, strlen(head)) == (ssize_t)strlen(head) && write(b->to, s, sl) == (ssize_t)sl;
  free(s);
  for (double t0 = now(); sent && now() - t0 < limit;) {
    json_t *a = next_message(b, limit - (now() - t0));
    if (!a) return NULL;
    json_t *r = NULL;
    if (b->firefox && json_integer_value(json_array_get(a, 1)) == id && json_is_null(json_array_get(a, 2)))
      r = json_incref(json_array_get(a, 3));
    else if (!b->firefox && json_integer_value(json_object_get(a, "id")) == id)
      r = json_incref(json_object_get(a, "result"));
    bool mine = b->firefox ? json_integer_value(json_array_get(a, 1)) == id && json_integer_value(json_array_get(a, 0)) == 1
                           : json_integer_value(json_object_get(a, "id")) == id;
    json_decref(a);
    if (mine) return r;
  }
  return NULL;
}

static const char *installed(const char *const *paths) {
  for (; *paths; paths++)
    if (access(*paths, X_OK) == 0) return *paths;
  return NULL;
}

static bool start_chromium(dt_browser *b, const char *exe, const char *url, const char *tmp) {
  int in[2], out[2];
  if (pipe(in) || pipe(out)) return false;
  char prof[4200], log[4200];
  snprintf(prof, sizeof prof, "--user-data-dir=%s/chromium-profile", tmp);
  snprintf(log, sizeof log, "%s/chromium.log", tmp);
  b->pid = fork();
  if (b->pid == 0) {
    dup2(in[0], 3), dup2(out[1], 4);
    int lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (lf >= 0) dup2(lf, 1), dup2(lf, 2);
    execl(exe, exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
          "--window-size=1100,760", prof, "about:blank", (char *)NULL);
    _exit(127);
  }
  close(in[0]), close(out[1]);
  b->to = in[1], b->from = out[0];
  if (b->pid < 0) return false;
  json_t *t = call(b, "Target.createTarget", json_pack("{s:s}", "url", url), 60);
  const char *target = json_string_value(json_object_get(t, "targetId"));
  json_t *at = target ? call(b, "Target.attachToTarget", json_pack("{s:s,s:b}", "targetId", target, "flatten", 1), 30)
                      : NULL;
  const char *sid = json_string_value(json_object_get(at, "sessionId"));
  if (sid) snprintf(b->session, sizeof b->session, "%s", sid);
  json_decref(t), json_decref(at);
  return sid != NULL;
}

static bool start_firefox(dt_browser *b, const char *exe, const char *url, const char *tmp) {
  char prof[4200], path[4300], log[4200];
  snprintf(prof, sizeof prof, "%s/firefox-profile", tmp);
  snprintf(log, sizeof log, "%s/firefox.log", tmp);
  mkdir(prof, 0777);
  snprintf(path, sizeof path, "%s/MarionetteActivePort", prof);
  unlink(path);
  FILE *f;
  char uj[4300];
  snprintf(uj, sizeof uj, "%s/user.js", prof);
  if ((f = fopen(uj, "w"))) fputs("user_pref(\"marionette.port\", 0);\n", f), fclose(f);
  b->pid = fork();
  if (b->pid == 0) {
    int lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (lf >= 0) dup2(lf, 1), dup2(lf, 2);
    setenv("HOME", tmp, 1);
    execl(exe, exe, "--headless", "--marionette", "--no-remote", "--profile", prof, (char *)NULL);
    _exit(127);
  }
  int port = 0;
  for (double t0 = now(); b->pid > 0 && now() - t0 < 60 && port <= 0; usleep(100000))
    if ((f = fopen(path, "r"))) {
      if (fscanf(f, "%d", &port) != 1) port = 0;
      fclose(f);
    }
  int fd = port > 0 ? socket(AF_INET, SOCK_STREAM, 0) : -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) return fd >= 0 ? close(fd), false : false;
  b->to = b->from = fd;
  json_decref(next_message(b, 30)); /* the greeting */
  json_t *s = call(b, "WebDriver:NewSession", json_pack("{s:{}}", "capabilities"), 60);
  json_t *n = s ? call(b, "WebDriver:Navigate", json_pack("{s:s}", "url", url), 60) : NULL;
  bool ok = s && n;
  json_decref(s), json_decref(n);
  return ok;
}

dt_browser *dt_browser_open(const char *kind, const char *url, const char *tmp, char *why, size_t len) {
  static const char *const chromium[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome", NULL};
  static const char *const firefox[] = {"/usr/bin/firefox-esr", "/usr/bin/firefox", NULL};
  bool ff = !strcmp(kind, "firefox");
  const char *exe = installed(ff ? firefox : chromium);
  if (!exe) return snprintf(why, len, "%s is not installed", kind), NULL;
  dt_browser *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->firefox = ff, b->next_id = 1, b->to = b->from = -1;
  if (!(ff ? start_firefox(b, exe, url, tmp) : start_chromium(b, exe, url, tmp))) {
    snprintf(why, len, "%s did not start or open the page (its log is in %s)", kind, tmp);
    dt_browser_close(b);
    return NULL;
  }
  return b;
}

char *dt_browser_eval(dt_browser *b, const char *expr) {
  json_t *r;
  const char *v;
  if (b->firefox) {
    char script[2048];
    snprintf(script, sizeof script, "return %s;", expr);
    r = call(b, "WebDriver:ExecuteScript", json_pack("{s:s,s:[]}", "script", script, "args"), 10);
    v = json_string_value(json_object_get(r, "value"));
  } else {
    r = call(b, "Runtime.evaluate", json_pack("{s:s,s:b}", "expression", expr, "returnByValue", 1), 10);
    v = json_string_value(json_object_get(json_object_get(r, "result"), "value"));
  }
  char *out = v ? strdup(v) : NULL;
  json_decref(r);
  return out;
}

bool dt_browser_screenshot(dt_browser *b, const char *path) {
  json_t *r = b->firefox ? call(b, "WebDriver:TakeScreenshot", json_pack("{s:b}", "full", 0), 30)
                         : call(b, "Page.captureScreenshot", json_pack("{s:s}", "format", "png"), 30);
  const char *s = json_string_value(json_object_get(r, b->firefox ? "value" : "data"));
  size_t n = 0;
  uint8_t *png = s ? dt_base64_decode(s, &n) : NULL;
  if (png) dt_write_bytes(path, png, n);
  free(png);
  json_decref(r);
  return png != NULL;
}

void dt_browser_close(dt_browser *b) {
  if (!b) return;
  if (b->to >= 0) json_decref(call(b, b->firefox ? "Marionette:Quit" : "Browser.close",
                                   b->firefox ? json_pack("{s:[s]}", "flags", "eForceQuit") : NULL, 5));
  if (b->to >= 0) close(b->to);
  if (b->from >= 0 && b->from != b->to) close(b->from);
  bool reaped = b->pid <= 0;
  for (double t0 = now(); !reaped && now() - t0 < 10; usleep(50000)) reaped = waitpid(b->pid, NULL, WNOHANG) == b->pid;
  if (!reaped) kill(b->pid, SIGKILL), waitpid(b->pid, NULL, 0);
  free(b->buf);
  free(b);
}
