/* SPDX-License-Identifier: MIT */
/*
 * Is the CPU oversubscribed?  Spinning only pays with a CPU to spare: on
 * a machine with more runnable tasks than CPUs a spinning waiter burns the
 * slice it will need when its message comes, then waits behind the other
 * tasks.  The answer is the kernel's count of runnable tasks
 * (/proc/loadavg) against the CPUs this thread may use, refreshed at most
 * every RDMAQ_BUSY_PERIOD_NS and shared by every waiter of the process.
 */
#ifndef RDMAQ_BUSY_H
#define RDMAQ_BUSY_H

#include <stdbool.h>
#include <stdint.h>

#define RDMAQ_BUSY_PERIOD_NS 20000000LL

bool rdmaq_cpu_busy(int64_t now_ns);

#endif
