/* SPDX-License-Identifier: MIT */
/*
 * How a failed verbs call becomes a negative errno, for every verbs file.
 */
#ifndef RDMAQ_VERBS_ERRNO_H
#define RDMAQ_VERBS_ERRNO_H

#include <errno.h>

/*
 * A failed verbs call's return value as a negative errno.  rdma-core
 * documents a positive errno for most calls and -1 with errno for a few,
 * and providers may return a negative errno: whichever it was, the result
 * is negative, never 0, so a failure can never read as success.
 */
static inline int rdmaq_verbs_err(int ret)
{
	if (ret > 0)
		return -ret;
	if (ret == -1 && errno > 0)
		return -errno;
	return ret < 0 && ret > -4096 ? ret : -EIO;
}

/* A verbs constructor returned NULL: its errno, or `fallback` if it set none. */
static inline int rdmaq_verbs_null_err(int fallback)
{
	return errno > 0 ? -errno : fallback;
}

#endif
