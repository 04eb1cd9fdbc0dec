/* SPDX-License-Identifier: MIT */
/* Negative-errno returns carry a thread-local message for the Python layer. */
#include <stdarg.h>
#include <stdio.h>

#include "error.h"
#include "rdmaq.h"

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
