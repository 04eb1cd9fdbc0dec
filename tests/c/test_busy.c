/* SPDX-License-Identifier: MIT */
/*
 * busy.c: a thread is busy when it waited for a CPU more than an eighth of
 * the time it was runnable, judged from its own schedstat.  Linked with this
 * file's rdmaq_thread_schedstat(), so the tests choose what the scheduler
 * did; the clock is passed in, so nothing is timed.
 */
#include "busy.h"
#include "check.h"
#include "schedstat.h"

static uint64_t ran, delayed, slices; /* what the fake schedstat says */
static int looks;
static bool unreadable; /* the fake schedstat cannot be read */

bool rdmaq_thread_schedstat(uint64_t *ran_ns, uint64_t *delayed_ns, uint64_t *slices_run)
{
	looks++;
	if (unreadable)
		return false;
	*ran_ns = ran;
	*delayed_ns = delayed;
	*slices_run = slices;
	return true;
}

#define MS 1000000LL

static void test_the_verdict_is_the_share_of_runnable_time_spent_waiting(void)
{
	CHECK(!rdmaq_busy_verdict(10 * MS, 0, 0));
	CHECK(!rdmaq_busy_verdict(7 * MS, 1 * MS, 0)); /* exactly an eighth */
	CHECK(rdmaq_busy_verdict(6 * MS, 1 * MS, 0));
	CHECK(rdmaq_busy_verdict(1 * MS, 3 * MS, 1));
}

/*
 * A sleeper woken on a halted vCPU waits for the host, up to RDMAQ_BUSY_WAKE_NS a
 * wake-up, on an idle machine: ten wake-ups of 250 µs in 1 ms of running are free;
 * ten of 1 ms (behind CPU hogs) are not.
 */
static void test_the_wait_of_each_wake_up_on_a_halted_vcpu_is_not_contention(void)
{
	CHECK(!rdmaq_busy_verdict(1 * MS, 10 * 250000ULL, 10));
	CHECK(rdmaq_busy_verdict(1 * MS, 10 * MS, 10));
	CHECK(rdmaq_busy_verdict(1 * MS, 10 * 250000ULL,
				 1)); /* one wake-up, 2.5 ms: not a wake-up's */
}

static void test_busy_follows_the_growth_since_the_last_verdict(void)
{
	int64_t now = 1000 * MS;

	/* A life spent mostly waiting for a CPU. */
	ran = 2 * MS, delayed = 6 * MS;
	CHECK(rdmaq_cpu_busy(now));
	/* Busy holds, without looking. */
	looks = 0;
	ran = 100 * MS;
	CHECK(rdmaq_cpu_busy(now + RDMAQ_BUSY_HOLD_NS - 1) && looks == 0);
	/* Then it ran 98 ms without waiting: free, although its life says otherwise. */
	now += RDMAQ_BUSY_HOLD_NS;
	CHECK(!rdmaq_cpu_busy(now) && looks == 1);
	/* Free is looked at again after a period, not before. */
	CHECK(!rdmaq_cpu_busy(now + RDMAQ_BUSY_PERIOD_NS - 1) && looks == 1);
	/* Runnable for less than RDMAQ_BUSY_MIN_SEEN_NS since: too little to judge. */
	now += RDMAQ_BUSY_PERIOD_NS;
	delayed += RDMAQ_BUSY_MIN_SEEN_NS / 2;
	CHECK(!rdmaq_cpu_busy(now));
	/* That wait counts once enough is seen: 0.5 + 0.5 ms waited in 1.2 ms. */
	now += RDMAQ_BUSY_PERIOD_NS;
	ran += MS / 5, delayed += MS / 2;
	CHECK(rdmaq_cpu_busy(now));
	ran += 100 * MS; /* free from here on */
	CHECK(rdmaq_cpu_busy(now + RDMAQ_BUSY_HOLD_NS - 1));
}

static void test_a_spin_that_lost_its_cpu_holds_the_thread_busy(void)
{
	int64_t now = 50000 * MS;

	ran += 100 * MS; /* free so far */
	CHECK(!rdmaq_cpu_busy(now));
	rdmaq_cpu_busy_preempted(now);
	/* Sleeping, it waits for no CPU: the hold keeps it busy, without looking. */
	looks = 0;
	ran += 10 * MS;
	now += RDMAQ_BUSY_HOLD_NS - 1;
	CHECK(rdmaq_cpu_busy(now) && looks == 0);
	/* After the hold, what came after the preemption decides. */
	now += 1;
	CHECK(!rdmaq_cpu_busy(now) && looks == 1);
}

/*
 * What ran before a lost spin is not weighed after the hold: the preemption
 * takes the thread's counters as the next verdict's start.
 */
static void test_the_verdict_after_a_hold_starts_at_the_preemption(void)
{
	int64_t now = 60000 * MS;

	ran += 100 * MS;
	CHECK(!rdmaq_cpu_busy(now));
	ran += 100 * MS; /* free, and not judged before the spin is preempted */
	rdmaq_cpu_busy_preempted(now + 1);
	ran += 10 * MS;
	delayed += 2 * MS; /* a sixth of what came after: busy, unless diluted by the 100 ms */
	CHECK(rdmaq_cpu_busy(now + 1 + RDMAQ_BUSY_HOLD_NS));
}

/* A thread whose schedstat cannot be read is free, whatever it would say. */
static void test_an_unreadable_schedstat_is_free(void)
{
	int64_t now = 70000 * MS;

	ran += 10 * MS;
	delayed += 60 * MS; /* busy, were it read */
	unreadable = true;
	looks = 0;
	CHECK(!rdmaq_cpu_busy(now) && looks == 1);
	unreadable = false;
	CHECK(rdmaq_cpu_busy(now + RDMAQ_BUSY_PERIOD_NS));
}

int main(void)
{
	test_the_verdict_is_the_share_of_runnable_time_spent_waiting();
	test_the_wait_of_each_wake_up_on_a_halted_vcpu_is_not_contention();
	test_busy_follows_the_growth_since_the_last_verdict();
	test_a_spin_that_lost_its_cpu_holds_the_thread_busy();
	test_the_verdict_after_a_hold_starts_at_the_preemption();
	test_an_unreadable_schedstat_is_free();
	return check_report("busy");
}
