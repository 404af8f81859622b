/* torch.randn reproduction: every tensor of refs/rng_torch_cpu.safetensors, named
 * randn_seed<S>_<d0>x<d1>x..., must come out bit for bit from dit_torch_randn with a
 * generator seeded with S (exact equality of the float bit patterns, no tolerance), and so
 * must the two tiny pipelines' recorded initial latents. */
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "io/safetensors.h"
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

/* Compares n generated values with fixture tensor `name` of `file`, bit for bit. */
static size_t compare_bits(const char *file, const char *name, const float *got, size_t n) {
  float *ref = NULL;
  int64_t shape[8];
  int ndim = 0;
  CHECK_MSG(dt_load_f32(file, name, &ref, shape, &ndim) == 0, "%s: cannot load %s", file, name);
  if (!ref) return n;
  size_t count = 1;
  for (int d = 0; d < ndim; d++) count *= (size_t)shape[d];
  CHECK_MSG(count == n, "%s: %zu elements, expected %zu", name, count, n);
  size_t bad = 0, first = n;
  for (size_t i = 0; i < n && count == n; i++) {
    if (memcmp(&ref[i], &got[i], 4) != 0 && bad++ == 0) first = i;
  }
  CHECK_MSG(bad == 0 && count == n, "%s: %zu of %zu differ, first at %zu: got %.9g want %.9g", name, bad, n, first,
            first < n ? got[first] : 0.0, first < n ? ref[first] : 0.0);
  free(ref);
  return bad;
}

/* Every randn_seed<S>_<shape> tensor of the file (names listed by the library's reader). */
static void check_file(const char *path) {
  dit_st_file *f = NULL;
  dit_error err = {0};
  CHECK_MSG(dit_st_open(path, NULL, &f, &err) == DIT_OK, "%s", err.msg);
  if (!f) return;
  int n_tensors = 0;
  for (size_t k = 0; k < f->n_tensors; k++) {
    const char *name = f->tensors[k].name;
    uint64_t seed = 0;
    size_t n = 0;
    CHECK_MSG(parse_name(name, &seed, &n), "unexpected tensor name %s", name);
    float *got = malloc(4 * (n ? n : 1));
    dit_torch_rng g;
    dit_torch_rng_seed(&g, seed);
    dit_torch_randn(&g, got, n);
    size_t bad = compare_bits(path, name, got, n);
    printf("%s: seed %llu, %zu elements, %zu bit mismatches\n", name, (unsigned long long)seed, n, bad);
    free(got);
    n_tensors++;
  }
  CHECK_MSG(n_tensors >= 6, "only %d tensors in %s", n_tensors, path);
  dit_st_close(f);
}

/* The pipelines' own initial latents: Z-Image draws randn(1,16,16,12) with seed 42;
 * FLUX.2 klein draws randn(1,32,8,6) and packs it to (1, 48 tokens, 32 channels). */
static void check_pipeline_latents(const char *data) {
  char path[1024];
  static float got[3072], chw[1536], packed[1536];
  dit_torch_rng g;
  snprintf(path, sizeof path, "%s/models/zimage-tiny/reference.safetensors", data);
  dit_torch_rng_seed(&g, 42);
  dit_torch_randn(&g, got, 3072);
  CHECK_MSG(compare_bits(path, "latents_init", got, 3072) == 0, "zimage-tiny latents_init differs");
  snprintf(path, sizeof path, "%s/models/flux2-klein-tiny/reference.safetensors", data);
  dit_torch_rng_seed(&g, 42);
  dit_torch_randn(&g, chw, 1536);
  for (int c = 0; c < 32; c++)
    for (int t = 0; t < 48; t++) packed[t * 32 + c] = chw[c * 48 + t];
  CHECK_MSG(compare_bits(path, "latents_init", packed, 1536) == 0, "flux2-klein-tiny latents_init differs");
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
  dt_path(refs, sizeof refs, a.data, "refs");
  dt_path(path, sizeof path, refs, "rng_torch_cpu.safetensors");
  check_mt19937();
  check_stream();
  check_file(path);
  check_pipeline_latents(a.data);
  return dt_finish();
}
