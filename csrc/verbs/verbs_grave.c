/* SPDX-License-Identifier: MIT */
/*
 * Memory a peer may still RDMA-write into stays registered until every
 * peer has shut its liveness socket (it promises not to write after that)
 * or died: a WRITE to a deregistered key would move the shared QP, and with
 * it every queue between the two processes, to the error state.
 */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "verbs_grave.h"
#include "verbs_live.h"
#include "verbs_stats.h"

void rdmaq_verbs_graveyard_init(struct rdmaq_verbs_graveyard *gy)
{
	pthread_mutex_init(&gy->lock, NULL);
	gy->graves = NULL;
}

/* One allocation: the grave, then nmrs MR slots, then nfds fd slots. */
struct rdmaq_verbs_grave *rdmaq_verbs_grave_new(uint32_t nmrs, uint32_t nfds)
{
	struct rdmaq_verbs_grave *g =
		calloc(1, sizeof(*g) + nmrs * sizeof(g->mrs[0]) + nfds * sizeof(g->fds[0]));

	if (!g)
		return NULL;
	g->mrs = (struct ibv_mr **)(g + 1);
	g->nmrs = nmrs;
	g->fds = (int *)(g->mrs + nmrs);
	return g;
}

static void grave_free(struct rdmaq_verbs_grave *g)
{
	uint32_t i;

	for (i = 0; i < g->nmrs; i++)
		if (g->mrs[i])
			ibv_dereg_mr(g->mrs[i]);
	for (i = 0; i < 2; i++)
		if (g->mem[i])
			munmap(g->mem[i], g->len[i]);
	for (i = 0; i < g->nfds; i++)
		if (g->fds[i] >= 0)
			close(g->fds[i]);
	free(g);
	RDMAQ_VSTAT_ADD(graves, -1);
}

void rdmaq_verbs_grave_reap(struct rdmaq_verbs_graveyard *gy)
{
	struct rdmaq_verbs_grave **pp, *g;

	pthread_mutex_lock(&gy->lock);
	for (pp = &gy->graves; (g = *pp);) {
		uint32_t i, live = 0;

		for (i = 0; i < g->nfds; i++)
			if (g->fds[i] >= 0 && !rdmaq_verbs_live_check(g->fds[i], NULL))
				live++;
		if (live) {
			pp = &g->next;
			continue;
		}
		*pp = g->next;
		grave_free(g);
	}
	pthread_mutex_unlock(&gy->lock);
}

void rdmaq_verbs_grave_add(struct rdmaq_verbs_graveyard *gy, struct rdmaq_verbs_grave *g)
{
	RDMAQ_VSTAT_ADD(graves, 1);
	pthread_mutex_lock(&gy->lock);
	g->next = gy->graves;
	gy->graves = g;
	pthread_mutex_unlock(&gy->lock);
	rdmaq_verbs_grave_reap(gy);
}
