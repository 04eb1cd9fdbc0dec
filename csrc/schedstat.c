/* SPDX-License-Identifier: MIT */
/* The calling thread's schedstat.  See schedstat.h. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "schedstat.h"

bool rdmaq_thread_schedstat(uint64_t *ran_ns, uint64_t *delayed_ns, uint64_t *slices)
{
	char buf[96];
	ssize_t n;
	/* Opened per look (busy.c looks at most once a period): a kept descriptor
	 * would outlive its thread. */
	int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false;
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* "on-CPU ns, run-queue wait ns, timeslices" */
	return sscanf(buf, "%" SCNu64 " %" SCNu64 " %" SCNu64, ran_ns, delayed_ns, slices) == 3;
}
