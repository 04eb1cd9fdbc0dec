/* SPDX-License-Identifier: MIT */
/*
 * The real reader of /proc/thread-self/schedstat (test_busy.c fakes it), built
 * with AddressSanitizer and UBSan, on a stack left dirty by an earlier call:
 * it reads the three counters, and they grow with the thread's CPU time; a second
 * thread reads its own, not the main thread's.
 */
#define _GNU_SOURCE
#include <pthread.h>
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

#define MS 1000000ULL

struct counters {
	uint64_t ran0, ran1;
	bool read;
};

/* A second thread, while the main one waits for it: its counters start near 0 and grow
 * with its CPU time; the main thread's (what /proc/self/schedstat says) do neither. */
static void *burning_thread(void *arg)
{
	struct counters *c = arg;
	uint64_t delayed, slices;

	c->read = rdmaq_thread_schedstat(&c->ran0, &delayed, &slices);
	burn_ms(40);
	c->read = c->read && rdmaq_thread_schedstat(&c->ran1, &delayed, &slices);
	return NULL;
}

static void test_a_second_thread_reads_its_own_counters(void)
{
	uint64_t main_ran = 0, delayed, slices;
	struct counters c = { 0 };
	pthread_t t;

	burn_ms(60);
	CHECK(rdmaq_thread_schedstat(&main_ran, &delayed, &slices));
	CHECK(pthread_create(&t, NULL, burning_thread, &c) == 0);
	pthread_join(t, NULL);
	CHECK(c.read);
	CHECK(c.ran0 < main_ran);	   /* a thread just started ran less than 60 ms */
	CHECK(c.ran1 - c.ran0 >= 20 * MS); /* its own 40 ms (counted at ticks: 20 at least) */
}

int main(void)
{
	test_the_counters_are_read_and_grow_with_cpu_time();
	test_a_second_thread_reads_its_own_counters();
	return check_report("schedstat");
}
