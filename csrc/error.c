/* SPDX-License-Identifier: MIT */
/* Negative-errno returns carry a thread-local message for the Python layer. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "rdmaq.h"

static __thread char rdmaq_errbuf[256];

int rdmaq_set_err(int err, const char *fmt, ...)
{
	char msg[sizeof(rdmaq_errbuf)];
	va_list ap;

	/* Formatted apart: a message may quote the previous one (rdmaq_errmsg()). */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	memcpy(rdmaq_errbuf, msg, sizeof(msg));
	return err;
}

const char *rdmaq_errmsg(void)
{
	return rdmaq_errbuf;
}
