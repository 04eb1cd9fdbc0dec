/* SPDX-License-Identifier: MIT */
/*
 * busy.c: a thread is busy when it waited for a CPU more than an eighth of
 * the time it was runnable, judged from its own schedstat, and its CPUs were
 * short of idle time meanwhile (or, that unknown, more tasks were runnable
 * than CPUs it may use).  Linked with this file's rdmaq_thread_schedstat(),
 * rdmaq_cpus_crowded(), rdmaq_cpus_idle_ns() and rdmaq_thread_preemptions(),
 * per thread, so the tests choose what the scheduler did; the clock is passed
 * in, so nothing is timed.
 */
#include <pthread.h>

#include "busy.h"
#include "check.h"
#include "schedstat.h"

/* What the fakes say, per thread (the verdict is per thread). */
static __thread uint64_t ran, delayed, slices;
static __thread int looks, crowd_looks;
static __thread bool unreadable;	  /* the fake schedstat cannot be read */
static __thread int crowded = 1;	  /* what rdmaq_cpus_crowded() says */
static __thread int64_t idle = -1;	  /* what rdmaq_cpus_idle_ns() says (-1: unknown) */
static __thread int64_t preemptions = -1; /* rdmaq_thread_preemptions() (-1: unknown) */

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

int rdmaq_cpus_crowded(void)
{
	crowd_looks++;
	return crowded;
}

int64_t rdmaq_cpus_idle_ns(void)
{
	return idle;
}

int64_t rdmaq_thread_preemptions(void)
{
	return preemptions;
}

static int say_crowded(void)
{
	return 1;
}

static int say_alone(void)
{
	return 0;
}

static int say_unknown(void)
{
	return -1;
}

#define MS 1000000LL
#define US 1000LL

static void test_the_verdict_is_the_share_of_runnable_time_spent_waiting(void)
{
	CHECK(!rdmaq_busy_verdict(10 * MS, 0, say_crowded));
	CHECK(!rdmaq_busy_verdict(7 * MS, 1 * MS, say_crowded)); /* exactly an eighth */
	CHECK(rdmaq_busy_verdict(6 * MS, 1 * MS, say_crowded));
	CHECK(rdmaq_busy_verdict(1 * MS, 3 * MS, say_crowded));
}

/*
 * Run delay with nothing else runnable is a halted vCPU's wake-up, not
 * contention, however long; with the running count unknown, the delay decides.
 */
static void test_run_delay_is_contention_only_when_others_are_runnable(void)
{
	CHECK(!rdmaq_busy_verdict(1 * MS, 3 * MS, say_alone));
	CHECK(!rdmaq_busy_verdict(1 * MS, 100 * MS, say_alone));
	CHECK(rdmaq_busy_verdict(1 * MS, 3 * MS, say_unknown));
	CHECK(!rdmaq_busy_verdict(10 * MS, 0, say_unknown));
}

/*
 * The idle 2-core VM: every wake-up waits 100-300 µs for the host to run its
 * vCPU, 10 wake-ups a period, a share of delay well over an eighth; nothing else
 * runnable.  Never busy, over many periods.  Then two hogs come: the same
 * thread, waiting as long, is busy at the next verdict.
 */
static void test_a_vm_s_wake_ups_are_not_busy_until_hogs_come(void)
{
	int64_t now = 1000 * MS;
	int i, busy = 0;

	crowded = 0;
	for (i = 0; i < 100; i++, now += RDMAQ_BUSY_PERIOD_NS) {
		ran += 10 * 100 * US;		/* 10 messages of 100 µs */
		delayed += 10 * (100 + i) * US; /* each woken 100-200 µs late */
		slices += 10;
		busy += rdmaq_cpu_busy(now);
	}
	CHECK(busy == 0);
	CHECK(crowd_looks > 0); /* the delay alone would have said busy */
	crowded = 1;
	ran += 10 * 100 * US;
	delayed += 10 * 150 * US;
	CHECK(rdmaq_cpu_busy(now));
	/* Held: the hogs leaving is seen after the hold. */
	crowded = 0;
	ran += 100 * MS;
	CHECK(rdmaq_cpu_busy(now + RDMAQ_BUSY_HOLD_NS - 1));
	CHECK(!rdmaq_cpu_busy(now + RDMAQ_BUSY_HOLD_NS));
}

/* Little run delay: the running count is not even read. */
static void test_the_running_count_is_read_only_when_the_delay_says_busy(void)
{
	int64_t now = 10000 * MS;

	crowded = 1;
	crowd_looks = 0;
	ran += 50 * MS;
	delayed += 1 * MS;
	CHECK(!rdmaq_cpu_busy(now));
	CHECK(crowd_looks == 0);
}

