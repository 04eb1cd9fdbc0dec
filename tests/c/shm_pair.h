/* SPDX-License-Identifier: MIT */
/*
 * A writer and its one reader over a fresh shm segment, both ready: where the
 * ring's C tests start from (one thread, one process).
 */
#ifndef RDMAQ_TEST_SHM_PAIR_H
#define RDMAQ_TEST_SHM_PAIR_H

#include "check.h"
#include "rdmaq_shm.h"
#include "ring.h"

static inline int shm_pair(const struct rdmaq_config *cfg, struct rdmaq_writer **w,
			   struct rdmaq_reader **r)
{
	if (rdmaq_shm_writer_create(w, cfg))
		return -1;
	if (rdmaq_shm_reader_attach(r, rdmaq_shm_writer_name(*w), 0, 0))
		return -1;
	CHECK(rdmaq_writer_wait_ready(*w, 1000000000LL) == 0);
	CHECK(rdmaq_reader_wait_ready(*r, 1000000000LL) == 0);
	return 0;
}

static inline void shm_unpair(struct rdmaq_writer *w, struct rdmaq_reader *r)
{
	rdmaq_reader_close(r);
	rdmaq_reader_destroy(r);
	rdmaq_writer_close(w);
	rdmaq_writer_destroy(w);
}

#endif
