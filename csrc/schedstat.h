/* SPDX-License-Identifier: MIT */
/*
 * What the scheduler did to the calling thread: its time on a CPU, its time
 * runnable without one and its timeslices (/proc/thread-self/schedstat), for
 * busy.c.
 */
#ifndef RDMAQ_SCHEDSTAT_H
#define RDMAQ_SCHEDSTAT_H

#include <stdbool.h>
#include <stdint.h>

/* Since the thread started: ns on a CPU, ns runnable without one, and how many times it
 * was put on a CPU; false when the kernel does not say. */
bool rdmaq_thread_schedstat(uint64_t *ran_ns, uint64_t *delayed_ns, uint64_t *slices);

#endif
