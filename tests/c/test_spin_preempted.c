/* SPDX-License-Identifier: MIT */
/*
 * A spin that loses its CPU, made up: the waiter's clock is frozen, and the
 * condition moves it past the preemption gap (200 µs) at one look, as a
 * thread descheduled there would see it.  What the waiter counts then is
 * checked, never timed.  And deadlines at the clock's zero: passed already;
 * a blocked wait's periodic return for signal handlers, on the main thread only.  Linked with this file's rdmaq_cpu_busy(): the
 * machine's load must not decide whether a wait spins here.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "busy.h"
#include "check.h"
#include "fake_endpoint.h"
#include "far_writer.h"
#include "frozen_clock.h"
#include "wait.h"

#define SPIN_MAX_NS 1000000U /* 1 ms */
#define LOST_NS	    300000LL /* longer than the preemption gap */

bool rdmaq_cpu_busy(int64_t now_ns)
{
	(void)now_ns;
	return false;
}

static int busy_preempted_calls; /* what the spin told busy.c */
static bool host_took_it;	 /* busy.c's answer: no task here took the CPU */

bool rdmaq_cpu_busy_preempted(int64_t now_ns)
{
	(void)now_ns;
	busy_preempted_calls++;
	return !host_took_it;
}

/* At look `lost_at` the thread loses its CPU (the clock jumps); the message is
 * there from look `due` (0: only a wake-up brings it). */
struct message {
	unsigned long looks, lost_at, due;
	int landed;
	int64_t lost_ns; /* how far the clock jumps (0: LOST_NS) */
};

static int message_landed(void *arg)
{
	struct message *m = arg;

	if (++m->looks == m->lost_at)
		frozen_ns += m->lost_ns ? m->lost_ns : LOST_NS;
	return m->landed || (m->due && m->looks >= m->due);
}

/* Blocking ends with the message: the writer's wake-up. */
static int fake_block(void *ep, int64_t timeout_ns)
{
	(void)timeout_ns;
	((struct message *)ep)->landed = 1;
	return 0;
}

static const struct rdmaq_wait_ops fake_ops = FAKE_WAIT_OPS(fake_block);

static struct message msg;
static struct rdmaq_stats stats;

static void waiter_init(struct rdmaq_waiter *wt)
{
	memset(&stats, 0, sizeof(stats));
	rdmaq_waiter_init(wt, &fake_ops, &msg, SPIN_MAX_NS, &stats);
	wt->slice.want_ns = 0; /* leave the scheduler alone */
	wt->spin_ns = SPIN_MAX_NS;
	busy_preempted_calls = 0;
	host_took_it = false;
}

/*
 * A spin that loses its CPU before its message comes gives up and blocks: the
 * preemption is counted (the reader's `preempted`) and told to busy.c, and the
 * wait is a sleep, not a spin.
 */
static void test_a_spin_preempted_before_its_message_counts_a_preemption(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	msg = (struct message){ .lost_at = 10 };
	frozen_ns = rdmaq_now_ns();
	CHECK(rdmaq_wait(&wt, message_landed, &msg, -1) == 0);
	frozen_ns = 0;
	CHECK(stats.preempted == 1 && busy_preempted_calls == 1);
	CHECK(stats.spins == 0 && stats.sleeps == 1);
	CHECK(wt.spin_ns == RDMAQ_MIN_SPIN_NS);
}

/*
 * A spin that finds its message only after losing its CPU counts both: one
 * preemption, and one wait ended by the spin; its budget drops to the floor.
 * The message is stamped as seen by the spin, at the clock's time then.
 */
static void test_a_spin_preempted_then_finding_its_message_counts_a_spin(void)
{
	struct rdmaq_waiter wt;
	int64_t start;

	waiter_init(&wt);
	msg = (struct message){ .lost_at = 10, .due = 10 };
	start = frozen_ns = rdmaq_now_ns();
	CHECK(rdmaq_wait(&wt, message_landed, &msg, -1) == 0);
	frozen_ns = 0;
	CHECK(stats.preempted == 1 && busy_preempted_calls == 1);
	CHECK(stats.spins == 1 && stats.sleeps == 0);
	CHECK(wt.spin_ns == RDMAQ_MIN_SPIN_NS);
	CHECK(wt.how == RDMAQ_HOW_SPIN && wt.met_ns > start); /* after the jump of the lost CPU */
}

