/* SPDX-License-Identifier: MIT */
/* The calling thread's schedstat and the CPUs' crowding.  See schedstat.h. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include "schedstat.h"

/* The start of a /proc file into buf (NUL-terminated); its length, or <= 0.  Opened per
 * look (busy.c looks at most once a period): a kept descriptor would outlive its thread. */
static ssize_t read_proc(const char *path, char *buf, size_t size)
{
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	n = pread(fd, buf, size - 1, 0);
	close(fd);
	if (n > 0)
		buf[n] = '\0';
	return n;
}

bool rdmaq_thread_schedstat(uint64_t *ran_ns, uint64_t *delayed_ns, uint64_t *slices)
{
	char buf[96];

	if (read_proc("/proc/thread-self/schedstat", buf, sizeof(buf)) <= 0)
		return false;
	/* "on-CPU ns, run-queue wait ns, timeslices" */
	return sscanf(buf, "%" SCNu64 " %" SCNu64 " %" SCNu64, ran_ns, delayed_ns, slices) == 3;
}

int rdmaq_cpus_crowded(void)
{
	char buf[128];
	unsigned int running, total;
	cpu_set_t set;
	int cpus;

	/* "0.52 0.58 0.59 3/456 12345": the fourth field is running/total tasks. */
	if (read_proc("/proc/loadavg", buf, sizeof(buf)) <= 0 ||
	    sscanf(buf, "%*s %*s %*s %u/%u", &running, &total) != 2 || running == 0)
		return -1;
	if (sched_getaffinity(0, sizeof(set), &set))
		return -1;
	cpus = CPU_COUNT(&set);
	if (cpus <= 0)
		return -1;
	return running > (unsigned int)cpus;
}

int64_t rdmaq_thread_preemptions(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru))
		return -1;
	return ru.ru_nivcsw;
}

/* Online CPUs, counted once per process (sysconf reads a sysfs file each time). */
static long online_cpus(void)
{
	static long online;
	long n = __atomic_load_n(&online, __ATOMIC_RELAXED);

	if (n <= 0) {
		n = sysconf(_SC_NPROCESSORS_ONLN);
		__atomic_store_n(&online, n, __ATOMIC_RELAXED);
	}
	return n;
}

int64_t rdmaq_cpus_idle_ns(void)
{
	char buf[128];
	uint64_t sec;
	unsigned int hundredths;
	cpu_set_t set;

	/* "50014.68 80092.75": up, and idle summed over every online CPU, in seconds. */
	if (read_proc("/proc/uptime", buf, sizeof(buf)) <= 0 ||
	    sscanf(buf, "%*s %" SCNu64 ".%2u", &sec, &hundredths) != 2 || hundredths > 99)
		return -1;
	if (sched_getaffinity(0, sizeof(set), &set) || CPU_COUNT(&set) < online_cpus())
		return -1;
	return (int64_t)sec * 1000000000LL + (int64_t)hundredths * 10000000LL;
}
