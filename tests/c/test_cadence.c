/* SPDX-License-Identifier: MIT */
/*
 * The cadence predictor on its own: one behaviour per test, fed with
 * made-up writer stamps, no clock, no threads.
 */
#include <string.h>

#include "cadence.h"
#include "check.h"

#define US 1000LL
#define MS 1000000LL

/* `n` messages stamped `iv` apart, each seen `transit` after its stamp. */
static int64_t feed(struct rdmaq_cadence *c, int64_t t, int n, int64_t iv, int64_t transit)
{
	for (int i = 0; i < n; i++) {
		t += iv;
		rdmaq_cadence_observe(c, t, t + transit);
	}
	return t;
}

static void test_no_window_before_enough_intervals(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t;

	rdmaq_cadence_init(&c);
	t = feed(&c, 0, RDMAQ_CAD_MIN_SEEN, MS, 2 * US); /* MIN_SEEN - 1 intervals */
	CHECK(!rdmaq_cadence_window(&c, t + 10 * US, &w));
	t = feed(&c, t, 1, MS, 2 * US);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
}

/* A writer steady at 1 ms for 20 messages: the window for the next; returns when it is due. */
static int64_t steady_window(struct rdmaq_cadence *c, struct rdmaq_cad_window *w)
{
	int64_t t;

	rdmaq_cadence_init(c);
	t = feed(c, 0, 20, MS, 2 * US);
	CHECK(rdmaq_cadence_window(c, t + 10 * US, w));
	return t + MS + 2 * US; /* next stamp, in the reader's clock */
}

static void test_steady_pace_predicts_the_next_message(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t due = steady_window(&c, &w);

	CHECK(w.spin_from <= due && due <= w.spin_until);
	CHECK(w.sleep_until <= w.spin_from);
	/* A steady writer's window opens only a guard before the message is due. */
	CHECK(due - w.spin_from <= RDMAQ_CAD_GUARD_NS);
}

static void test_a_late_message_within_the_budget_finds_the_window_open(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t due = steady_window(&c, &w);

	/* 100 us later than any interval seen: still inside the window, which
	 * ends where the budget does, not a guard past the longest interval */
	CHECK(due + 100 * US <= w.spin_until);
	CHECK(w.spin_until - w.spin_from == MS / RDMAQ_CAD_BUDGET_DIV);
}

static void test_spin_is_bounded_by_the_budget(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t = 0;

	rdmaq_cadence_init(&c);
	/* Jittery but regular: 1.00 and 1.45 ms alternate (spread < half the median). */
	for (int i = 0; i < 16; i++)
		t = feed(&c, t, 1, i % 2 ? MS : MS + 450 * US, 2 * US);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
	CHECK(w.spin_until - w.spin_from <= (MS + 450 * US) / RDMAQ_CAD_BUDGET_DIV);
}

static void test_irregular_pace_gets_no_window(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t = 0;

	rdmaq_cadence_init(&c);
	for (int i = 0; i < 32; i++)
		t = feed(&c, t, 1, i % 2 ? 300 * US : 3 * MS, 2 * US);
	CHECK(!rdmaq_cadence_window(&c, t + 10 * US, &w));
}

static void test_too_fast_or_too_slow_gets_no_window(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t;

	rdmaq_cadence_init(&c);
	t = feed(&c, 0, 20, 10 * US, 1 * US);
	CHECK(!rdmaq_cadence_window(&c, t, &w));
	rdmaq_cadence_init(&c);
	t = feed(&c, 0, 20, 3000 * MS, 1 * US);
	CHECK(!rdmaq_cadence_window(&c, t, &w));
}

static void test_late_reader_blocks_as_usual(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t;

	rdmaq_cadence_init(&c);
	t = feed(&c, 0, 20, MS, 2 * US);
	CHECK(!rdmaq_cadence_window(&c, t + 2 * MS, &w));
}

static void test_preempted_spin_backs_off_exponentially(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t;
	int skipped;

	rdmaq_cadence_init(&c);
	t = feed(&c, 0, 20, MS, 2 * US);
	for (int round = 0; round < 3; round++) {
		uint32_t expect = c.backoff;

		rdmaq_cadence_preempted(&c);
		for (skipped = 0; !rdmaq_cadence_window(&c, t + 10 * US, &w); skipped++)
			t = feed(&c, t, 1, MS, 2 * US);
		CHECK(skipped == (int)expect);
		CHECK(c.backoff == 2 * expect);
	}
}

