/* What `ditrun generate` writes besides the pixels: the generation parameters as the web
 * UIs' PNG text (dit_infotext), seeds drawn from the OS for --seed -1, and the output names
 * of a batch (out.png -> out-1.png ... out-N.png). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cli_gen_out.h"

bool cli_os_random(void *buf, size_t n) {
  if (n <= 256 && getentropy(buf, n) == 0) return true; /* glibc 2.25+, macOS, the BSDs */
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t got = read(fd, buf, n);
  close(fd);
  return got == (ssize_t)n;
}

bool cli_random_seed(uint64_t *out) {
  uint32_t v = 0;
  if (!cli_os_random(&v, sizeof v)) return false;
  *out = v; /* 32 bits: what the web UIs and sd.cpp print and accept */
  return true;
}

bool cli_batch_path(const char *out, int batch, int i, char *buf, size_t len) {
  if (batch <= 1) return (size_t)snprintf(buf, len, "%s", out) < len;
  const char *slash = strrchr(out, '/');
  const char *dot = strrchr(out, '.');
  if (dot && (slash ? dot > slash + 1 : dot > out)) /* an extension, not a leading dot */
    return (size_t)snprintf(buf, len, "%.*s-%d%s", (int)(dot - out), out, i + 1, dot) < len;
  return (size_t)snprintf(buf, len, "%s-%d", out, i + 1) < len;
}

/* The model's name: the last component of its folder path. */
static void model_name(const char *dir, char *buf, size_t len) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  size_t s = n;
  while (s > 0 && dir[s - 1] != '/') s--;
  snprintf(buf, len, "%.*s", (int)(n - s), dir + s);
}

typedef struct kv_list {
  dit_infotext t;
  char store[DIT_INFOTEXT_MAX_FIELDS][256];
} kv_list;

static void add(kv_list *l, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(kv_list *l, const char *key, const char *fmt, ...) {
  if (l->t.n_fields >= DIT_INFOTEXT_MAX_FIELDS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->store[l->t.n_fields], sizeof l->store[0], fmt, ap);
  va_end(ap);
  l->t.keys[l->t.n_fields] = key;
  l->t.values[l->t.n_fields] = l->store[l->t.n_fields];
  l->t.n_fields++;
}

char *cli_gen_infotext(const dit_gen_params *p, const dit_gen_defaults *d, const dit_image *img, int steps) {
  kv_list *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  l->t.prompt = p->prompt;
  l->t.negative_prompt = p->negative_prompt;
  const double g = p->guidance_set ? p->guidance : d->guidance;
  char name[256];
  model_name(p->model_dir, name, sizeof name);
  add(l, "Steps", "%d", steps);
  add(l, "Sampler", "Euler");
  add(l, "CFG scale", "%g", g);
  add(l, "Seed", "%llu", (unsigned long long)p->seed);
  add(l, "Size", "%dx%d", img->width, img->height);
  add(l, "Model", "%s", name);
  if (d->family) add(l, "Model family", "%s", d->family);
  add(l, "RNG", "CPU"); /* torch's CPU generator, as the web UIs name it */
  if (g > 0 && p->cfg_truncation != 1.0) add(l, "CFG truncation", "%g", p->cfg_truncation);
  if (g > 0 && p->cfg_normalization != 0.0) add(l, "CFG normalization", "%g", p->cfg_normalization);
  if (p->max_sequence_length && p->max_sequence_length != 512) add(l, "Max sequence length", "%d", p->max_sequence_length);
  if (p->vae_tile) add(l, "VAE tile", "%d", p->vae_tile);
  if (p->text_rope_bf16) add(l, "Text RoPE", "bf16");
  char loras[1024] = "";
  for (int i = 0, o = 0; i < p->n_loras && o < (int)sizeof loras; i++) { /* "name: scale, ..." */
    const char *b = strrchr(p->loras[i].path, '/');
    o += snprintf(loras + o, sizeof loras - (size_t)o, "%s%s: %g", i ? ", " : "", b ? b + 1 : p->loras[i].path,
                  p->loras[i].scale);
  }
  if (loras[0]) add(l, "LoRA", "%s", loras);
  if (p->init_image) add(l, "Denoising strength", "%g", p->strength > 0 ? p->strength : 0.6);
  if (p->n_ref_images) add(l, "Reference images", "%d", p->n_ref_images);
  if (p->device == DIT_DEVICE_CUDA) add(l, "Device", "cuda");
  else if (p->cpu_precision == DIT_CPU_PRECISION_BF16) add(l, "CPU precision", "bf16");
  if (p->gpu_precision == DIT_GPU_PRECISION_FP8) add(l, "GPU precision", "fp8");
  add(l, "Version", "ditrun %s", DITRUN_VERSION);
  char *text = NULL;
  if (dit_infotext_format(&l->t, &text) != DIT_OK) text = NULL;
  free(l);
  return text;
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
