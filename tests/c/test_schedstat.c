/* SPDX-License-Identifier: MIT */
/*
 * The real reader of /proc/thread-self/schedstat (test_busy.c fakes it), built
 * with AddressSanitizer and UBSan, on a stack left dirty by an earlier call:
 * it reads the three counters, and they grow with the thread's CPU time.
 */
#define _GNU_SOURCE
#include <string.h>
#include <time.h>

#include "check.h"
#include "schedstat.h"

/* Leave the stack below this frame full of non-zero bytes. */
static void __attribute__((noinline)) dirty_stack(void)
{
	volatile char junk[8192];

	memset((char *)junk, '7', sizeof(junk));
}

static void burn_ms(long ms)
{
	struct timespec start, now;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
	do
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
	while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
}

static void test_the_counters_are_read_and_grow_with_cpu_time(void)
{
	uint64_t ran0 = 0, delayed0 = 0, slices0 = 0, ran1 = 0, delayed1 = 0, slices1 = 0;

	dirty_stack();
	CHECK(rdmaq_thread_schedstat(&ran0, &delayed0, &slices0));
	burn_ms(20);
	dirty_stack();
	CHECK(rdmaq_thread_schedstat(&ran1, &delayed1, &slices1));
	CHECK(ran0 > 0 && slices0 > 0);
	CHECK(ran1 > ran0); /* (the kernel updates it at ticks and switches: no more exact) */
	CHECK(delayed1 >= delayed0 && slices1 >= slices0);
}

int main(void)
{
	test_the_counters_are_read_and_grow_with_cpu_time();
	return check_report("schedstat");
}