/* A window asked for (wait.c asks before each), then met cleanly. */
static void clean_window(struct rdmaq_cadence *c)
{
	struct rdmaq_cad_window w;

	rdmaq_cadence_window(c, 0, &w);
	rdmaq_cadence_clean(c);
}

static void test_clean_windows_earn_the_backoff_back_slowly(void)
{
	struct rdmaq_cadence c;
	uint32_t high;

	rdmaq_cadence_init(&c);
	rdmaq_cadence_preempted(&c);
	rdmaq_cadence_preempted(&c);
	high = c.backoff;
	for (uint32_t i = 0; i < RDMAQ_CAD_CLEAN_RUN - 1; i++)
		clean_window(&c);
	CHECK(c.backoff == high);
	clean_window(&c);
	CHECK(c.backoff == high / 2);
}

/* 10 clean windows, a preemption, 15 clean: the run starts again at the preemption,
 * so the back-off it doubled stays. */
static void test_a_preemption_starts_the_clean_run_again(void)
{
	struct rdmaq_cadence c;
	uint32_t after;

	rdmaq_cadence_init(&c);
	for (int i = 0; i < 10; i++)
		clean_window(&c);
	rdmaq_cadence_preempted(&c);
	after = c.backoff;
	for (uint32_t i = 0; i < RDMAQ_CAD_CLEAN_RUN - 1; i++)
		clean_window(&c);
	CHECK(c.backoff == after);
	clean_window(&c);
	CHECK(c.backoff == after / 2);
}

/* The same when the preempted window's spin then met its message (its nap woke late):
 * that window is not one of the clean run. */
static void test_a_window_preempted_in_its_nap_is_not_clean(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	uint32_t after;

	rdmaq_cadence_init(&c);
	for (int i = 0; i < 10; i++)
		clean_window(&c);
	rdmaq_cadence_window(&c, 0, &w);
	rdmaq_cadence_preempted(&c); /* the nap woke late */
	rdmaq_cadence_clean(&c);     /* the spin met the message */
	after = c.backoff;
	for (uint32_t i = 0; i < RDMAQ_CAD_CLEAN_RUN - 1; i++)
		clean_window(&c);
	CHECK(c.backoff == after);
	clean_window(&c);
	CHECK(c.backoff == after / 2);
}

static void test_late_naps_start_earlier(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window before, after;
	int64_t t;

	rdmaq_cadence_init(&c);
	t = feed(&c, 0, 20, MS, 2 * US);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &before));
	for (int i = 0; i < 32; i++)
		rdmaq_cadence_napped(&c, 0, 80 * US);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &after));
	CHECK(after.spin_from == before.spin_from);
	CHECK(before.sleep_until - after.sleep_until >= 60 * US);
}

static void test_transit_is_the_fastest_seen(void)
{
	struct rdmaq_cadence c;
	int64_t t;

	rdmaq_cadence_init(&c);
	t = feed(&c, 0, 10, MS, 300 * US); /* found after wake-ups: late */
	t = feed(&c, t, 1, MS, 3 * US);	   /* found spinning */
	CHECK(c.offset == 3 * US);
	feed(&c, t, 10, MS, 300 * US);
	/* Creeps up, slowly, so a clock step cannot pin it. */
	CHECK(c.offset > 3 * US && c.offset < 4 * US);
}

/* Whatever comes, the sorted copy holds exactly the last RDMAQ_CAD_WINDOW intervals, in order. */
static void test_the_sorted_history_follows_the_ring(void)
{
	struct rdmaq_cadence c;
	uint32_t x = 12345;
	int64_t t = 0;

	rdmaq_cadence_init(&c);
	for (int i = 0; i < 1000; i++) {
		int64_t ring[RDMAQ_CAD_WINDOW];
		bool same = true;

		x = x * 1103515245u + 12345u;
		t = feed(&c, t, 1, MS + (int64_t)(x >> 16) % (300 * US), 2 * US);
		CHECK(c.n == (i < RDMAQ_CAD_WINDOW ? (uint32_t)i : RDMAQ_CAD_WINDOW));
		memcpy(ring, c.iv, c.n * sizeof(ring[0]));
		for (uint32_t a = 1; a < c.n; a++)
			for (uint32_t b = a; b > 0 && ring[b - 1] > ring[b]; b--) {
				int64_t tmp = ring[b];

				ring[b] = ring[b - 1];
				ring[b - 1] = tmp;
			}
		for (uint32_t a = 0; a < c.n; a++)
			same = same && ring[a] == c.sorted[a];
		CHECK(same);
	}
}

