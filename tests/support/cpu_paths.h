/* Runs a CPU backend test on each of the CPU backend's paths. */
#ifndef DIT_TEST_CPU_PATHS_H
#define DIT_TEST_CPU_PATHS_H

#include <stdbool.h>

#include "backend/backend.h"

/* Creates a CPU backend of n_threads threads and runs fn on its portable C path and, where
 * this CPU has it, on its SIMD path (simd_first: that one first), printing "path: <label>"
 * before each (simd_label names the SIMD path). A backend that cannot be created is a failed
 * check. Returns whether fn ran. */
bool dt_on_cpu_paths(int n_threads, bool simd_first, const char *simd_label, void (*fn)(dit_backend *be));

#endif
