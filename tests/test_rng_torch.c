/* torch.randn reproduction: every tensor of refs/rng_torch_cpu.safetensors, named
 * randn_seed<S>_<d0>x<d1>x..., must come out bit for bit from dit_torch_randn with a
 * generator seeded with S (exact equality of the float bit patterns, no tolerance). */
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "pipeline/rng_torch.h"
#include "testing.h"

/* Parses "randn_seed42_1x16x16x12" -> seed 42, element count 3072. */
static bool parse_name(const char *name, uint64_t *seed, size_t *n) {
  if (strncmp(name, "randn_seed", 10) != 0) return false;
  char *end;
  *seed = strtoull(name + 10, &end, 10);
  if (*end != '_') return false;
  size_t count = 1;
  const char *p = end + 1;
  for (;;) {
    unsigned long d = strtoul(p, &end, 10);
    if (end == p) return false;
    count *= d;
    if (*end == 0) break;
    if (*end != 'x') return false;
    p = end + 1;
  }
  *n = count;
  return true;
}

/* A tiny reader for the F32 tensors of one trusted fixture file (the library's
 * safetensors reader is tested on its own). */
static void check_file(const char *path) {
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f != NULL, "cannot open %s", path);
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)size);
  CHECK(buf && fread(buf, 1, (size_t)size, f) == (size_t)size);
  fclose(f);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)buf[i] << (8 * i);
  json_t *h = NULL;
  dit_error err = {0};
  CHECK_MSG(dit_json_parse((const char *)buf + 8, hlen, path, &h, &err) == DIT_OK, "%s", err.msg);
  const unsigned char *data = buf + 8 + hlen;
  const char *name;
  json_t *t;
  int n_tensors = 0;
  json_object_foreach(h, name, t) {
    if (strcmp(name, "__metadata__") == 0) continue;
    uint64_t seed = 0;
    size_t n = 0;
    CHECK_MSG(parse_name(name, &seed, &n), "unexpected tensor name %s", name);
    size_t b = (size_t)json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
    size_t e = (size_t)json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 1));
    CHECK_MSG(strcmp(json_string_value(json_object_get(t, "dtype")), "F32") == 0 && e - b == 4 * n,
              "%s: not F32 of %zu elements", name, n);
    float *ref = malloc(4 * n), *got = malloc(4 * n);
    memcpy(ref, data + b, 4 * n);
    dit_torch_rng g;
    dit_torch_rng_seed(&g, seed);
    dit_torch_randn(&g, got, n);
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++) {
      if (memcmp(&ref[i], &got[i], 4) != 0) {
        if (bad++ == 0) first = i;
      }
    }
    CHECK_MSG(bad == 0, "%s: %zu of %zu differ, first at %zu: got %.9g want %.9g", name, bad, n,
              first, first < n ? got[first] : 0.0, first < n ? ref[first] : 0.0);
    printf("%s: seed %llu, %zu elements, %zu bit mismatches\n", name, (unsigned long long)seed, n,
           bad);
    free(ref);
    free(got);
    n_tensors++;
  }
  CHECK_MSG(n_tensors >= 6, "only %d tensors in %s", n_tensors, path);
  json_decref(h);
  free(buf);
}

/* Reads one F32 tensor of n elements from a small trusted fixture file; NULL if absent. */
static float *read_f32(const char *path, const char *want, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)size);
  float *out = NULL;
  if (buf && fread(buf, 1, (size_t)size, f) == (size_t)size) {
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)buf[i] << (8 * i);
    json_t *h = NULL;
    dit_error err = {0};
    if (dit_json_parse((const char *)buf + 8, hlen, path, &h, &err) == DIT_OK) {
      json_t *t = json_object_get(h, want);
      json_t *off = json_object_get(t, "data_offsets");
      size_t b = (size_t)json_integer_value(json_array_get(off, 0));
      size_t e = (size_t)json_integer_value(json_array_get(off, 1));
      if (t && e - b == 4 * n && (out = malloc(4 * n))) memcpy(out, buf + 8 + hlen + b, 4 * n);
      json_decref(h);
    }
  }
  free(buf);
  fclose(f);
  return out;
}

/* The pipelines' own initial latents: Z-Image draws randn(1,16,16,12) with seed 42;
 * FLUX.2 klein draws randn(1,32,8,6) and packs it to (1, 48 tokens, 32 channels). */
static void check_pipeline_latents(const char *shared) {
  char path[1024];
  snprintf(path, sizeof path, "%s/models/zimage-tiny/reference.safetensors", shared);
  float *ref = read_f32(path, "latents_init", 3072);
  CHECK_MSG(ref != NULL, "no latents_init in %s", path);
  float got[3072];
  dit_torch_rng g;
  dit_torch_rng_seed(&g, 42);
  dit_torch_randn(&g, got, 3072);
  CHECK_MSG(ref && memcmp(ref, got, sizeof got) == 0, "zimage-tiny latents_init differs");
  free(ref);
  snprintf(path, sizeof path, "%s/models/flux2-klein-tiny/reference.safetensors", shared);
  ref = read_f32(path, "latents_init", 1536);
  CHECK_MSG(ref != NULL, "no latents_init in %s", path);
  float chw[1536], packed[1536];
  dit_torch_rng_seed(&g, 42);
  dit_torch_randn(&g, chw, 1536);
  for (int c = 0; c < 32; c++)
    for (int t = 0; t < 48; t++) packed[t * 32 + c] = chw[c * 48 + t];
  CHECK_MSG(ref && memcmp(ref, packed, sizeof packed) == 0, "flux2-klein-tiny latents_init differs");
  free(ref);
}

/* mt19937 sanity: the 10000th output of std::mt19937 seeded 5489 is 4123659995. */
static void check_mt19937(void) {
  dit_torch_rng g;
  dit_torch_rng_seed(&g, 5489);
  uint32_t v = 0;
  for (int i = 0; i < 10000; i++) v = dit_torch_rng_u32(&g);
  CHECK(v == 4123659995u);
}

/* The generator advances: two draws of 7 continue the Box-Muller cache like one of 14. */
static void check_stream(void) {
  dit_torch_rng a, b;
  float x[14], y[14];
  dit_torch_rng_seed(&a, 7);
  dit_torch_randn(&a, x, 14);
  dit_torch_rng_seed(&b, 7);
  dit_torch_randn(&b, y, 7);
  dit_torch_randn(&b, y + 7, 7);
  CHECK(memcmp(x, y, sizeof x) == 0);
  dit_torch_randn(&b, y, 0); /* draws nothing */
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  char refs[1024], path[1024];
  dt_path(refs, sizeof refs, a.shared, "refs");
  dt_path(path, sizeof path, refs, "rng_torch_cpu.safetensors");
  check_mt19937();
  check_stream();
  check_file(path);
  check_pipeline_latents(a.shared);
  return dt_finish();
}
