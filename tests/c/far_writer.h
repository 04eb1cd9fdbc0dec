/* SPDX-License-Identifier: MIT */
/*
 * The cadence of a writer whose next message is far: it stamped every 95 or
 * 105 ms, the last 20 ms before the frozen clock (frozen_clock.h), so the
 * next message is ~80 ms away and a window is predicted and napped for.
 */
#ifndef RDMAQ_TEST_FAR_WRITER_H
#define RDMAQ_TEST_FAR_WRITER_H

#include <stdint.h>

#include "cadence.h"
#include "frozen_clock.h"

static void far_writer(struct rdmaq_cadence *cad)
{
	int64_t stamp[20];

	stamp[19] = frozen_ns - 20000000LL;
	for (int i = 19; i > 0; i--)
		stamp[i - 1] = stamp[i] - (i % 2 ? 95000000LL : 105000000LL);
	rdmaq_cadence_init(cad);
	for (int i = 0; i < 20; i++)
		rdmaq_cadence_observe(cad, stamp[i], stamp[i]);
}

#endif