/*
 * A spin that finds its message later than its budget, without losing its CPU,
 * grows the budget to twice what the spin took (here 2 x 100 µs), not to the maximum.
 */
static void test_a_late_spin_grows_its_budget_to_twice_what_it_took(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	wt.spin_ns = 50000;
	msg = (struct message){ .lost_at = 10, .due = 10, .lost_ns = 100000 };
	frozen_ns = rdmaq_now_ns();
	CHECK(rdmaq_wait(&wt, message_landed, &msg, -1) == 0);
	frozen_ns = 0;
	CHECK(stats.preempted == 0 && stats.spins == 1);
	CHECK(wt.spin_ns == 200000);
}

/*
 * A gap of exactly the preemption gap (200 µs) before the spin finds its
 * message is no preemption: only a longer one is counted.
 */
static void test_a_spin_found_after_exactly_the_gap_is_not_preempted(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	msg = (struct message){ .lost_at = 10, .due = 10, .lost_ns = 200000 };
	frozen_ns = rdmaq_now_ns();
	CHECK(rdmaq_wait(&wt, message_landed, &msg, -1) == 0);
	frozen_ns = 0;
	CHECK(stats.preempted == 0 && busy_preempted_calls == 0);
	CHECK(stats.spins == 1 && stats.sleeps == 0);
}

/*
 * A gap in the clock that no task here took (the host ran something else on
 * the vCPU) is no preemption: the spin goes on and finds its message, with
 * nothing counted and its budget kept; the same gap found with the message.
 */
static void test_a_gap_the_host_took_is_no_preemption(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	host_took_it = true;
	msg = (struct message){ .lost_at = 10, .due = 200 }; /* past a look at the clock */
	frozen_ns = rdmaq_now_ns();
	CHECK(rdmaq_wait(&wt, message_landed, &msg, -1) == 0);
	CHECK(busy_preempted_calls == 1 && stats.preempted == 0);
	CHECK(stats.spins == 1 && stats.sleeps == 0);
	CHECK(wt.spin_ns == SPIN_MAX_NS);

	waiter_init(&wt);
	host_took_it = true;
	msg = (struct message){ .lost_at = 10, .due = 10 };
	CHECK(rdmaq_wait(&wt, message_landed, &msg, -1) == 0);
	frozen_ns = 0;
	CHECK(busy_preempted_calls == 1 && stats.preempted == 0);
	CHECK(stats.spins == 1 && stats.sleeps == 0);
}

/*
 * A deadline is any instant of the clock from 0 on: one at 0 has passed, and a
 * wait given it times out without blocking (only -1 means no deadline).
 */
static void test_a_deadline_at_clock_zero_has_passed(void)
{
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	wt.spin_max_ns = wt.spin_ns = 0;
	msg = (struct message){ 0 };
	CHECK(rdmaq_wait(&wt, message_landed, &msg, 0) == -ETIMEDOUT);
	CHECK(stats.sleeps == 0 && !msg.landed);
}

/*
 * A nap never runs past the wait's deadline: with a deadline before the
 * predicted window (here the earliest there is, clock zero) the window is
 * left to the wait, and no nap is taken.
 */
static void test_a_deadline_before_the_window_takes_no_nap(void)
{
	struct rdmaq_cad_window win;
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;

	waiter_init(&wt);
	wt.spin_max_ns = wt.spin_ns = 0;
	msg = (struct message){ 0 };
	frozen_ns = rdmaq_now_ns();
	far_writer(&cad);
	CHECK(rdmaq_wait_prepare_window(&wt, &cad, message_landed, &msg, 0, &win) == 1);
	frozen_ns = 0;
	CHECK(stats.naps == 0 && !msg.landed);
}

/*
 * A nap whose thread lost its CPU past the get's deadline just before it would block
 * looks once more: a message there is taken (0: the get goes on to it), none is a
 * timeout.
 */
