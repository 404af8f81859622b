/* Helpers shared by the benchmarks (header-only: each benchmark is its own executable):
 * clocks and "--name VALUE" options read with atol (benchmarks are run by hand). */
#ifndef DIT_BENCH_UTIL_H
#define DIT_BENCH_UTIL_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* Seconds on clock id (CLOCK_MONOTONIC: wall time, CLOCK_PROCESS_CPUTIME_ID: the CPU time
 * of all the process's threads). */
static inline double bench_clock(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* User plus system CPU seconds of the process (getrusage). */
static inline double bench_cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec * 1e-6;
}

/* argv[*i] is the option `name` with a value after it: *out = the value, *i moved onto it. */
static inline bool bench_opt_long(int argc, char **argv, int *i, const char *name, long *out) {
  if (strcmp(argv[*i], name) || *i + 1 >= argc) return false;
  *out = atol(argv[++*i]);
  return true;
}

static inline bool bench_opt_int(int argc, char **argv, int *i, const char *name, int *out) {
  long v;
  if (!bench_opt_long(argc, argv, i, name, &v)) return false;
  *out = (int)v;
  return true;
}

#endif
