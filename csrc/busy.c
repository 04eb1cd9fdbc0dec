/* SPDX-License-Identifier: MIT */
/* Is the CPU oversubscribed?  See busy.h. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "busy.h"

static int64_t busy_checked = -RDMAQ_BUSY_PERIOD_NS;
static int busy_state;
static int loadavg_fd = -1;

/* Runnable tasks right now ("R/T" in /proc/loadavg); -1 if unknown. */
static long runnable_now(void)
{
	char buf[128], *p;
	ssize_t n;
	int fd = __atomic_load_n(&loadavg_fd, __ATOMIC_ACQUIRE);

	if (fd < 0) {
		int expected = -1;

		fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -1;
		if (!__atomic_compare_exchange_n(&loadavg_fd, &expected, fd, false,
						 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			close(fd);
			fd = expected;
		}
	}
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* "0.39 0.10 0.03 2/123 4567": the fourth field. */
	p = buf;
	for (int field = 0; field < 3 && p; field++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	return p ? strtol(p, NULL, 10) : -1;
}

bool rdmaq_cpu_busy(int64_t now)
{
	int64_t last = __atomic_load_n(&busy_checked, __ATOMIC_ACQUIRE);
	cpu_set_t set;
	long running;
	int ncpu;

	if (now - last < RDMAQ_BUSY_PERIOD_NS ||
	    !__atomic_compare_exchange_n(&busy_checked, &last, now, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return __atomic_load_n(&busy_state, __ATOMIC_RELAXED);
	running = runnable_now();
	ncpu = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
	/* We are running ourselves: busy when the others alone fill our CPUs. */
	__atomic_store_n(&busy_state, running > 0 && ncpu > 0 && running - 1 >= ncpu,
			 __ATOMIC_RELAXED);
	return __atomic_load_n(&busy_state, __ATOMIC_RELAXED);
}
