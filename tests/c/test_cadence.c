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

static void test_steady_pace_predicts_the_next_message(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t, due;

	rdmaq_cadence_init(&c);
	t = feed(&c, 0, 20, MS, 2 * US);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
	due = t + MS + 2 * US; /* next stamp, in the reader's clock */
	CHECK(w.spin_from <= due && due <= w.spin_until);
	CHECK(w.sleep_until <= w.spin_from);
	/* A steady writer needs only a short window, far below the budget. */
	CHECK(w.spin_until - w.spin_from <= 2 * RDMAQ_CAD_GUARD_NS);
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

static void test_clean_windows_earn_the_backoff_back_slowly(void)
{
	struct rdmaq_cadence c;
	uint32_t high;

	rdmaq_cadence_init(&c);
	rdmaq_cadence_preempted(&c);
	rdmaq_cadence_preempted(&c);
	high = c.backoff;
	for (uint32_t i = 0; i < RDMAQ_CAD_CLEAN_RUN - 1; i++)
		rdmaq_cadence_clean(&c);
	CHECK(c.backoff == high);
	rdmaq_cadence_clean(&c);
	CHECK(c.backoff == high / 2);
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

/* RDMAQ_NAP_EARLY_US: the nap ends earlier by that much; the window stays where it was. */
static void test_naps_end_earlier_by_what_is_asked(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window before, after;
	int64_t t;

	rdmaq_cadence_init(&c);
	t = feed(&c, 0, 20, MS, 2 * US);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &before));
	rdmaq_cadence_configure(&c, RDMAQ_CAD_WINDOW, RDMAQ_CAD_BUDGET_DIV, 70 * US);
	CHECK(c.n == 19); /* the same history: only the nap moved */
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &after));
	CHECK(after.spin_from == before.spin_from && after.spin_until == before.spin_until);
	CHECK(before.sleep_until - after.sleep_until == 70 * US);
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

/* The shortest of the last 256 intervals still shapes the window; of the last 32, not. */
static void test_a_longer_history_spans_rarer_intervals(void)
{
	struct rdmaq_cadence c32, c256;
	struct rdmaq_cad_window w32, w256;
	int64_t t;

	rdmaq_cadence_init(&c32);
	rdmaq_cadence_init(&c256);
	rdmaq_cadence_configure(&c256, RDMAQ_CAD_HISTORY_MAX, RDMAQ_CAD_BUDGET_DIV, 0);
	t = feed(&c32, 0, 2, MS, 2 * US);
	feed(&c256, 0, 2, MS, 2 * US);
	t = feed(&c32, t, 1, 900 * US, 2 * US); /* one early message */
	feed(&c256, t - 900 * US, 1, 900 * US, 2 * US);
	t = feed(&c32, t, 100, MS, 2 * US);
	feed(&c256, t - 100 * MS, 100, MS, 2 * US);
	CHECK(c32.n == RDMAQ_CAD_WINDOW && c256.n == 102);
	CHECK(rdmaq_cadence_window(&c32, t + 10 * US, &w32));
	CHECK(rdmaq_cadence_window(&c256, t + 10 * US, &w256));
	CHECK(w32.spin_from > t + 2 * US + 900 * US);
	CHECK(w256.spin_from <= t + 2 * US + 900 * US);
}

/* Whatever comes, the sorted copy holds exactly the last `keep` intervals, in order. */
static void test_the_sorted_history_follows_the_ring(void)
{
	struct rdmaq_cadence c;
	uint32_t x = 12345;
	int64_t t = 0;

	rdmaq_cadence_init(&c);
	rdmaq_cadence_configure(&c, 37, RDMAQ_CAD_BUDGET_DIV, 0);
	for (int i = 0; i < 1000; i++) {
		int64_t ring[RDMAQ_CAD_HISTORY_MAX];
		bool same = true;

		x = x * 1103515245u + 12345u;
		t = feed(&c, t, 1, MS + (int64_t)(x >> 16) % (300 * US), 2 * US);
		CHECK(c.n == (i < 37 ? (uint32_t)i : 37u));
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

static void test_the_budget_is_a_share_of_the_interval(void)
{
	struct rdmaq_cadence c;
	struct rdmaq_cad_window w;
	int64_t t = 0;

	rdmaq_cadence_init(&c);
	rdmaq_cadence_configure(&c, RDMAQ_CAD_WINDOW, 20, 0);
	for (int i = 0; i < 16; i++)
		t = feed(&c, t, 1, i % 2 ? MS : MS + 450 * US, 2 * US);
	CHECK(rdmaq_cadence_window(&c, t + 10 * US, &w));
	CHECK(w.spin_until - w.spin_from <= (MS + 450 * US) / 20);
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

int main(void)
{
	test_no_window_before_enough_intervals();
	test_steady_pace_predicts_the_next_message();
	test_spin_is_bounded_by_the_budget();
	test_irregular_pace_gets_no_window();
	test_too_fast_or_too_slow_gets_no_window();
	test_late_reader_blocks_as_usual();
	test_preempted_spin_backs_off_exponentially();
	test_clean_windows_earn_the_backoff_back_slowly();
	test_late_naps_start_earlier();
	test_naps_end_earlier_by_what_is_asked();
	test_transit_is_the_fastest_seen();
	test_a_longer_history_spans_rarer_intervals();
	test_the_sorted_history_follows_the_ring();
	test_the_budget_is_a_share_of_the_interval();
	test_far_means_even_the_shortest_interval_is_far();
	return check_report("cadence");
}
