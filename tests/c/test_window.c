/* SPDX-License-Identifier: MIT */
/*
 * Anticipation on its own: a waiter whose cadence predicts the next message,
 * made-up blocking ops that nap for real (a timer, no wake-up) and a message
 * that lands at a set time, before, inside or after the predicted window.
 * What is checked is counted (naps, windows, misses, woken) and how the wait
 * ended; a nap or spin that lost its CPU on a loaded machine is allowed for
 * (stats.preempted), as in test_wait.c.  Linked with chosen_busy.h's
 * rdmaq_cpu_busy(): the machine's load must not decide whether a window opens.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "chosen_busy.h"
#include "fake_endpoint.h"
#include "wait.h"

#define US 1000LL
#define MS 1000000LL

/* A message landing at `at_ns`; `late_ns`: how much later than asked a nap ends;
 * `woke_ns`: when the first block (the nap) ended: on a loaded machine, maybe well
 * after it asked. */
struct message {
	int64_t at_ns;
	int64_t late_ns;
	int64_t woke_ns;
	int64_t longest_ns; /* the longest block asked for */
	int blocks;
	bool short_slice_in_nap; /* the first block (the nap) had the short slice */
};

static int landed(void *arg)
{
	return rdmaq_now_ns() >= ((struct message *)arg)->at_ns;
}

static void sleep_until(int64_t t)
{
	struct timespec ts = { .tv_sec = t / 1000000000LL, .tv_nsec = t % 1000000000LL };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL))
		;
}

static struct rdmaq_waiter wt;

/* Sleeps for real: until the timeout (plus the lateness) or the message, whichever first. */
static int fake_block(void *ep, int64_t timeout_ns)
{
	struct message *m = ep;
	int64_t until = rdmaq_now_ns() + timeout_ns + m->late_ns;

	if (timeout_ns > m->longest_ns)
		m->longest_ns = timeout_ns;
	if (m->blocks++ == 0)
		m->short_slice_in_nap = wt.slice.applied;
	sleep_until(until < m->at_ns ? until : m->at_ns);
	if (!m->woke_ns)
		m->woke_ns = rdmaq_now_ns();
	return 0;
}

static const struct rdmaq_wait_ops fake_ops = FAKE_WAIT_OPS(fake_block);

static struct message msg;
static struct rdmaq_stats stats;
static struct rdmaq_cadence cad;

/* A writer that stamped a message every 95 or 105 ms, the last 20 ms ago: the next is
 * due in ~75-85 ms (far enough for a loaded machine to get there first), in a window
 * of the 1 ms budget.  Returns the window predicted from now. */
static struct rdmaq_cad_window setup(void)
{
	struct rdmaq_cad_window w;
	int64_t stamp[20];

	stamp[19] = rdmaq_now_ns() - 20 * MS;
	for (int i = 19; i > 0; i--)
		stamp[i - 1] = stamp[i] - (i % 2 ? 95 * MS : 105 * MS);
	memset(&stats, 0, sizeof(stats));
	rdmaq_waiter_init(&wt, &fake_ops, &msg, 0, &stats); /* no plain spin: only the window's */
	wt.slice.want_ns = 0;
	rdmaq_cadence_init(&cad);
	for (int i = 0; i < 20; i++)
		rdmaq_cadence_observe(&cad, stamp[i], stamp[i]);
	cpu_busy = false;
	CHECK(rdmaq_cadence_window(&cad, rdmaq_now_ns(), &w));
	CHECK(w.spin_until - w.spin_from == RDMAQ_CAD_MAX_SPIN_NS); /* 1 ms: the budget */
	return w;
}

static int64_t began; /* when the last wait began */

static int wait_for(int64_t at_ns, int64_t deadline)
{
	msg = (struct message){ .at_ns = at_ns };
	began = rdmaq_now_ns();
	return rdmaq_wait_next(&wt, &cad, NULL, landed, &msg, deadline);
}

/* Did the wait begin in time to nap?  On a loaded machine, the test may get the CPU
 * back only after the window: then there is nothing to check. */
static bool in_time(const struct rdmaq_cad_window *w)
{
	return began < w->sleep_until - 100 * US;
}

