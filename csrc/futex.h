/* SPDX-License-Identifier: MIT */
/* Shared (cross-process) futex wait and wake on a 32-bit word. */
#ifndef RDMAQ_FUTEX_H
#define RDMAQ_FUTEX_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/*
 * 0 when woken (or the word already changed), 1 on timeout, -EINTR when a
 * signal arrived (the caller decides whether to go back to sleep), -errno else.
 */
static inline int rdmaq_futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
	struct timespec ts = {
		.tv_sec = timeout_ns / 1000000000LL,
		.tv_nsec = timeout_ns % 1000000000LL,
	};
	long ret;

	ret = syscall(SYS_futex, word, FUTEX_WAIT, expected, timeout_ns < 0 ? NULL : &ts, NULL, 0);
	if (ret == 0 || errno == EAGAIN)
		return 0;
	if (errno == ETIMEDOUT)
		return 1;
	return -errno;
}

static inline void rdmaq_futex_wake(uint32_t *word, int n)
{
	syscall(SYS_futex, word, FUTEX_WAKE, n, NULL, NULL, 0);
}

#endif