/*
 * One stall of the writer (5 ms among 1 ms steps) stays in the history for
 * RDMAQ_CAD_WINDOW messages: the windows meanwhile must still cover the
 * steady steps, not spend their budget before them.
 */
static void test_a_stall_does_not_move_the_window_off_the_rhythm(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t;

	rdmaq_cadence_init(&c);
	t = feed(&c, 0, 20, MS, 2 * US);
	t = feed(&c, t, 1, 5 * MS, 2 * US);
	for (int i = 0; i < RDMAQ_CAD_WINDOW - 2; i++) {
		int64_t next = t + MS + 2 * US;

		CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
		CHECK(w.spin_from <= next && next <= w.spin_until);
		CHECK(w.spin_until - w.spin_from <= MS / RDMAQ_CAD_BUDGET_DIV);
		t = feed(&c, t, 1, MS, 2 * US);
	}
}

/*
 * A writer pacing with sleeps is late by a varying amount: most steps come
 * 1.05-1.10 ms apart, a few at 1.30 ms, one early at 0.80 ms (catching up).
 * The spread is wider than the budget: the window covers the common steps.
 */
static void test_the_budget_goes_where_most_intervals_fall(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t = 0;

	rdmaq_cadence_init(&c);
	t = feed(&c, t, 2, MS + 50 * US, 2 * US);
	t = feed(&c, t, 1, 800 * US, 2 * US);
	for (int i = 0; i < 24; i++)
		t = feed(&c, t, 1, MS + (50 + 10 * (i % 6)) * US, 2 * US);
	for (int i = 0; i < 3; i++)
		t = feed(&c, t, 1, MS + 300 * US, 2 * US);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
	CHECK(w.spin_until - w.spin_from <= (MS + 100 * US) / RDMAQ_CAD_BUDGET_DIV);
	CHECK(w.spin_from <= t + 2 * US + MS + 50 * US);
	CHECK(w.spin_until >= t + 2 * US + MS + 100 * US);
}

/*
 * Steps of 1.00 ms (4), 1.18 ms (3) and 1.30 ms (3): wider than the budget
 * (1/6 of 1.18 ms), so the window goes to the most steps that fit inside it
 * with a guard either side.  1.00 and 1.18 ms (7) fit in the budget only
 * without the guards; 1.18 and 1.30 ms (6) fit with them, and get the window.
 */
static void test_the_budget_goes_to_the_most_steps_that_fit_between_the_guards(void)
{
	static const int64_t steps[] = { MS, 1180 * US, 1300 * US };
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t, due;

	rdmaq_cadence_init(&c);
	t = feed(&c, 0, 1, MS, 2 * US);
	for (int i = 0; i < 10; i++)
		t = feed(&c, t, 1, steps[i % 3], 2 * US);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
	due = t + 2 * US; /* the last stamp, in the reader's clock */
	CHECK(w.spin_from <= due + 1180 * US - RDMAQ_CAD_GUARD_NS);
	CHECK(w.spin_until >= due + 1300 * US + RDMAQ_CAD_GUARD_NS);
	CHECK(w.spin_from > due + MS); /* the 1 ms steps are left out */
}

static void test_far_means_even_the_shortest_interval_is_far(void)
{
	struct rdmaq_cadence c;
	int64_t t;

	rdmaq_cadence_init(&c);
	t = feed(&c, 0, RDMAQ_CAD_MIN_SEEN, 10 * MS, 2 * US);
	CHECK(!rdmaq_cadence_far(&c, t, 1 * MS)); /* not enough intervals yet */
	t = feed(&c, t, 1, 10 * MS, 2 * US);
	t = feed(&c, t, 1, 6 * MS, 2 * US);
	CHECK(rdmaq_cadence_far(&c, t + 100 * US, 5 * MS));
	CHECK(!rdmaq_cadence_far(&c, t + 100 * US, 6 * MS));
	CHECK(!rdmaq_cadence_far(&c, t + 20 * MS, 1)); /* overdue */
}