static void test_a_message_on_time_is_met_in_the_window(void)
{
	/* A loaded machine can take the CPU between the wait's start and its nap (seen
	 * once at load average 8): then the wait is run again, three times at most. */
	for (int run = 1; run <= 3; run++) {
		struct rdmaq_cad_window w = setup();

		/* late in the window: a nap that ended as late would count as preempted */
		CHECK(wait_for(w.spin_until - 100 * US, -1) == 0);
		if (!in_time(&w))
			return;
		if (run < 3 && !(stats.naps == 1 && stats.sleeps == 0))
			continue;
		CHECK(stats.naps == 1 && stats.sleeps == 0);
		/* unless the machine made the nap or the spin so late that the message was there */
		if (!stats.preempted && msg.woke_ns < msg.at_ns) {
			CHECK(stats.windows == 1 && stats.spins == 1 && stats.misses == 0 &&
			      stats.woken == 0);
			CHECK(wt.how == RDMAQ_HOW_WINDOW);
			CHECK(cad.clean == 1);
		}
		return;
	}
}

static void test_a_message_after_the_window_is_a_miss_then_a_wake_up(void)
{
	struct rdmaq_cad_window w = setup();

	CHECK(wait_for(w.spin_until + 2 * MS, -1) == 0);
	if (!in_time(&w))
		return;
	CHECK(stats.naps == 1 && stats.windows == 0);
	if (!stats.preempted && msg.woke_ns < w.spin_until) {
		CHECK(stats.misses == 1);
		CHECK(stats.sleeps == 1 && stats.woken == 1 && wt.how == RDMAQ_HOW_WOKEN);
	}
}

static void test_a_message_before_the_window_ends_the_nap(void)
{
	struct rdmaq_cad_window w = setup();
	int64_t now = rdmaq_now_ns();

	CHECK(wait_for(now + (w.sleep_until - now) / 2, -1) == 0);
	if (began >= msg.at_ns - 100 * US)
		return;
	CHECK(stats.naps == 1 && stats.woken == 1 && stats.windows == 0 && stats.misses == 0);
	CHECK(stats.sleeps == 0 && wt.how == RDMAQ_HOW_WOKEN);
}

static void test_no_nap_past_the_deadline(void)
{
	struct rdmaq_cad_window w = setup();

	/* the deadline comes before the window would open: no nap, and the wait times out */
	CHECK(wait_for(INT64_MAX, w.sleep_until - 50 * US) == -ETIMEDOUT);
	CHECK(stats.naps == 0 && stats.windows == 0 && stats.woken == 0);
	w = setup();
	CHECK(wait_for(INT64_MAX, w.sleep_until) ==
	      -ETIMEDOUT); /* the deadline at the window's opening */
	CHECK(stats.naps == 0);
}

static void test_no_nap_for_a_window_about_to_open(void)
{
	struct rdmaq_cad_window w = setup();

	/* 10 us before the window: shorter naps cost more than they save */
	while (rdmaq_now_ns() < w.sleep_until - 10 * US)
		;
	CHECK(wait_for(w.spin_until - 100 * US, -1) == 0);
	if (began < w.sleep_until) /* still before the window when it began */
		CHECK(stats.naps == 0);
}

static void test_a_busy_cpu_opens_no_window(void)
{
	struct rdmaq_cad_window w = setup();

	cpu_busy = true;
	CHECK(wait_for(w.spin_from, -1) == 0);
	CHECK(stats.naps == 0 && stats.windows == 0 && stats.busy == 1);
	if (in_time(&w))
		CHECK(stats.sleeps == 1 && stats.woken == 1);
}

static void test_a_nap_that_ends_late_backs_anticipation_off(void)
{
	struct rdmaq_cad_window w = setup();

	msg = (struct message){ .at_ns = w.spin_until + 100 * MS, .late_ns = 2 * MS };
	began = rdmaq_now_ns();
	CHECK(rdmaq_wait_next(&wt, &cad, NULL, landed, &msg, -1) == 0);
	if (!in_time(&w))
		return;
	CHECK(stats.naps == 1);
	/* unless the machine made the nap so late that the message was there already */
	if (msg.woke_ns < msg.at_ns) {
		CHECK(stats.preempted >= 1);
		/* the next windows are skipped, the lateness is learnt */
		CHECK(cad.skip >= 4 && cad.late > 0);
	}
}

/* A window whose nap woke late lost its CPU, even when its spin then meets the message:
 * it does not count as clean (test_cadence.c: the back-off it doubled stays). */
