/* SPDX-License-Identifier: MIT */
/*
 * rdmaq_reader_nap: a reader whose cadence predicts the next message naps until
 * its window, and the get after it spins in that window (it is planned).  The
 * cadence is fed made-up stamps of a writer that puts every ~100 ms, so the
 * window is ~80 ms away; the nap is a real one on the shm transport, and what
 * is checked is its outcome and the counters, never how long it took.  Linked
 * with this file's rdmaq_cpu_busy(): the machine's load must not decide
 * whether a window opens.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "busy.h"
#include "check.h"
#include "never_busy.h"
#include "rdmaq_shm.h"
#include "ring.h"
#include "shm_pair.h"

#define SEC 1000000000LL
#define MS  1000000LL

static const struct rdmaq_config base = {
	.n_readers = 1,
	.slot_bytes = 1024,
	.slots = 8,
	.max_message = 1 << 20,
	.spin_ns = 0,
};

/* The reader has seen 20 messages stamped every 95 or 105 ms, the last 20 ms ago. */
static void feed_cadence(struct rdmaq_reader *r)
{
	int64_t stamp[20];

	stamp[19] = rdmaq_now_ns() - 20 * MS;
	for (int i = 19; i > 0; i--)
		stamp[i - 1] = stamp[i] - (i % 2 ? 95 * MS : 105 * MS);
	for (int i = 0; i < 20; i++)
		rdmaq_cadence_observe(&r->cadence, stamp[i], stamp[i]);
}

/*
 * A nap that ends with the window open says so (1) and plans the next get's
 * window: a second nap before that get has nothing to do (0, no nap counted).
 */
static void test_a_nap_to_the_window_plans_the_next_get(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_stats rs;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	feed_cadence(r);
	CHECK(rdmaq_reader_nap(r, 10 * SEC) == 1);
	CHECK(r->planned);
	rdmaq_reader_stats(r, &rs);
	CHECK(rs.naps == 1);
	CHECK(rdmaq_reader_nap(r, 10 * SEC) == 0);
	rdmaq_reader_stats(r, &rs);
	CHECK(rs.naps == 1);
	shm_unpair(w, r);
}

/*
 * A new reader starts with anticipation's back-off at its floor: after its
 * first window lost to a preemption it leaves the next messages to the plain
 * wait (no nap) rather than anticipating again at once.
 */
static void test_a_new_reader_backs_off_after_a_preempted_window(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_stats rs;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	feed_cadence(r);
	rdmaq_cadence_preempted(&r->cadence); /* its first window: the spin lost its CPU */
	CHECK(rdmaq_reader_nap(r, 10 * SEC) == 0);
	rdmaq_reader_stats(r, &rs);
	CHECK(rs.naps == 0);
	shm_unpair(w, r);
}

/* A nap with a message already there has nothing to wait for: 0, no window planned. */
static void test_a_nap_with_a_message_there_returns_0_and_plans_nothing(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_iovec iov = { .base = "m", .len = 1 };
	struct rdmaq_stats rs;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	feed_cadence(r);
	CHECK(rdmaq_writer_put(w, &iov, 1, SEC) == 0);
	CHECK(rdmaq_reader_nap(r, 10 * SEC) == 0);
	CHECK(!r->planned);
	rdmaq_reader_stats(r, &rs);
	CHECK(rs.naps == 0);
	shm_unpair(w, r);
}

/*
 * The cadence predicts where messages start, not the records of one: a
 * reader waiting for the rest of a message blocks for it, and does not nap to
 * the next message's window.
 */
static void test_the_rest_of_a_message_is_waited_for_without_a_nap(void)
{
	static char big[16 * 1024], buf[16 * 1024];
	struct rdmaq_iovec iov = { .base = big, .len = sizeof(big) };
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_stats rs;
	uint64_t len;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	feed_cadence(r);
	/* longer than the ring: the first records go, then the put times out */
	CHECK(rdmaq_writer_put(w, &iov, 1, MS) == -ETIMEDOUT);
	/* the window of the next message is ~100 ms away, well before this deadline */
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, 300 * MS) == -ETIMEDOUT);
	rdmaq_reader_stats(r, &rs);
	CHECK(rs.naps == 0);
	shm_unpair(w, r);
}

/*
 * The get after a nap spins in the window that nap planned, not in one of its
 * own: a planned window still ahead of the get is napped to first.
 */
static void test_the_get_after_a_nap_waits_in_the_planned_window(void)
{
	struct rdmaq_writer *w;
	struct rdmaq_reader *r;
	struct rdmaq_stats rs;
	char buf[16];
	uint64_t len;
	int64_t now;

	if (shm_pair(&base, &w, &r)) {
		CHECK(!"pair");
		return;
	}
	now = rdmaq_now_ns();
	r->window.sleep_until = now + 20 * MS;
	r->window.spin_from = now + 20 * MS;
	r->window.spin_until = now + 21 * MS;
	r->planned = true;
	CHECK(rdmaq_reader_recv(r, buf, sizeof(buf), &len, 100 * MS) == -ETIMEDOUT);
	CHECK(!r->planned);
	rdmaq_reader_stats(r, &rs);
	CHECK(rs.naps == 1);
	shm_unpair(w, r);
}

int main(void)
{
	test_a_nap_to_the_window_plans_the_next_get();
	test_a_new_reader_backs_off_after_a_preempted_window();
	test_a_nap_with_a_message_there_returns_0_and_plans_nothing();
	test_the_rest_of_a_message_is_waited_for_without_a_nap();
	test_the_get_after_a_nap_waits_in_the_planned_window();
	return check_report("reader_nap");
}
