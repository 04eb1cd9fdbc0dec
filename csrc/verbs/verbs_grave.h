/* SPDX-License-Identifier: MIT */
/*
 * The graveyard: registered memory of closed endpoints, kept until every
 * peer that may still RDMA-write into it has let go.
 */
#ifndef RDMAQ_VERBS_GRAVE_H
#define RDMAQ_VERBS_GRAVE_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Memory a closed endpoint exposed, kept until its peers let go. */
struct rdmaq_verbs_grave {
	struct rdmaq_verbs_grave *next;
	struct ibv_mr **mrs; /* nmrs slots, NULL = unused */
	uint32_t nmrs;
	void *mem[2]; /* munmap()ed once the MRs are gone */
	size_t len[2];
	int *fds;      /* liveness sockets: EOF on all = safe to free */
	uint32_t nfds; /* used so far, of the slots allocated */
};

/* One per device context. */
struct rdmaq_verbs_graveyard {
	pthread_mutex_t lock;
	struct rdmaq_verbs_grave *graves;
};

void rdmaq_verbs_graveyard_init(struct rdmaq_verbs_graveyard *gy);
/* A grave with nmrs MR slots and room for nfds sockets; NULL when out of memory. */
struct rdmaq_verbs_grave *rdmaq_verbs_grave_new(uint32_t nmrs, uint32_t nfds);
/* Bury g (the graveyard owns it now), then reap. */
void rdmaq_verbs_grave_add(struct rdmaq_verbs_graveyard *gy, struct rdmaq_verbs_grave *g);
/* Free every grave whose peers have all let go. */
void rdmaq_verbs_grave_reap(struct rdmaq_verbs_graveyard *gy);

#endif
