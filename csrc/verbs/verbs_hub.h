/* SPDX-License-Identifier: MIT */
/*
 * The hub: where every event of a device context arrives (receive
 * completions, completion-channel events, async events) and goes to the
 * client it is for.  Its clients register themselves with a callback: an
 * endpoint for the doorbells addressed to it, a QP for the failures that
 * break it.  The hub knows nothing else of them.
 *
 * Lock order: the hub's lock, then whatever a callback takes (a QP's lock).
 */
#ifndef RDMAQ_VERBS_HUB_H
#define RDMAQ_VERBS_HUB_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RDMAQ_VERBS_SRQ_DEPTH 4096 /* receives shared by all QPs */

/*
 * A client's entry: an endpoint, rung by each WRITE_WITH_IMM whose immediate
 * data is its id, or a QP, failed by a receive error or an async event on
 * it (its qp_context must point at the entry: async events find it there).
 * A callback finds its client from the entry with container_of.
 */
struct rdmaq_verbs_hub_client {
	struct rdmaq_verbs_hub_client *next;
	uint32_t id; /* endpoint: assigned by the hub; QP: its qp_num */
	/* Endpoint: a doorbell arrived (under the hub's lock). */
	void (*doorbell)(struct rdmaq_verbs_hub_client *c);
	/* QP: it is broken, with err (negative errno) and why, for its message. */
	void (*fail)(struct rdmaq_verbs_hub_client *c, int err, const char *why);
};

/*
 * Every QP's receives land in one SRQ and one CQ, whose completion channel
 * is the only fd (with the async fd) a blocked endpoint waits on.
 */
struct rdmaq_verbs_hub {
	pthread_mutex_t lock;
	struct ibv_context *ibctx; /* not owned: the context's device */
	const char *device;	   /* its name, for messages */
	struct ibv_comp_channel *chan;
	struct ibv_cq *rcq;
	struct ibv_srq *srq;
	uint32_t srq_depth;
	bool armed;
	unsigned int unacked;
	struct rdmaq_verbs_hub_client *eps;
	struct rdmaq_verbs_hub_client *qps;
	uint32_t next_ep_id;
};

/* Create channel, CQ and SRQ on ibctx/pd (srq_depth receives, posted). */
int rdmaq_verbs_hub_init(struct rdmaq_verbs_hub *hub, struct ibv_context *ibctx, struct ibv_pd *pd,
			 const char *device, uint32_t srq_depth);
void rdmaq_verbs_hub_fini(struct rdmaq_verbs_hub *hub);

/* Register an endpoint (assigning its id) or a QP; unregister either (a QP has `fail`). */
void rdmaq_verbs_hub_add_ep(struct rdmaq_verbs_hub *hub, struct rdmaq_verbs_hub_client *ep);
void rdmaq_verbs_hub_add_qp(struct rdmaq_verbs_hub *hub, struct rdmaq_verbs_hub_client *qp);
void rdmaq_verbs_hub_del(struct rdmaq_verbs_hub *hub, struct rdmaq_verbs_hub_client *c);

/* Drain the receive CQ (trylock: unless another thread is at it), arm it if asked. */
int rdmaq_verbs_hub_service(struct rdmaq_verbs_hub *hub, bool arm, bool trylock);
/* The completion channel fd was readable. */
int rdmaq_verbs_hub_event(struct rdmaq_verbs_hub *hub);
/* The async fd was readable. */
void rdmaq_verbs_hub_async(struct rdmaq_verbs_hub *hub);

#endif
