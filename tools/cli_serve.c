/* `ditrun serve -m DIR [-m DIR2 ...]`: loads the models once and answers HTTP requests until
 * SIGTERM or SIGINT (see serve.h, docs/SERVER.md). On the signal it stops taking jobs, lets the
 * running one finish for up to --drain-timeout seconds (then cancels it at its next step),
 * closes the listener and exits 0. Exit 2 for bad usage, 1 when a model does not load or the
 * port cannot be bound. */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cli_args.h"
#include "serve.h"

#define MAX_MODELS 8

static void serve_usage(FILE *f) {
  fprintf(f,
          "usage: ditrun serve -m MODEL_DIR [-m MODEL_DIR2 ...] [options]\n"
          "  -m, --model DIR        a model folder to load and keep resident (repeat for more; a request's\n"
          "                         \"model\" is the folder's name, the first one by default)\n"
          "      --host ADDR        numeric address to listen on (default 127.0.0.1: this machine only)\n"
          "      --port N           TCP port (default 8080; 0 = any free port, printed at start)\n"
          "      --api-key KEY      require \"Authorization: Bearer KEY\" on /v1/ (default: env DITRUN_API_KEY)\n"
          "      --queue N          jobs waiting beyond the running one before 429 (default 16)\n"
          "      --max-pixels P     largest width*height a request may ask (default 4194304 = 2048x2048)\n"
          "      --max-n N          images per request (default 4, at most %d)\n"
          "      --max-body BYTES   largest request body (default 1048576)\n"
          "      --max-connections N  simultaneous connections (default 64)\n"
          "      --timeout S        close a connection idle for S seconds (default 60)\n"
          "      --keep-jobs N      finished jobs kept for GET /v1/jobs/{id}/image (default 64)\n"
          "      --preview-every N  a latent preview in the event stream every N steps (default 1; 0 = none)\n"
          "      --drain-timeout S  on SIGTERM, let the running job finish for up to S seconds (default 30)\n"
          "      --device cpu|cuda  where the models run (default cpu)\n"
          "      --cpu-precision P  CPU linear layers: fp32 (default) or bf16\n"
          "      --precision P      cuda: the transformer's GEMMs in bf16 (default) or fp8\n"
          "      --lora FILE[:S]    merge a LoRA into every model's transformer at load (repeat for more)\n"
          "      --lora-dir DIR     requests may name LoRAs: \"loras\": [{\"name\": N, \"scale\": S}] uses\n"
          "                         DIR/N.safetensors (changed between requests without reloading the model)\n"
          "      --threads N        CPU threads (default: the CPUs this process may use)\n"
          "  -q, --quiet            print only errors\n"
          "API: POST /v1/images/generations (OpenAI's images API), POST /v1/jobs, GET /v1/jobs/{id},\n"
          "     GET /v1/jobs/{id}/events, GET /v1/jobs/{id}/image, DELETE /v1/jobs/{id}, GET /v1/models,\n"
          "     GET /health, and a web page at /. See docs/SERVER.md.\n"
          "example:\n"
          "  ditrun serve -m models/shapes-128 --port 8080 &\n"
          "  curl -s localhost:8080/v1/images/generations -d '{\"prompt\":\"a red circle on a white background\"}'\n",
          SRV_MAX_N);
}

typedef struct serve_opts {
  const char *dirs[MAX_MODELS];
  int n_dirs;
  srv_http_params http;
  srv_jobs_params jobs;
  double drain;
  dit_device_kind device;
  dit_cpu_precision precision;
  dit_gpu_precision gpu_precision;
  dit_lora loras[DIT_MAX_LORAS];
  char lora_paths[DIT_MAX_LORAS][4096];
  int n_loras;
  int threads;
  bool quiet;
} serve_opts;

