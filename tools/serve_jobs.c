/* `ditrun serve` jobs (see serve.h): one worker thread takes queued jobs in order and runs
 * them on the resident models one at a time (one device, one job). Everything shared lives
 * under one mutex; one condition variable announces every change (the worker waits on it for
 * work, HTTP threads for progress). A job's images are PNG bytes in memory; finished jobs are
 * kept (for GET /v1/jobs/{id}/image) until `keep` newer ones have finished. */
#include <errno.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_gen_out.h"
#include "serve.h"

struct srv_job {
  char id[40];
  int mi;
  srv_gen_req req;
  int width, height, steps;      /* resolved (the model's defaults for 0) */
  double guidance;
  srv_job_state state;
  unsigned version;
  int refs;                      /* HTTP handlers holding it (not evicted while > 0) */
  bool cancel;
  int step, n_done;
  double created, started, finished;
  double step_sum;
  int step_count;
  double load_s, encode_s, denoise_s, decode_s;
  uint8_t *png[SRV_MAX_N];
  size_t png_len[SRV_MAX_N];
  uint8_t *preview;
  size_t preview_len;
  int preview_step;
  char error[512];
  int error_http;
  srv_job *next;                 /* all jobs, newest first */
  srv_job *qnext;                /* the queue */
};

struct srv_jobs {
  srv_jobs_params p;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  srv_job *all;
  srv_job *qhead, *qtail;
  int n_queued;
  srv_job *running;
  bool stopping, quit;
  pthread_t worker;
};

const char *srv_job_state_name(srv_job_state s) {
  static const char *const names[] = {"queued", "running", "succeeded", "failed", "cancelled"};
  return (unsigned)s < sizeof names / sizeof *names ? names[s] : "?";
}

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static bool finished(const srv_job *j) { return j->state >= SRV_JOB_SUCCEEDED; }

static void changed(srv_jobs *J, srv_job *j) {
  j->version++;
  pthread_cond_broadcast(&J->cv);
}

static void job_free(srv_job *j) {
  srv_req_free(&j->req);
  for (int i = 0; i < SRV_MAX_N; i++) free(j->png[i]);
  free(j->preview);
  free(j);
}

/* Drops the oldest finished, unreferenced jobs beyond the newest `keep` finished ones. */
static void evict(srv_jobs *J) {
  int kept = 0;
  for (srv_job **pp = &J->all; *pp;) {
    srv_job *j = *pp;
    if (finished(j) && ++kept > J->p.keep && j->refs == 0) {
      *pp = j->next;
      job_free(j);
      continue;
    }
    pp = &j->next;
  }
}

static void set_failed(srv_job *j, srv_job_state st, int http, const char *fmt, const char *what) {
  j->state = st;
  j->error_http = http;
  snprintf(j->error, sizeof j->error, fmt, what);
}

/* ---- the worker ----------------------------------------------------------------------- */
typedef struct step_ctx {
  srv_jobs *J;
  srv_job *job;
  int image;
} step_ctx;

static void make_preview(srv_jobs *J, srv_job *job, int step, const float *lat, size_t n) {
  srv_model *m = &J->p.models[job->mi];
  dit_image img;
  uint8_t *png = NULL;
  size_t len = 0;
  if (dit_model_latent_preview(m->m, job->width, job->height, lat, n, &img) != DIT_OK) return;
  dit_status s = dit_image_encode_png(m->ctx, &img, NULL, NULL, 0, &png, &len);
  dit_image_free(&img);
  if (s != DIT_OK) return;
  pthread_mutex_lock(&J->mu);
  free(job->preview);
  job->preview = png, job->preview_len = len, job->preview_step = step;
  changed(J, job);
  pthread_mutex_unlock(&J->mu);
}

