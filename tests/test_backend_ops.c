/* Every case of the backend op table (tests/support/op_cases.c) on the CPU backend's SIMD path
 * against its portable path, and on every other backend present at run time (CUDA when built
 * with it and a GPU is visible) against the CPU. */
#include <stdio.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "op_cases.h"
#include "testing.h"

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  dit_backend *simd = NULL, *portable = NULL;
  dit_error err = {0};
  CHECK_MSG(dit_backend_cpu_create(2, &simd, &err) == DIT_OK && dit_backend_cpu_create(2, &portable, &err) == DIT_OK,
            "cpu backend: %s", err.msg);
  if (!simd || !portable) return dt_finish();
  dit_cpu_set_simd(portable, false);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  printf("%zu cases\n", opc_n_cases);
  if (dit_cpu_set_simd(simd, true)) {
    opc_result r = opc_run_all(simd, portable, "cpu-simd/portable", NULL, NULL);
    printf("cpu-simd (%s) vs portable: %d run, %d failed\n", dit_cpu_isa_name(simd), r.run, r.failed);
  } else {
    printf("cpu-simd: this CPU has no SIMD path (AVX-512, AVX2), skipped\n");
  }
  if (!dit_backend_kind_get(DIT_DEVICE_CUDA)) printf("cuda: not present (not built), skipped\n");
  for (size_t k = 0; k < dit_backend_kind_count(); k++) {
    const dit_backend_kind_info *info = dit_backend_kind_at(k);
    if (info->host_memory) continue;
    if (info->device_count() <= 0) {
      printf("%s: not present, skipped\n", info->name);
      continue;
    }
    dit_backend *dev = NULL;
    if (dit_backend_create(info->kind, 0, 0, (dit_backend_precision){0}, NULL, &dev, &err) != DIT_OK) {
      CHECK_MSG(0, "%s: %s", info->name, err.msg);
      continue;
    }
    opc_result r = opc_run_all(dev, simd, info->name, opc_device_takes, NULL);
    printf("%s vs cpu: %d run, %d failed, %d not taken by a device backend\n", info->name, r.run, r.failed, r.skipped);
    dit_backend_free(dev);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("time %.2f s\n", (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
  dit_backend_free(simd);
  dit_backend_free(portable);
  return dt_finish();
}