/* One option with a value; false after a message when it is bad. */
static bool set_opt(serve_opts *o, const char *a, const char *v) {
  int x;
  if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
    if (o->n_dirs == MAX_MODELS) return fprintf(stderr, "ditrun serve: at most %d models\n", MAX_MODELS), false;
    o->dirs[o->n_dirs++] = v;
    return true;
  }
  if (!strcmp(a, "--host")) return o->http.host = v, true;
  if (!strcmp(a, "--api-key")) {
    if (!*v) return fprintf(stderr, "ditrun serve: --api-key: empty key\n"), false;
    return o->http.api_key = v, true;
  }
  if (!strcmp(a, "--device")) {
    static const char *const dev[] = {"cpu", "cuda"};
    int k = cli_parse_choice("serve", a, v, dev, 2);
    return k >= 0 && (o->device = k ? DIT_DEVICE_CUDA : DIT_DEVICE_CPU, true);
  }
  if (!strcmp(a, "--cpu-precision")) return cli_parse_cpu_precision("serve", v, &o->precision);
  if (!strcmp(a, "--precision")) return cli_parse_gpu_precision("serve", v, &o->gpu_precision);
  if (!strcmp(a, "--lora")) {
    if (o->n_loras == DIT_MAX_LORAS) return fprintf(stderr, "ditrun serve: at most %d LoRAs\n", DIT_MAX_LORAS), false;
    if (!cli_parse_lora("serve", v, o->lora_paths[o->n_loras], sizeof o->lora_paths[0], &o->loras[o->n_loras]))
      return false;
    return o->n_loras++, true;
  }
  if (!strcmp(a, "--lora-dir")) {
    struct stat st;
    if (stat(v, &st) != 0 || !S_ISDIR(st.st_mode))
      return fprintf(stderr, "ditrun serve: --lora-dir: %s is not a folder\n", v), false;
    return o->jobs.lora_dir = v, o->http.limits.loras = true, true;
  }
  if (!strcmp(a, "--drain-timeout")) return cli_parse_double("serve", a, v, 0, 86400, &o->drain);
  if (!strcmp(a, "--max-pixels")) {
    uint64_t p;
    if (!cli_parse_u64("serve", a, v, &p)) return false;
    if (p < 256 || p > (uint64_t)SRV_MAX_SIDE * SRV_MAX_SIDE)
      return fprintf(stderr, "ditrun serve: --max-pixels: %s is outside 256..%d\n", v, SRV_MAX_SIDE * SRV_MAX_SIDE),
             false;
    return o->http.limits.max_pixels = (int64_t)p, true;
  }
  static const struct {
    const char *name;
    long lo, hi;
  } ints[] = {{"--port", 0, 65535},          {"--queue", 0, 100000},         {"--max-n", 1, SRV_MAX_N},
              {"--max-body", 1024, 1 << 26}, {"--max-connections", 2, 4096}, {"--timeout", 1, 86400},
              {"--keep-jobs", 1, 100000},   {"--preview-every", 0, 1000},   {"--threads", 1, 1024}};
  int *dst[] = {&o->http.port,         &o->jobs.queue,     &o->http.limits.max_n, NULL, &o->http.max_connections,
                &o->http.timeout_s,    &o->jobs.keep,      &o->jobs.preview_every, &o->threads};
  for (size_t k = 0; k < sizeof ints / sizeof *ints; k++) {
    if (strcmp(a, ints[k].name)) continue;
    if (!cli_parse_int("serve", a, v, ints[k].lo, ints[k].hi, &x)) return false;
    if (dst[k]) *dst[k] = x;
    else o->http.max_body = (size_t)x;
    return true;
  }
  fprintf(stderr, "ditrun serve: unknown option '%s'\n", a);
  serve_usage(stderr);
  return false;
}

static int parse(int argc, char **argv, serve_opts *o) {
  memset(o, 0, sizeof *o);
  o->http.host = "127.0.0.1";
  o->http.port = 8080;
  o->http.api_key = getenv("DITRUN_API_KEY");
  if (o->http.api_key && !*o->http.api_key) o->http.api_key = NULL;
  o->http.max_body = 1 << 20;
  o->http.max_connections = 64;
  o->http.timeout_s = 60;
  o->http.limits.max_pixels = 2048 * 2048;
  o->http.limits.max_n = 4;
  o->jobs.queue = 16;
  o->jobs.keep = 64;
  o->jobs.preview_every = 1;
  o->drain = 30;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      serve_usage(stdout);
      return 1;
    }
    if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
      o->quiet = true;
      continue;
    }
    const char *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
    char name[64];
    const char *v;
    if (eq && (size_t)(eq - a) < sizeof name) {
      snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
      a = name, v = eq + 1;
    } else {
      if (a[0] != '-') return fprintf(stderr, "ditrun serve: unexpected argument '%s'\n", a), serve_usage(stderr), 2;
      if (i + 1 >= argc) return fprintf(stderr, "ditrun serve: %s needs a value\n", a), 2;
      v = argv[++i];
    }
    if (!set_opt(o, a, v)) return 2;
  }
  if (!o->n_dirs) return fprintf(stderr, "ditrun serve: -m MODEL_DIR is required\n"), serve_usage(stderr), 2;
  return 0;
}

/* The folder's last path component, made unique among the loaded ones ("name-2"). */
static void model_name(const serve_opts *o, int i, srv_model *models) {
  const char *d = o->dirs[i];
  size_t n = strlen(d);
  while (n > 1 && d[n - 1] == '/') n--;
  size_t b = n;
  while (b > 0 && d[b - 1] != '/') b--;
  snprintf(models[i].name, sizeof models[i].name, "%.*s", (int)(n - b), d + b);
  for (int k = 0, dup = 1; k < i; k++)
    if (!strcmp(models[k].name, models[i].name))
      snprintf(models[i].name + strlen(models[i].name), 16, "-%d", ++dup), k = -1;
}