static int on_step(void *user, int step, int total, const float *lat, size_t n, double secs) {
  step_ctx *c = user;
  srv_jobs *J = c->J;
  srv_job *job = c->job;
  pthread_mutex_lock(&J->mu);
  job->step = c->image * total + step + 1;
  job->step_sum += secs;
  job->step_count++;
  bool cancel = job->cancel;
  changed(J, job);
  pthread_mutex_unlock(&J->mu);
  int every = J->p.preview_every;
  if (!cancel && every > 0 && (step + 1) % every == 0 && step + 1 < total) make_preview(J, job, job->step, lat, n);
  return cancel;
}

/* Image i of the job: generate, then the PNG with its parameters text. */
static dit_status run_image(srv_jobs *J, srv_job *job, int i, uint8_t **png, size_t *len, dit_gen_stats *st) {
  srv_model *m = &J->p.models[job->mi];
  dit_gen_params p;
  dit_gen_params_default(&p);
  p.model_dir = m->dir;
  p.prompt = job->req.prompt;
  p.negative_prompt = job->req.negative;
  p.width = job->width, p.height = job->height, p.steps = job->steps;
  p.guidance = job->guidance, p.guidance_set = 1;
  p.seed = job->req.seed + (uint64_t)i;
  p.loras = m->cur, p.n_loras = m->n_cur; /* for the PNG text: the model has them merged */
  step_ctx sc = {J, job, i};
  p.on_step = on_step;
  p.user = &sc;
  dit_image img;
  dit_status s = dit_model_generate(m->m, &p, &img, st);
  if (s != DIT_OK) return s;
  char *text = cli_gen_infotext(&p, &m->defaults, &img, job->steps);
  const char *keys[1] = {"parameters"}, *vals[1] = {text};
  s = dit_image_encode_png(m->ctx, &img, keys, vals, text ? 1 : 0, png, len);
  free(text);
  dit_image_free(&img);
  return s;
}

/* The job's LoRAs (the server's, then the request's) on its model: changed only when they
 * differ from what it has merged (dit_model_set_loras: the base weights stay). false after
 * failing the job. */
static bool set_loras(srv_jobs *J, srv_job *job, srv_model *m) {
  dit_lora want[DIT_MAX_LORAS];
  char path[DIT_MAX_LORAS][4096];
  int n = 0, http = 400;
  const char *why = NULL;
  char buf[400];
  for (int i = 0; i < m->n_loras; i++) want[n++] = m->loras[i];
  if (n + job->req.n_loras > DIT_MAX_LORAS)
    snprintf(buf, sizeof buf, "%d LoRAs with the server's own (at most %d)", n + job->req.n_loras, DIT_MAX_LORAS),
        why = buf;
  for (int i = 0; !why && i < job->req.n_loras; i++) {
    snprintf(path[n], sizeof path[n], "%s/%s.safetensors", J->p.lora_dir, job->req.lora_name[i]);
    if (access(path[n], R_OK) != 0)
      snprintf(buf, sizeof buf, "no LoRA named \"%s\" on this server", job->req.lora_name[i]), why = buf;
    want[n] = (dit_lora){path[n], job->req.lora_scale[i]};
    n++;
  }
  bool same = !why && n == m->n_cur;
  for (int i = 0; same && i < n; i++) same = want[i].scale == m->cur[i].scale && !strcmp(want[i].path, m->cur[i].path);
  if (!why && !same) {
    dit_status s = dit_model_set_loras(m->m, want, n);
    if (s != DIT_OK) {
      snprintf(buf, sizeof buf, "%s", dit_ctx_last_error(m->ctx));
      why = buf, http = s == DIT_ERR_NOMEM || s == DIT_ERR_INTERNAL ? 500 : 400;
    }
    for (int i = 0; s == DIT_OK && i < n; i++) {
      snprintf(m->cur_path[i], sizeof m->cur_path[i], "%s", want[i].path);
      m->cur[i] = (dit_lora){m->cur_path[i], want[i].scale};
    }
    if (s == DIT_OK) m->n_cur = n;
  }
  if (!why) return true;
  pthread_mutex_lock(&J->mu);
  set_failed(job, SRV_JOB_FAILED, http, "LoRA: %s", why);
  changed(J, job);
  pthread_mutex_unlock(&J->mu);
  return false;
}

