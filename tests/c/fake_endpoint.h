/* SPDX-License-Identifier: MIT */
/*
 * The endpoint behind a waiter in the wait tests (test_wait.c, test_recovery.c,
 * test_window.c): nothing to prepare, finish or check; each test brings the block
 * that decides when its message lands.
 */
#ifndef RDMAQ_TEST_FAKE_ENDPOINT_H
#define RDMAQ_TEST_FAKE_ENDPOINT_H

#include "wait.h"

static inline int fake_prepare(void *ep)
{
	(void)ep;
	return 0;
}

static inline void fake_finish(void *ep)
{
	(void)ep;
}

static inline int fake_check_peer(void *ep)
{
	(void)ep;
	return 0;
}

#define FAKE_WAIT_OPS(block_fn)                                                      \
	{                                                                            \
		.prepare = fake_prepare, .block = (block_fn), .finish = fake_finish, \
		.check_peer = fake_check_peer,                                       \
	}

#endif
