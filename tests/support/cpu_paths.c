/* See cpu_paths.h. */
#include "cpu_paths.h"

#include <stdio.h>

#include "backend/cpu/cpu_internal.h"
#include "testing.h"

bool dt_on_cpu_paths(int n_threads, bool simd_first, const char *simd_label, void (*fn)(dit_backend *be)) {
  dit_backend *be = NULL;
  dit_error err = {0};
  dit_status st = dit_backend_cpu_create(n_threads, &be, &err);
  CHECK_MSG(st == DIT_OK, "cpu backend: %s", err.msg);
  if (st != DIT_OK) return false;
  for (int i = 0; i < 2; i++) {
    bool want_simd = (i == 0) == simd_first;
    bool on = dit_cpu_set_simd(be, want_simd);
    if (want_simd && !on) {
      printf("path: %s not on this CPU, skipped\n", simd_label);
      continue;
    }
    printf("path: %s\n", on ? simd_label : "portable C");
    fn(be);
  }
  dit_backend_free(be);
  return true;
}
