/* SPDX-License-Identifier: MIT */
/*
 * The verbs transport's process-wide counters (struct rdmaq_verbs_stats,
 * read by rdmaq_verbs_stats()): every file bumps them with RDMAQ_VSTAT_ADD.
 */
#ifndef RDMAQ_VERBS_STATS_H
#define RDMAQ_VERBS_STATS_H

#include "rdmaq_verbs.h"

extern struct rdmaq_verbs_stats rdmaq_verbs_counters;

#define RDMAQ_VSTAT_ADD(field, v) \
	__atomic_add_fetch(&rdmaq_verbs_counters.field, (v), __ATOMIC_RELAXED)

#endif