static void test_a_window_whose_nap_ends_late_is_not_clean(void)
{
	struct rdmaq_cad_window w = setup();

	/* the nap ends 700 us late, inside the 1 ms window; the message lands 100 us after */
	msg = (struct message){ .at_ns = w.spin_from + 800 * US, .late_ns = 700 * US };
	began = rdmaq_now_ns();
	CHECK(rdmaq_wait_next(&wt, &cad, NULL, landed, &msg, -1) == 0);
	if (!in_time(&w))
		return;
	/* unless the machine made the nap so late that it missed the window */
	if (stats.preempted == 1 && stats.windows == 1)
		CHECK(cad.clean == 0);
}

/* A nap is a block like any other: it asks for the short slice, so that the wake-up
 * that ends it early preempts whatever runs (test_wait.c: the plain block). */
static void test_a_nap_asks_for_the_short_slice(void)
{
	struct rdmaq_cad_window w = setup();
	int64_t now = rdmaq_now_ns();

	wt.slice.want_ns = RDMAQ_MIN_SLICE_NS;
	wt.slice.restore = true; /* the thread's own slice back: later tests nap as before */
	CHECK(wait_for(now + (w.sleep_until - now) / 2, -1) == 0);
	if (began >= msg.at_ns - 100 * US)
		return; /* the machine gave the test its CPU back too late to nap */
	CHECK(stats.naps == 1);
	/* where the kernel refuses custom slices, nothing is applied anywhere */
	CHECK(msg.short_slice_in_nap == (rdmaq_slice_effective(&wt.slice) != 0));
}

static int hooked; /* calls of the before-block hook */

static int count_before_block(struct rdmaq_waiter *w)
{
	(void)w;
	hooked++;
	return 0;
}

/* The before-block hook (a reader publishes its credit there) runs before a nap, and
 * the nap follows when it succeeds. */
static void test_a_nap_runs_the_before_block_hook_first(void)
{
	struct rdmaq_cad_window w = setup();
	int64_t now = rdmaq_now_ns();

	hooked = 0;
	wt.before_block = count_before_block;
	CHECK(wait_for(now + (w.sleep_until - now) / 2, -1) == 0);
	if (began >= msg.at_ns - 100 * US)
		return; /* the machine gave the test its CPU back too late to nap */
	CHECK(hooked == 1 && stats.naps == 1 && stats.woken == 1 && wt.how == RDMAQ_HOW_WOKEN);
}

static uint64_t thread_slice_ns(void)
{
	struct rdmaq_sched_attr a = { 0 };

	CHECK(syscall(SYS_sched_getattr, 0, &a, sizeof(a), 0) == 0);
	return a.sched_runtime;
}

/* Asked to (restore), a wait that ends in its nap gives the thread its own slice back. */
static void test_a_nap_gives_the_slice_back_when_asked(void)
{
	struct rdmaq_cad_window w = setup();
	int64_t now = rdmaq_now_ns();
	uint64_t own = thread_slice_ns();

	wt.slice.want_ns = RDMAQ_MIN_SLICE_NS;
	wt.slice.restore = true;
	CHECK(wait_for(now + (w.sleep_until - now) / 2, -1) == 0);
	CHECK(!wt.slice.applied);
	CHECK(thread_slice_ns() == own);
	if (began < msg.at_ns - 100 * US) /* in time to nap: the wait ended there */
		CHECK(stats.naps == 1 && wt.how == RDMAQ_HOW_WOKEN);
}

/* A wait that must end at its deadline never asks the kernel to sleep past it. */
static void test_no_block_outlasts_the_deadline(void)
{
	setup();
	msg = (struct message){ .at_ns = INT64_MAX };
	CHECK(rdmaq_wait(&wt, landed, &msg, rdmaq_now_ns() + 2 * MS) == -ETIMEDOUT);
	CHECK(stats.sleeps >= 1);
	CHECK(msg.longest_ns > 0 && msg.longest_ns <= 2 * MS);
}

int main(void)
{
	prctl(PR_SET_TIMERSLACK, 1UL); /* naps end when asked, not up to 50 us later */
	test_a_message_on_time_is_met_in_the_window();
	test_a_message_after_the_window_is_a_miss_then_a_wake_up();
	test_a_message_before_the_window_ends_the_nap();
	test_no_nap_past_the_deadline();
	test_no_nap_for_a_window_about_to_open();
	test_a_busy_cpu_opens_no_window();
	test_a_nap_that_ends_late_backs_anticipation_off();
	test_a_window_whose_nap_ends_late_is_not_clean();
	test_no_block_outlasts_the_deadline();
	test_a_nap_gives_the_slice_back_when_asked(); /* first: nothing left the slice short */
	test_a_nap_asks_for_the_short_slice();
	test_a_nap_runs_the_before_block_hook_first();
	return check_report("window");
}