/*
 * MIN_SEEN intervals, the shortest 6 ms and the longest 12 ms (one each), the
 * rest 10 ms: a message is due from `ns` before the shortest interval after
 * the last one (as it was seen) to `ns` after the median, both ends excluded;
 * it is far while even the shortest is `ns` away or more.
 */
static int64_t six_to_twelve_ms(struct rdmaq_cadence *c)
{
	int64_t t;

	rdmaq_cadence_init(c);
	t = feed(c, 0, RDMAQ_CAD_MIN_SEEN - 1, 10 * MS, 2 * US);
	t = feed(c, t, 1, 12 * MS, 2 * US);
	CHECK(c->n == RDMAQ_CAD_MIN_SEEN - 1);
	CHECK(!rdmaq_cadence_due(c, c->last_stamp + c->offset + 10 * MS, MS)); /* too few yet */
	CHECK(!rdmaq_cadence_far(c, c->last_stamp, MS));
	feed(c, t, 1, 6 * MS, 2 * US);
	return c->last_stamp + c->offset; /* where the last one was seen */
}

static void test_due_spans_ns_beyond_the_shortest_and_the_median_interval(void)
{
	struct rdmaq_cadence c;
	int64_t seen = six_to_twelve_ms(&c);

	CHECK(!rdmaq_cadence_due(&c, seen + 5 * MS, MS));
	CHECK(rdmaq_cadence_due(&c, seen + 5 * MS + 1, MS));
	CHECK(rdmaq_cadence_due(&c, seen + 11 * MS - 1, MS));
	CHECK(!rdmaq_cadence_due(&c, seen + 11 * MS, MS)); /* the median passed by `ns` */
}

/*
 * A bursty writer: bursts of 5 messages 1 ms apart, 1.5 s between bursts, the
 * pauses among the last 32 intervals.  Once a burst ended, the next message is
 * due only until `ns` past the 1 ms of most intervals, not for the whole pause.
 */
static void test_a_pause_between_bursts_is_not_due(void)
{
	struct rdmaq_cadence c;
	int64_t t = 0, seen;
	int b;

	rdmaq_cadence_init(&c);
	for (b = 0; b < 8; b++) {
		t = feed(&c, t, 4, MS, 2 * US);
		t = feed(&c, t, 1, 1500 * MS, 2 * US);
	}
	t = feed(&c, t, 4, MS, 2 * US);
	seen = c.last_stamp + c.offset;
	CHECK(rdmaq_cadence_due(&c, seen + MS, 20 * MS)); /* within the burst's rhythm */
	CHECK(!rdmaq_cadence_due(&c, seen + 21 * MS, 20 * MS));
	CHECK(!rdmaq_cadence_due(&c, seen + 750 * MS, 20 * MS));
	CHECK(!rdmaq_cadence_due(&c, seen + 1490 * MS, 20 * MS));
}

static void test_far_is_the_shortest_interval_ns_away_or_more(void)
{
	struct rdmaq_cadence c;
	int64_t seen = six_to_twelve_ms(&c);

	CHECK(rdmaq_cadence_far(&c, seen + MS, 5 * MS));
	CHECK(!rdmaq_cadence_far(&c, seen + MS + 1, 5 * MS));
}

int main(void)
{
	test_no_window_before_enough_intervals();
	test_steady_pace_predicts_the_next_message();
	test_a_late_message_within_the_budget_finds_the_window_open();
	test_spin_is_bounded_by_the_budget();
	test_irregular_pace_gets_no_window();
	test_too_fast_or_too_slow_gets_no_window();
	test_late_reader_blocks_as_usual();
	test_preempted_spin_backs_off_exponentially();
	test_clean_windows_earn_the_backoff_back_slowly();
	test_a_preemption_starts_the_clean_run_again();
	test_a_window_preempted_in_its_nap_is_not_clean();
	test_late_naps_start_earlier();
	test_transit_is_the_fastest_seen();
	test_the_sorted_history_follows_the_ring();
	test_a_stall_does_not_move_the_window_off_the_rhythm();
	test_the_budget_goes_where_most_intervals_fall();
	test_the_budget_goes_to_the_most_steps_that_fit_between_the_guards();
	test_far_means_even_the_shortest_interval_is_far();
	test_due_spans_ns_beyond_the_shortest_and_the_median_interval();
	test_a_pause_between_bursts_is_not_due();
	test_far_is_the_shortest_interval_ns_away_or_more();
	return check_report("cadence");
}
