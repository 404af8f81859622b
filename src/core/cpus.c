/* The CPUs this process may use (see cpus.h). */
#include "core/cpus.h"

#include <stdio.h>
#include <unistd.h>
#ifdef __linux__
#include <sched.h>
#endif

#ifdef __linux__
/* The CPU quota of the cgroup this process is in, rounded up to whole CPUs; 0: none or unknown.
 * cgroup v2 first ("max 100000" or "QUOTA PERIOD" in cpu.max), then v1. Only the cgroup
 * mounted at /sys/fs/cgroup is read: inside a container that is the container's own. */
static long cgroup_cpus(void) {
  long long quota = 0, period = 0;
  FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
  if (f) {
    if (fscanf(f, "%lld %lld", &quota, &period) != 2) quota = period = 0; /* "max ...": no quota */
    fclose(f);
  } else {
    FILE *q = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r");
    FILE *p = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r");
    if (!q || !p || fscanf(q, "%lld", &quota) != 1 || fscanf(p, "%lld", &period) != 1) quota = period = 0;
    if (q) fclose(q);
    if (p) fclose(p);
  }
  if (quota <= 0 || period <= 0) return 0; /* -1 (v1): no quota */
  return (long)((quota + period - 1) / period);
}
#endif

int dit_cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) n = CPU_COUNT(&set);
  const long q = cgroup_cpus();
  if (q > 0 && (n <= 0 || q < n)) n = q;
#endif
  return n > 0 ? (int)n : 1;
}