static void run_job(srv_jobs *J, srv_job *job) {
  srv_model *m = &J->p.models[job->mi];
  if (!set_loras(J, job, m)) return;
  for (int i = 0; i < job->req.n; i++) {
    uint8_t *png = NULL;
    size_t len = 0;
    dit_gen_stats st;
    memset(&st, 0, sizeof st);
    dit_status s = run_image(J, job, i, &png, &len, &st);
    pthread_mutex_lock(&J->mu);
    job->load_s += st.load_seconds, job->encode_s += st.encode_seconds;
    job->denoise_s += st.denoise_seconds, job->decode_s += st.decode_seconds;
    if (s == DIT_OK) {
      job->png[i] = png, job->png_len[i] = len;
      job->n_done = i + 1;
    } else if (s == DIT_ERR_CANCELLED) {
      set_failed(job, SRV_JOB_CANCELLED, 409, "%s", "cancelled");
    } else {
      int http = s == DIT_ERR_INVALID_ARG || s == DIT_ERR_UNSUPPORTED ? 400 : 500;
      set_failed(job, SRV_JOB_FAILED, http, "%s", dit_ctx_last_error(m->ctx));
    }
    changed(J, job);
    pthread_mutex_unlock(&J->mu);
    if (s != DIT_OK) return;
  }
}

static void *worker(void *arg) {
  srv_jobs *J = arg;
  pthread_mutex_lock(&J->mu);
  for (;;) {
    while (!J->qhead && !J->quit) pthread_cond_wait(&J->cv, &J->mu);
    if (J->quit) break;
    srv_job *job = J->qhead;
    J->qhead = job->qnext;
    if (!J->qhead) J->qtail = NULL;
    J->n_queued--;
    J->running = job;
    job->state = SRV_JOB_RUNNING;
    job->started = wall_now();
    changed(J, job);
    pthread_mutex_unlock(&J->mu);
    run_job(J, job);
#if defined(__GLIBC__)
    malloc_trim(0); /* a generate's freed buffers back to the OS: a server's RSS stays flat */
#endif
    pthread_mutex_lock(&J->mu);
    if (job->state == SRV_JOB_RUNNING) job->state = SRV_JOB_SUCCEEDED;
    job->finished = wall_now();
    J->running = NULL;
    changed(J, job);
    evict(J);
  }
  pthread_mutex_unlock(&J->mu);
  return NULL;
}

/* ---- the public side ------------------------------------------------------------------ */
bool srv_jobs_start(const srv_jobs_params *p, srv_jobs **out, char *msg, size_t msglen) {
  *out = NULL;
  srv_jobs *J = calloc(1, sizeof *J);
  if (!J) return snprintf(msg, msglen, "out of memory"), false;
  J->p = *p;
  pthread_mutex_init(&J->mu, NULL);
  pthread_cond_init(&J->cv, NULL);
  int e = pthread_create(&J->worker, NULL, worker, J);
  if (e) {
    snprintf(msg, msglen, "cannot start the worker thread: %s", strerror(e));
    pthread_cond_destroy(&J->cv);
    pthread_mutex_destroy(&J->mu);
    free(J);
    return false;
  }
  *out = J;
  return true;
}

void srv_jobs_refuse_new(srv_jobs *J) {
  pthread_mutex_lock(&J->mu);
  J->stopping = true;
  pthread_cond_broadcast(&J->cv);
  pthread_mutex_unlock(&J->mu);
}

bool srv_jobs_stopping(srv_jobs *J) {
  pthread_mutex_lock(&J->mu);
  bool s = J->stopping;
  pthread_mutex_unlock(&J->mu);
  return s;
}

static struct timespec deadline_in(double s) {
  double t = wall_now() + s;
  struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  return ts;
}

