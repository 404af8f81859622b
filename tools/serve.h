/* `ditrun serve`: resident models behind an HTTP API (docs/SERVER.md). Three parts:
 *   serve_req.c  - the request body (JSON) to a validated generation request; pure, fuzzed;
 *   serve_jobs.c - jobs: a bounded FIFO queue, one worker thread running them one at a time on
 *                  the device, progress, previews, cancellation, finished jobs kept a while;
 *   serve_http.c - the HTTP side over libmicrohttpd: routes, the API key, limits, JSON errors,
 *                  server-sent events, the web page (serve_page.c).
 * cli_serve.c parses the options, loads the models and runs the server until SIGTERM/SIGINT. */
#ifndef DIT_SERVE_H
#define DIT_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ditrun.h"

/* ---- requests ------------------------------------------------------------------------ */
#define SRV_MAX_N 8             /* images per request */
#define SRV_MAX_STEPS 200
#define SRV_MAX_PROMPT 16384    /* bytes of prompt or negative prompt */
#define SRV_MAX_SIDE 8192

#define SRV_LORA_NAME_MAX 64     /* bytes of a LoRA's name in a request */

typedef struct srv_limits {
  int64_t max_pixels;           /* width * height per image */
  int max_n;                    /* images per request (<= SRV_MAX_N) */
  bool loras;                   /* requests may name LoRAs (the server has a --lora-dir) */
} srv_limits;

typedef struct srv_gen_req {
  char model[128];              /* "" = the first model */
  char *prompt, *negative;      /* malloc'd (negative may be NULL) */
  int n;                        /* images (seeds seed, seed+1, ...) */
  int width, height;            /* 0 = the model's default */
  int steps;                    /* 0 = the model's default */
  double guidance;
  bool guidance_set, seed_set;
  uint64_t seed;
  bool b64;                     /* response_format b64_json (else url) */
  int n_loras;                  /* "loras": files NAME.safetensors of the server's --lora-dir */
  char lora_name[DIT_MAX_LORAS][SRV_LORA_NAME_MAX + 1];
  double lora_scale[DIT_MAX_LORAS];
} srv_gen_req;

/* Parses a request body into *out. Every field is checked: type, range, size; an unknown
 * field is an error. false with a message in msg (for a 400) when the body is not one valid
 * request; *out is then freed. Sizes are checked against lim here, against the model
 * (multiples) by the caller. */
bool srv_req_parse(const char *body, size_t len, const srv_limits *lim, srv_gen_req *out, char *msg, size_t msglen);
void srv_req_free(srv_gen_req *r);

/* Standard base64 of n bytes (malloc'd, NUL-terminated; NULL when out of memory). */
char *srv_base64(const uint8_t *p, size_t n);

/* ---- models and jobs ----------------------------------------------------------------- */
typedef struct srv_model {
  char name[128];               /* the folder's last path component */
  const char *dir;
  dit_ctx *ctx;                 /* the model's own context (used by the worker thread only) */
  dit_model *m;
  dit_gen_defaults defaults;
  const dit_lora *loras;        /* the server's (--lora): merged at load, under every request's own */
  int n_loras;
  dit_lora cur[DIT_MAX_LORAS];  /* what the model has merged now (worker thread; named in the PNG text) */
  char cur_path[DIT_MAX_LORAS][4096];
  int n_cur;
} srv_model;

typedef enum srv_job_state {
  SRV_JOB_QUEUED = 0,
  SRV_JOB_RUNNING,
  SRV_JOB_SUCCEEDED,
  SRV_JOB_FAILED,
  SRV_JOB_CANCELLED
} srv_job_state;
const char *srv_job_state_name(srv_job_state s);

typedef struct srv_jobs srv_jobs;
typedef struct srv_job srv_job;

typedef struct srv_jobs_params {
  srv_model *models;
  int n_models;
  int queue;                    /* jobs waiting (not counting the running one) */
  int keep;                     /* finished jobs kept for GET /v1/jobs/{id}/image */
  int preview_every;            /* a latent preview every this many steps (0: none) */
  const char *lora_dir;         /* where requests' LoRAs are (NULL: requests name none) */
} srv_jobs_params;

