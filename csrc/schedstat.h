/* SPDX-License-Identifier: MIT */
/*
 * What the scheduler did to the calling thread: its time on a CPU and its
 * time runnable without one (/proc/thread-self/schedstat), for busy.c.
 */
#ifndef RDMAQ_SCHEDSTAT_H
#define RDMAQ_SCHEDSTAT_H

#include <stdbool.h>
#include <stdint.h>

/* Both in ns since the thread started; false when the kernel does not say. */
bool rdmaq_thread_schedstat(uint64_t *ran_ns, uint64_t *delayed_ns);

#endif