void srv_jobs_stop(srv_jobs *J, double drain) {
  pthread_mutex_lock(&J->mu);
  J->stopping = true;
  for (srv_job *j = J->qhead; j; j = j->qnext) {
    set_failed(j, SRV_JOB_CANCELLED, 503, "%s", "cancelled: the server is shutting down");
    j->finished = wall_now();
    changed(J, j);
  }
  J->qhead = J->qtail = NULL;
  J->n_queued = 0;
  struct timespec dl = deadline_in(drain);
  while (J->running && pthread_cond_timedwait(&J->cv, &J->mu, &dl) != ETIMEDOUT) {
  }
  if (J->running) J->running->cancel = true;
  J->quit = true;
  pthread_cond_broadcast(&J->cv);
  pthread_mutex_unlock(&J->mu);
  pthread_join(J->worker, NULL);
}

void srv_jobs_free(srv_jobs *J) {
  if (!J) return;
  for (srv_job *j = J->all, *n; j; j = n) {
    n = j->next;
    job_free(j);
  }
  pthread_cond_destroy(&J->cv);
  pthread_mutex_destroy(&J->mu);
  free(J);
}

static void new_id(char *id, size_t len) {
  uint8_t r[12];
  if (!cli_os_random(r, sizeof r)) {
    uint64_t t = (uint64_t)(wall_now() * 1e9);
    for (size_t i = 0; i < sizeof r; i++) r[i] = (uint8_t)(t >> (8 * (i % 8))) ^ (uint8_t)(uintptr_t)id;
  }
  int o = snprintf(id, len, "job_");
  for (size_t i = 0; i < sizeof r && o + 2 < (int)len; i++) o += snprintf(id + o, len - (size_t)o, "%02x", r[i]);
}

srv_submit_result srv_jobs_submit(srv_jobs *J, int mi, srv_gen_req *r, srv_job **out) {
  *out = NULL;
  srv_job *j = calloc(1, sizeof *j);
  if (!j) return SRV_SUBMIT_FULL;
  const dit_gen_defaults *d = &J->p.models[mi].defaults;
  if (!r->seed_set && !cli_random_seed(&r->seed)) r->seed = (uint64_t)wall_now();
  r->seed_set = true;
  j->mi = mi;
  j->width = r->width ? r->width : d->width;
  j->height = r->height ? r->height : d->height;
  j->steps = r->steps ? r->steps : d->steps;
  j->guidance = r->guidance_set ? r->guidance : d->guidance;
  j->preview_step = -1;
  j->created = wall_now();
  j->refs = 1;
  new_id(j->id, sizeof j->id);
  pthread_mutex_lock(&J->mu);
  /* the running job's place plus `queue` waiting ones */
  bool full = J->n_queued + (J->running != NULL) >= J->p.queue + 1;
  srv_submit_result res = J->stopping ? SRV_SUBMIT_STOPPING : full ? SRV_SUBMIT_FULL : SRV_SUBMIT_OK;
  if (res == SRV_SUBMIT_OK) {
    j->req = *r;
    memset(r, 0, sizeof *r);
    j->next = J->all;
    J->all = j;
    if (J->qtail) J->qtail->qnext = j;
    else J->qhead = j;
    J->qtail = j;
    J->n_queued++;
    changed(J, j);
  }
  pthread_mutex_unlock(&J->mu);
  if (res != SRV_SUBMIT_OK) free(j);
  else *out = j;
  return res;
}

srv_job *srv_jobs_get(srv_jobs *J, const char *id) {
  pthread_mutex_lock(&J->mu);
  srv_job *j = J->all;
  while (j && strcmp(j->id, id)) j = j->next;
  if (j) j->refs++;
  pthread_mutex_unlock(&J->mu);
  return j;
}

void srv_job_release(srv_jobs *J, srv_job *job) {
  if (!job) return;
  pthread_mutex_lock(&J->mu);
  job->refs--;
  pthread_mutex_unlock(&J->mu);
}

