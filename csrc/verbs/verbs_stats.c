/* SPDX-License-Identifier: MIT */
/*
 * The verbs transport's process-wide counters.  Relaxed atomics: they are
 * statistics, read as a snapshot, never used to synchronise.
 */
#include "verbs_stats.h"

struct rdmaq_verbs_stats rdmaq_verbs_counters;

void rdmaq_verbs_stats(struct rdmaq_verbs_stats *out)
{
	const uint64_t *src = (const uint64_t *)&rdmaq_verbs_counters;
	uint64_t *dst = (uint64_t *)out;
	size_t i;

	for (i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}