static void test_a_nap_past_its_deadline_takes_a_message_that_is_there(void)
{
	for (int there = 0; there < 2; there++) {
		struct rdmaq_cad_window win;
		struct rdmaq_cadence cad;
		struct rdmaq_waiter wt;
		int ret;

		waiter_init(&wt);
		wt.spin_max_ns = wt.spin_ns = 0;
		frozen_ns = rdmaq_now_ns();
		far_writer(&cad);
		/* look 2 (the re-check before blocking) loses the CPU for half a second */
		msg = (struct message){ .lost_at = 2, .lost_ns = 500000000LL, .due = there ? 3 : 0 };
		ret = rdmaq_wait_prepare_window(&wt, &cad, message_landed, &msg,
						frozen_ns + 90000000LL, &win);
		frozen_ns = 0;
		CHECK(ret == (there ? 0 : -ETIMEDOUT) && msg.looks == 3);
		CHECK(stats.naps == 1);
	}
}

/* An endpoint whose peer is dead; its block sleeps a whole peer-check period,
 * after which the message lands (looked at twice after the wake-up: the
 * wake-up's own look misses it, the peer check's finds it). */
static int dead_prepares, looks_after_block, woke;

static int dead_prepare(void *ep)
{
	(void)ep;
	dead_prepares++;
	return 0;
}

static int dead_peer(void *ep)
{
	(void)ep;
	return -EPIPE;
}

static int period_block(void *ep, int64_t timeout_ns)
{
	(void)ep;
	(void)timeout_ns;
	frozen_ns += RDMAQ_PEER_CHECK_NS;
	woke = 1;
	return 0;
}

static int lands_after_the_wakeups_look(void *arg)
{
	(void)arg;
	return woke && ++looks_after_block >= 2;
}

static const struct rdmaq_wait_ops dead_ops = {
	.prepare = dead_prepare,
	.block = period_block,
	.finish = fake_finish,
	.check_peer = dead_peer,
};

/* Data already in the ring wins over a dead peer: the peer check looks at the
 * ring first, and returns the message rather than the peer's death. */
static void test_a_message_found_at_the_peer_check_wins_over_a_dead_peer(void)
{
	struct rdmaq_waiter wt;

	memset(&stats, 0, sizeof(stats));
	rdmaq_waiter_init(&wt, &dead_ops, NULL, 0, &stats);
	wt.slice.want_ns = 0;
	wt.spin_max_ns = wt.spin_ns = 0;
	woke = looks_after_block = 0;
	frozen_ns = rdmaq_now_ns();
	wt.peer_checked_ns = frozen_ns; /* checked just now: the next check is a period away */
	CHECK(rdmaq_wait(&wt, lands_after_the_wakeups_look, NULL, -1) == 0);
	frozen_ns = 0;
	CHECK(looks_after_block == 2 && stats.sleeps == 1);
}

/* A waiter cancelled (its endpoint closed) before the wait returns -ECANCELED
 * after its one look: it neither spins its budget nor announces a sleep. */
static void test_a_cancelled_waiter_returns_without_spinning_or_sleeping(void)
{
	struct rdmaq_waiter wt;

	memset(&stats, 0, sizeof(stats));
	rdmaq_waiter_init(&wt, &dead_ops, NULL, SPIN_MAX_NS, &stats);
	wt.slice.want_ns = 0;
	wt.spin_ns = SPIN_MAX_NS;
	wt.cancelled = 1;
	msg = (struct message){ 0 };
	dead_prepares = 0;
	CHECK(rdmaq_wait(&wt, message_landed, &msg, -1) == -ECANCELED);
	CHECK(msg.looks == 1 && dead_prepares == 0);
	CHECK(stats.spins == 0 && stats.sleeps == 0);
}

/* A live peer that sends nothing: each block sleeps out its timeout. */
static int quiet_blocks;

static int quiet_block(void *ep, int64_t timeout_ns)
{
	(void)ep;
	frozen_ns += timeout_ns;
	quiet_blocks++;
	return 1;
}