bool srv_job_cancel(srv_jobs *J, srv_job *job) {
  pthread_mutex_lock(&J->mu);
  bool live = !finished(job);
  if (job->state == SRV_JOB_QUEUED) {
    srv_job **pp = &J->qhead, *prev = NULL;
    while (*pp && *pp != job) prev = *pp, pp = &(*pp)->qnext;
    if (*pp) {
      *pp = job->qnext;
      if (J->qtail == job) J->qtail = prev;
      J->n_queued--;
    }
    set_failed(job, SRV_JOB_CANCELLED, 409, "%s", "cancelled");
    job->finished = wall_now();
  } else if (live) {
    job->cancel = true;
  }
  if (live) changed(J, job);
  pthread_mutex_unlock(&J->mu);
  return live;
}

void srv_jobs_load(srv_jobs *J, int *queued, bool *running) {
  pthread_mutex_lock(&J->mu);
  *queued = J->n_queued;
  *running = J->running != NULL;
  pthread_mutex_unlock(&J->mu);
}

static void view(const srv_jobs *J, const srv_job *j, srv_job_view *v) {
  memset(v, 0, sizeof *v);
  snprintf(v->id, sizeof v->id, "%s", j->id);
  snprintf(v->model, sizeof v->model, "%s", J->p.models[j->mi].name);
  v->state = j->state;
  v->version = j->version;
  v->step = j->step;
  v->total_steps = j->steps * j->req.n;
  v->n = j->req.n, v->n_done = j->n_done;
  v->width = j->width, v->height = j->height, v->steps = j->steps;
  v->guidance = j->guidance;
  v->seed = j->req.seed;
  v->created = j->created, v->started = j->started, v->finished = j->finished;
  v->eta_s = j->state == SRV_JOB_RUNNING && j->step_count ? j->step_sum / j->step_count * (v->total_steps - j->step)
             : finished(j)                                ? 0
                                                          : -1;
  v->load_s = j->load_s, v->encode_s = j->encode_s, v->denoise_s = j->denoise_s, v->decode_s = j->decode_s;
  snprintf(v->error, sizeof v->error, "%s", j->error);
  v->error_http = j->error_http;
  v->preview_step = j->preview ? j->preview_step : -1;
}

void srv_job_view_get(srv_jobs *J, srv_job *job, srv_job_view *v) {
  pthread_mutex_lock(&J->mu);
  view(J, job, v);
  pthread_mutex_unlock(&J->mu);
}

void srv_job_wait(srv_jobs *J, srv_job *job, unsigned seen, double timeout_s, srv_job_view *v) {
  struct timespec dl = deadline_in(timeout_s);
  pthread_mutex_lock(&J->mu);
  while (job->version == seen && !finished(job) && !J->quit &&
         pthread_cond_timedwait(&J->cv, &J->mu, &dl) != ETIMEDOUT) {
  }
  view(J, job, v);
  pthread_mutex_unlock(&J->mu);
}

static bool copy_bytes(const uint8_t *src, size_t n, uint8_t **out, size_t *len) {
  *out = src ? malloc(n) : NULL;
  if (!*out) return false;
  memcpy(*out, src, n);
  *len = n;
  return true;
}

bool srv_job_png(srv_jobs *J, srv_job *job, int i, uint8_t **png, size_t *len, uint64_t *seed) {
  pthread_mutex_lock(&J->mu);
  bool ok = i >= 0 && i < job->n_done && copy_bytes(job->png[i], job->png_len[i], png, len);
  if (ok && seed) *seed = job->req.seed + (uint64_t)i;
  pthread_mutex_unlock(&J->mu);
  return ok;
}

bool srv_job_preview(srv_jobs *J, srv_job *job, uint8_t **png, size_t *len, int *step) {
  pthread_mutex_lock(&J->mu);
  bool ok = copy_bytes(job->preview, job->preview_len, png, len);
  if (ok) *step = job->preview_step;
  pthread_mutex_unlock(&J->mu);
  return ok;
}