static void test_busy_follows_the_growth_since_the_last_verdict(void)
{
	int64_t now = 15000 * MS;

	crowded = 1;
	/* A period spent mostly waiting for a CPU. */
	ran += 2 * MS, delayed += 6 * MS;
	CHECK(rdmaq_cpu_busy(now));
	/* Busy holds, without looking. */
	looks = 0;
	ran += 100 * MS;
	CHECK(rdmaq_cpu_busy(now + RDMAQ_BUSY_HOLD_NS - 1) && looks == 0);
	/* Then it ran 100 ms without waiting: free. */
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
	CHECK(!rdmaq_cpu_busy(now + RDMAQ_BUSY_HOLD_NS));
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

	crowded = 1;
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

/*
 * Unreadable schedstat after a lost spin: busy through the hold, then free at
 * every look, not only at the one that found the file unreadable.
 */
static void test_an_unreadable_schedstat_frees_a_preempted_thread_after_its_hold(void)
{
	int64_t now = 90000 * MS, t;
	int busy = 0;

	unreadable = true;
	rdmaq_cpu_busy_preempted(now);
	CHECK(rdmaq_cpu_busy(now + RDMAQ_BUSY_HOLD_NS - 1));
	for (t = now + RDMAQ_BUSY_HOLD_NS; t < now + RDMAQ_BUSY_HOLD_NS + 10 * RDMAQ_BUSY_PERIOD_NS;
	     t += RDMAQ_BUSY_PERIOD_NS / 4)
		busy += rdmaq_cpu_busy(t);
	CHECK(busy == 0);
	unreadable = false;
}

/*
 * With the CPUs' idle time known, it tells a VM's wake-ups from contention, and the
 * running count is not asked: the idle 2-core VM, each period a sixth of the reader's
 * runnable time spent waiting for its vCPU, its CPUs idle 1.5 CPUs' worth, is never
 * busy, though the count says crowded; when hogs keep both CPUs, it is at once.
 */
static void test_idle_cpus_tell_a_wake_up_from_contention(void)
{
	int64_t now = 200000 * MS;
	int i, busy = 0;

	crowded = 1;
	crowd_looks = 0;
	idle = 1000 * MS;
	ran += 10 * MS;
	CHECK(!rdmaq_cpu_busy(now)); /* the idle time's first look */
	for (i = 0; i < 50; i++) {
		now += RDMAQ_BUSY_PERIOD_NS;
		ran += 1 * MS, delayed += 2 * MS;
		idle += RDMAQ_BUSY_PERIOD_NS * 3 / 2;
		busy += rdmaq_cpu_busy(now);
	}
	CHECK(busy == 0);
	now += RDMAQ_BUSY_PERIOD_NS;
	ran += 1 * MS, delayed += 2 * MS; /* the same waits, no CPU idle */
	CHECK(rdmaq_cpu_busy(now));
	CHECK(crowd_looks == 0);
	idle = -1;
}

/*
 * The line is half a CPU idle on average since the last verdict: half is not
 * crowded, a nanosecond less is.
 */
static void test_half_a_cpu_idle_is_not_crowded_less_is(void)
{
	int64_t now = 300000 * MS;

	idle = 5000 * MS;
	ran += 10 * MS;
	CHECK(!rdmaq_cpu_busy(now));
	now += RDMAQ_BUSY_PERIOD_NS;
	ran += 1 * MS, delayed += 2 * MS;
	idle += RDMAQ_BUSY_PERIOD_NS / 2;
	CHECK(!rdmaq_cpu_busy(now));
	now += RDMAQ_BUSY_PERIOD_NS;
	ran += 1 * MS, delayed += 2 * MS;
	idle += RDMAQ_BUSY_PERIOD_NS / 2 - 1;
	CHECK(rdmaq_cpu_busy(now));
	idle = -1;
}

/*
 * Idle time unknown at either end of the period, or running backwards: the running
 * count decides, as it did alone.
 */
static void test_idle_time_unknown_at_either_end_leaves_the_running_count(void)
{
	int64_t now = 400000 * MS;

	ran += 10 * MS;
	CHECK(!rdmaq_cpu_busy(now)); /* a start with the idle time unknown */
	now += RDMAQ_BUSY_PERIOD_NS;
	crowded = 0, crowd_looks = 0;
	idle = 7000 * MS; /* known now, not at the start: the count says */
	ran += 1 * MS, delayed += 2 * MS;
	CHECK(!rdmaq_cpu_busy(now) && crowd_looks == 1);
	now += RDMAQ_BUSY_PERIOD_NS;
	crowded = 1;
	idle -= 10 * MS; /* backwards */
	ran += 1 * MS, delayed += 2 * MS;
	CHECK(rdmaq_cpu_busy(now) && crowd_looks == 2);
	now += RDMAQ_BUSY_HOLD_NS;
	idle = -1; /* unknown now */
	crowded = 0;
	ran += 1 * MS, delayed += 2 * MS;
	CHECK(!rdmaq_cpu_busy(now) && crowd_looks == 3);
}

/*
 * An idle count of zero at the start, or one that stood still, is a reading, not
 * "unknown": the idle time decides (a whole CPU idle is free, none is crowded), and
 * the running count is not looked at.
 */
static void test_an_idle_time_of_zero_or_standing_still_is_a_reading(void)
{
	int64_t now = 450000 * MS;

	crowded = 1, crowd_looks = 0;
	idle = 0;
	ran += 10 * MS;
	CHECK(!rdmaq_cpu_busy(now));
	now += RDMAQ_BUSY_PERIOD_NS;
	ran += 1 * MS, delayed += 2 * MS;
	idle += RDMAQ_BUSY_PERIOD_NS;
	CHECK(!rdmaq_cpu_busy(now) && crowd_looks == 0);
	now += RDMAQ_BUSY_PERIOD_NS;
	crowded = 0;
	ran += 1 * MS, delayed += 2 * MS; /* idle stood still: no CPU was */
	CHECK(rdmaq_cpu_busy(now) && crowd_looks == 0);
	crowded = 1;
	idle = -1;
}

/*
 * A gap in a spin is a preemption only if the thread was switched out involuntarily
 * since the last look: without, the host took the vCPU, the thread stays free and the
 * spin goes on; with one, or the count unknown, it is busy for the hold.
 */
static void test_a_gap_with_no_involuntary_switch_is_the_host_s(void)
{
	int64_t now = 500000 * MS;

	preemptions = 5;
	ran += 10 * MS;
	CHECK(!rdmaq_cpu_busy(now)); /* a look: 5 switches so far */
	CHECK(!rdmaq_cpu_busy_preempted(now + 1));
	CHECK(!rdmaq_cpu_busy(now + 2));
	preemptions = 6;
	CHECK(rdmaq_cpu_busy_preempted(now + 3));
	CHECK(rdmaq_cpu_busy(now + 4));
	/* The next gap with no new switch is the host's; the hold stands. */
	CHECK(!rdmaq_cpu_busy_preempted(now + 5));
	CHECK(rdmaq_cpu_busy(now + 3 + RDMAQ_BUSY_HOLD_NS - 1));
	ran += 100 * MS;
	now += 3 + RDMAQ_BUSY_HOLD_NS;
	CHECK(!rdmaq_cpu_busy(now));
	preemptions = -1; /* unknown: every gap is a preemption */
	CHECK(rdmaq_cpu_busy_preempted(now + 1));
	CHECK(rdmaq_cpu_busy_preempted(now + 2));
	CHECK(rdmaq_cpu_busy(now + 3));
}

/*
 * A task that took a spinning thread's CPU while the CPUs had idle time to spare
 * since the last verdict was passing through (a waking writer, a kernel worker): no
 * hold, the spin goes on, though the running count says crowded.  The line is the
 * verdict's: half a CPU idle on average is not crowded, a nanosecond less is.
 */
static void test_a_preemption_with_cpus_to_spare_holds_nothing(void)
{
	int64_t now = 10000000 * MS;

	crowded = 1;
	preemptions = 7;
	idle = 3000 * MS;
	rdmaq_cpu_busy(now - RDMAQ_BUSY_HOLD_NS); /* what earlier tests left, judged */
	ran += 10 * MS;
	CHECK(!rdmaq_cpu_busy(now)); /* a look: the idle time and 7 switches so far */
	preemptions = 8;
	idle += 5 * MS; /* half a CPU over the next 10 ms */
	CHECK(!rdmaq_cpu_busy_preempted(now + 10 * MS));
	CHECK(!rdmaq_cpu_busy(now + 10 * MS));
	preemptions = 9;
	CHECK(rdmaq_cpu_busy_preempted(now + 10 * MS + 1));
	CHECK(rdmaq_cpu_busy(now + 10 * MS + RDMAQ_BUSY_HOLD_NS));
	/* Neither the idle time nor the running count known: a switch is a crowd's, as ever. */
	idle = -1;
	crowded = -1;
	preemptions = 10;
	CHECK(rdmaq_cpu_busy_preempted(now + 10 * MS + 2 * RDMAQ_BUSY_HOLD_NS));
	crowded = 1;
	preemptions = -1;
}

/* A new thread never switched out has a count of 0: a gap with the count still 0 is the host's. */
static void *never_switched_out(void *arg)
{
	int64_t now = 1000 * MS;
	int *gap_busy = arg;

	preemptions = 0;
	ran += 10 * MS;
	CHECK(!rdmaq_cpu_busy(now)); /* a look: no switch yet */
	*gap_busy = rdmaq_cpu_busy_preempted(now + 1);
	return NULL;
}

static void test_a_count_of_zero_involuntary_switches_is_a_count(void)
{
	int gap_busy = -1;
	pthread_t t;

	CHECK(pthread_create(&t, NULL, never_switched_out, &gap_busy) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(gap_busy == 0);
}

/* The verdict is each thread's own: one thread waiting behind hogs makes no other busy. */
static void *free_thread(void *arg)
{
	int64_t now = 1000 * MS;
	int *busy = arg;

	crowded = 1; /* the same machine */
	for (int i = 0; i < 50; i++, now += RDMAQ_BUSY_PERIOD_NS) {
		ran += 5 * MS; /* running, never waiting */
		*busy += rdmaq_cpu_busy(now);
	}
	return NULL;
}

static void *waiting_thread(void *arg)
{
	int64_t now = 1000 * MS;
	int *busy = arg;

	crowded = 1;
	for (int i = 0; i < 50; i++, now += RDMAQ_BUSY_PERIOD_NS) {
		ran += 1 * MS, delayed += 4 * MS;
		*busy += rdmaq_cpu_busy(now);
	}
	return NULL;
}

static void test_each_thread_is_judged_by_its_own_schedstat(void)
{
	pthread_t a, b;
	int busy_free = 0, busy_waiting = 0;

	CHECK(pthread_create(&a, NULL, waiting_thread, &busy_waiting) == 0);
	CHECK(pthread_create(&b, NULL, free_thread, &busy_free) == 0);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	CHECK(busy_waiting == 50);
	CHECK(busy_free == 0);
}

/*
 * Judged from exactly RDMAQ_BUSY_MIN_SEEN_NS runnable since the last verdict; a
 * nanosecond less keeps the last verdict.
 */
static void test_judged_from_exactly_the_least_runnable_time(void)
{
	int64_t now =
		900000 * MS; /* after every earlier test's clock: this thread's verdict moves on */

	crowded = 1;
	ran += 100 * MS;
	CHECK(!rdmaq_cpu_busy(now)); /* free, and the baseline for what follows */
	now += RDMAQ_BUSY_PERIOD_NS;
	ran += RDMAQ_BUSY_MIN_SEEN_NS / 2, delayed += RDMAQ_BUSY_MIN_SEEN_NS / 2 - 1;
	CHECK(!rdmaq_cpu_busy(now)); /* half of it waited, but a nanosecond short of judging */
	now += RDMAQ_BUSY_PERIOD_NS;
	delayed += 1;
	CHECK(rdmaq_cpu_busy(now)); /* exactly enough seen: busy */
}

/* A thread that starts while another is held busy starts free: the verdict, its hold
 * and its baseline are each thread's own. */
static void *fresh_thread(void *arg)
{
	bool *busy = arg;

	crowded = 1;
	ran = 10 * US; /* too little seen to judge */
	*busy = rdmaq_cpu_busy(300000 * MS);
	return NULL;
}

static void test_a_new_thread_is_free_while_another_is_held_busy(void)
{
	int64_t now = 300000 * MS;
	bool fresh_busy = true;
	pthread_t t;

	crowded = 1;
	ran += 1 * MS, delayed += 3 * MS;
	CHECK(rdmaq_cpu_busy(now)); /* this thread: busy, and held */
	CHECK(pthread_create(&t, NULL, fresh_thread, &fresh_busy) == 0);
	pthread_join(t, NULL);
	CHECK(!fresh_busy);
	CHECK(rdmaq_cpu_busy(now + 1)); /* still held here */
}

int main(void)
{
	test_the_verdict_is_the_share_of_runnable_time_spent_waiting();
	test_run_delay_is_contention_only_when_others_are_runnable();
	test_a_vm_s_wake_ups_are_not_busy_until_hogs_come();
	test_the_running_count_is_read_only_when_the_delay_says_busy();
	test_busy_follows_the_growth_since_the_last_verdict();
	test_a_spin_that_lost_its_cpu_holds_the_thread_busy();
	test_the_verdict_after_a_hold_starts_at_the_preemption();
	test_an_unreadable_schedstat_is_free();
	test_an_unreadable_schedstat_frees_a_preempted_thread_after_its_hold();
	test_idle_cpus_tell_a_wake_up_from_contention();
	test_half_a_cpu_idle_is_not_crowded_less_is();
	test_idle_time_unknown_at_either_end_leaves_the_running_count();
	test_an_idle_time_of_zero_or_standing_still_is_a_reading();
	test_a_gap_with_no_involuntary_switch_is_the_host_s();
	test_a_count_of_zero_involuntary_switches_is_a_count();
	test_each_thread_is_judged_by_its_own_schedstat();
	test_judged_from_exactly_the_least_runnable_time();
	test_a_new_thread_is_free_while_another_is_held_busy();
	test_a_preemption_with_cpus_to_spare_holds_nothing();
	return check_report("busy");
}