static int nothing_lands(void *arg)
{
	(void)arg;
	return 0;
}

static const struct rdmaq_wait_ops quiet_ops = FAKE_WAIT_OPS(quiet_block);

struct blocked_wait {
	int ret, blocks;
};

/* A wait that asks to come back for signal handlers, 2.5 peer checks long. */
static void *wait_blocked(void *arg)
{
	struct blocked_wait *bw = arg;
	struct rdmaq_waiter wt;

	rdmaq_waiter_init(&wt, &quiet_ops, NULL, 0, &stats);
	wt.slice.want_ns = 0;
	wt.eintr_on_main_thread = true;
	quiet_blocks = 0;
	bw->ret = rdmaq_wait(&wt, nothing_lands, NULL, frozen_ns + 5 * RDMAQ_PEER_CHECK_NS / 2);
	bw->blocks = quiet_blocks;
	return NULL;
}

/*
 * Signal handlers run on the main thread: a blocked wait there returns -EINTR
 * at its first peer check; on another thread it blocks on to its deadline.
 */
static void test_only_the_main_thread_returns_for_signal_handlers(void)
{
	struct blocked_wait on_main, on_other;
	pthread_t t;

	memset(&stats, 0, sizeof(stats));
	frozen_ns = rdmaq_now_ns();
	wait_blocked(&on_main);
	CHECK(on_main.ret == -EINTR && on_main.blocks == 1);
	CHECK(pthread_create(&t, NULL, wait_blocked, &on_other) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	frozen_ns = 0;
	CHECK(on_other.ret == -ETIMEDOUT && on_other.blocks == 3);
}

/*
 * Policy "auto"'s free spin that loses its CPU gives up and blocks, as the adaptive
 * spin does; only the experiment free_spin_busy spins on through the preemption.
 */
static int free_spin_wait(bool spin_through)
{
	struct rdmaq_cadence cad;
	struct rdmaq_waiter wt;
	int ret;

	waiter_init(&wt);
	wt.anticipate = false;
	wt.spin_max_ns = wt.spin_ns = 0;
	wt.free_spin_ns = 20000000U;
	wt.free_spin_busy = spin_through;
	frozen_ns = rdmaq_now_ns();
	rdmaq_cadence_init(&cad);
	for (int i = 12; i >= 0; i--) /* 1 ms apart, the last one now: the next is due */
		rdmaq_cadence_observe(&cad, frozen_ns - i * 1000000LL, frozen_ns - i * 1000000LL);
	msg = (struct message){ .lost_at = 10, .due = 200 }; /* the clock is read every 64 looks */
	ret = rdmaq_wait_next(&wt, &cad, NULL, message_landed, &msg, -1);
	frozen_ns = 0;
	return ret;
}

static void test_a_free_spin_that_loses_its_cpu_blocks_unless_told_to_spin_through(void)
{
	CHECK(free_spin_wait(false) == 0);
	CHECK(stats.preempted == 1 && busy_preempted_calls == 1);
	CHECK(stats.spins == 0 && stats.sleeps == 1);
	CHECK(free_spin_wait(true) == 0);
	CHECK(stats.preempted == 1 && stats.spins == 1 && stats.sleeps == 0);
}

int main(void)
{
	test_a_spin_preempted_before_its_message_counts_a_preemption();
	test_a_spin_preempted_then_finding_its_message_counts_a_spin();
	test_a_late_spin_grows_its_budget_to_twice_what_it_took();
	test_a_nap_past_its_deadline_takes_a_message_that_is_there();
	test_a_free_spin_that_loses_its_cpu_blocks_unless_told_to_spin_through();
	test_a_spin_found_after_exactly_the_gap_is_not_preempted();
	test_a_gap_the_host_took_is_no_preemption();
	test_a_deadline_at_clock_zero_has_passed();
	test_a_message_found_at_the_peer_check_wins_over_a_dead_peer();
	test_a_cancelled_waiter_returns_without_spinning_or_sleeping();
	test_a_deadline_before_the_window_takes_no_nap();
	test_only_the_main_thread_returns_for_signal_handlers();
	return check_report("spin_preempted");
}