/* Starts the worker thread. false with a message when it cannot. */
bool srv_jobs_start(const srv_jobs_params *p, srv_jobs **out, char *msg, size_t msglen);
/* Stops taking jobs, cancels the queued ones, lets the running one finish for up to drain
 * seconds then cancels it (it stops at its next step), joins the worker and frees all. */
void srv_jobs_stop(srv_jobs *J, double drain);
void srv_jobs_free(srv_jobs *J);
/* Sets the stopping flag only (new submissions answer 503); srv_jobs_stop does the rest. */
void srv_jobs_refuse_new(srv_jobs *J);
bool srv_jobs_stopping(srv_jobs *J);

typedef enum srv_submit_result { SRV_SUBMIT_OK = 0, SRV_SUBMIT_FULL, SRV_SUBMIT_STOPPING } srv_submit_result;
/* Queues a request for model index mi (takes ownership of *r's strings on success). *job is
 * referenced: release it with srv_job_release. */
srv_submit_result srv_jobs_submit(srv_jobs *J, int mi, srv_gen_req *r, srv_job **job);
/* The job with this id, referenced (release it), or NULL. */
srv_job *srv_jobs_get(srv_jobs *J, const char *id);
void srv_job_release(srv_jobs *J, srv_job *job);
/* Asks the job to stop: a queued job is cancelled at once, a running one at its next step.
 * false when it had already finished. */
bool srv_job_cancel(srv_jobs *J, srv_job *job);
/* Queue length and whether a job runs now. */
void srv_jobs_load(srv_jobs *J, int *queued, bool *running);

/* A snapshot of a job, for JSON and events. */
typedef struct srv_job_view {
  char id[40], model[128];
  srv_job_state state;
  unsigned version;             /* grows with every change */
  int step, total_steps;        /* steps done over all images; total = steps * n */
  int n, n_done, width, height, steps;
  double guidance;
  uint64_t seed;
  double created, started, finished; /* unix seconds; 0 = not yet */
  double eta_s;                 /* < 0: unknown */
  double load_s, encode_s, denoise_s, decode_s; /* summed over the job's images */
  char error[512];
  int error_http;               /* 400 / 500 ... for a failed job */
  int preview_step;             /* step of the latest preview (-1: none) */
} srv_job_view;
void srv_job_view_get(srv_jobs *J, srv_job *job, srv_job_view *v);
/* Waits until the job's version differs from `seen`, it has finished, the server stops or
 * timeout_s passes. Returns the new view in *v. */
void srv_job_wait(srv_jobs *J, srv_job *job, unsigned seen, double timeout_s, srv_job_view *v);
/* Copies of image i's PNG / the latest preview PNG (malloc'd); false when there is none. */
bool srv_job_png(srv_jobs *J, srv_job *job, int i, uint8_t **png, size_t *len, uint64_t *seed);
bool srv_job_preview(srv_jobs *J, srv_job *job, uint8_t **png, size_t *len, int *step);

/* ---- HTTP ------------------------------------------------------------------------------ */
typedef struct srv_http_params {
  const char *host;             /* numeric IPv4 or IPv6 address */
  int port;                     /* 0: any free port */
  const char *api_key;          /* NULL: none */
  size_t max_body;              /* bytes of a request body */
  int max_connections;
  int timeout_s;                /* an idle connection is closed after this */
  srv_limits limits;
  srv_model *models;
  int n_models;
  srv_jobs *jobs;
} srv_http_params;

typedef struct srv_http srv_http;
bool srv_http_start(const srv_http_params *p, srv_http **out, int *bound_port, char *msg, size_t msglen);
void srv_http_stop(srv_http *h);

/* The web page (serve_page.c, made from tools/serve_page.html at build time). */
extern const unsigned char srv_page_html[];
extern const size_t srv_page_html_len;

#endif