/* Loads every model; 0, or the exit code of the failure. */
static int load_models(const serve_opts *o, srv_model *models) {
  dit_model_opts mo;
  dit_model_opts_default(&mo);
  mo.device = o->device;
  mo.cpu_precision = o->precision;
  mo.gpu_precision = o->gpu_precision;
  mo.loras = o->loras;
  mo.n_loras = o->n_loras;
  for (int i = 0; i < o->n_dirs; i++) {
    int code;
    models[i].dir = o->dirs[i];
    models[i].loras = o->loras, models[i].n_loras = o->n_loras;
    for (int k = 0; k < o->n_loras; k++) { /* what load merges */
      snprintf(models[i].cur_path[k], sizeof models[i].cur_path[k], "%s", o->loras[k].path);
      models[i].cur[k] = (dit_lora){models[i].cur_path[k], o->loras[k].scale};
    }
    models[i].n_cur = o->n_loras;
    models[i].ctx = cli_start("serve", 0, o->threads, &code);
    if (!models[i].ctx) return code;
    model_name(o, i, models);
    dit_gen_defaults d; /* before loading: a video model is refused without reading its weights */
    if (dit_gen_defaults_for(models[i].ctx, o->dirs[i], &d) == DIT_OK && d.frames) {
      fprintf(stderr, "ditrun serve: %s: %s makes videos; the server makes images (ditrun generate -o clip.mp4 makes "
              "a clip)\n", o->dirs[i], d.family);
      return 2;
    }
    if (!o->quiet) fprintf(stderr, "ditrun serve: loading %s (%s)\n", models[i].name, o->dirs[i]);
    dit_status s = dit_model_load(models[i].ctx, o->dirs[i], &mo, &models[i].m);
    if (s != DIT_OK) {
      fprintf(stderr, "ditrun serve: %s: %s: %s\n", o->dirs[i], dit_status_str(s), dit_ctx_last_error(models[i].ctx));
      return dit_status_exit_code(s);
    }
    dit_model_get_defaults(models[i].m, &models[i].defaults);
  }
  return 0;
}

static void free_models(srv_model *models, int n) {
  for (int i = 0; i < n; i++) {
    dit_model_free(models[i].m);
    dit_ctx_free(models[i].ctx);
  }
}

/* Runs the server until SIGTERM/SIGINT (blocked in every thread, taken here by sigwait). */
static int run(serve_opts *o, srv_model *models, const sigset_t *sigs) {
  char msg[512];
  srv_jobs *jobs = NULL;
  o->jobs.models = models, o->jobs.n_models = o->n_dirs;
  if (!srv_jobs_start(&o->jobs, &jobs, msg, sizeof msg)) return fprintf(stderr, "ditrun serve: %s\n", msg), 1;
  o->http.models = models, o->http.n_models = o->n_dirs, o->http.jobs = jobs;
  srv_http *http = NULL;
  int port = 0;
  if (!srv_http_start(&o->http, &http, &port, msg, sizeof msg)) {
    fprintf(stderr, "ditrun serve: %s\n", msg);
    srv_jobs_stop(jobs, 0);
    srv_jobs_free(jobs);
    return 1;
  }
  const char *h = o->http.host;
  bool v6 = strchr(h, ':') != NULL;
  printf("ditrun serve: listening on http://%s%s%s:%d/ (%d model%s%s)\n", v6 ? "[" : "", h, v6 ? "]" : "", port,
         o->n_dirs, o->n_dirs > 1 ? "s" : "", o->http.api_key ? ", API key required" : "");
  fflush(stdout);
  int sig = 0;
  while (sigwait(sigs, &sig) != 0) {
  }
  if (!o->quiet)
    fprintf(stderr, "ditrun serve: %s: finishing the running job (up to %.0f s), then exiting\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", o->drain);
  srv_jobs_refuse_new(jobs);
  srv_jobs_stop(jobs, o->drain);
  srv_http_stop(http);
  srv_jobs_free(jobs);
  if (!o->quiet) fprintf(stderr, "ditrun serve: stopped\n");
  return 0;
}

int cli_serve(int argc, char **argv) {
  serve_opts o;
  int parsed = parse(argc, argv, &o);
  if (parsed) return parsed == 1 ? 0 : 2;
  /* before any thread exists: the signals are taken by sigwait in run(), never delivered */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);
#ifdef M_ARENA_MAX
  /* a long-lived process with a thread per connection: without a cap glibc gives many of them
   * a malloc arena of their own, and the resident size creeps up with the clients ever seen
   * (the worker also trims the heaps after each job: serve_jobs.c) */
  mallopt(M_ARENA_MAX, 2);
#endif
  srv_model models[MAX_MODELS];
  memset(models, 0, sizeof models);
  int rc = load_models(&o, models);
  if (rc == 0) rc = run(&o, models, &sigs);
  free_models(models, o.n_dirs);
  return rc;
}
