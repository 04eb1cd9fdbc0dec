/* SPDX-License-Identifier: MIT */
/* Negative-errno returns carry a thread-local message for the Python layer. */
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "ring.h"

static __thread char rdmaq_errbuf[256];

int rdmaq_set_err(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rdmaq_errbuf, sizeof(rdmaq_errbuf), fmt, ap);
	va_end(ap);
	return err;
}

const char *rdmaq_errmsg(void)
{
	return rdmaq_errbuf;
}

uint64_t rdmaq_random_u64(void)
{
	uint64_t v = 0;

	/* Not a secret: it only has to differ from stale payload bytes. */
	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v))
		v = (uint64_t)(uintptr_t)&v ^ 0x9e3779b97f4a7c15ULL;
	return v | 1;
}
