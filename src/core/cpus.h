/* How many CPUs this process may use: the default thread count of the context and the CPU
 * backend. */
#ifndef DIT_CORE_CPUS_H
#define DIT_CORE_CPUS_H

/* The CPUs of this process's affinity mask (taskset, a container's cpuset), capped by its
 * cgroup's CPU quota rounded up (a container's --cpus: cgroup v2 cpu.max, v1
 * cpu.cfs_quota_us / cpu.cfs_period_us); where neither is known, the online CPUs. At least 1. */
int dit_cpu_count(void);

#endif
