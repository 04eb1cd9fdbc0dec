/* SPDX-License-Identifier: MIT */
/*
 * A verbs endpoint (writer or reader): its wake-up id, how it sleeps and
 * how it is woken.  Above the context and its hub, where it registers for
 * its doorbells.
 */
#ifndef RDMAQ_VERBS_EP_H
#define RDMAQ_VERBS_EP_H

#include <poll.h>
#include <stdint.h>

#include "verbs_ctx.h"
#include "verbs_hub.h"

struct rdmaq_verbs_ep {
	struct rdmaq_verbs_hub_client hub; /* hub.id: immediate data addressed to us */
	struct rdmaq_verbs_ctx *ctx;
	int efd; /* eventfd: doorbells and interrupts */
	uint32_t sleeping;
	uint64_t doorbells;
};

/* An endpoint polls these first, then its liveness sockets. */
enum { RDMAQ_VERBS_EP_EFD, RDMAQ_VERBS_EP_CHAN, RDMAQ_VERBS_EP_ASYNC, RDMAQ_VERBS_EP_NFDS };

int rdmaq_verbs_ep_init(struct rdmaq_verbs_ep *ep, struct rdmaq_verbs_ctx *ctx);
void rdmaq_verbs_ep_fini(struct rdmaq_verbs_ep *ep);
/* The wait_ops steps: announce sleep and arm, block, stop sleeping. */
int rdmaq_verbs_ep_prepare(struct rdmaq_verbs_ep *ep);
int rdmaq_verbs_ep_block(struct rdmaq_verbs_ep *ep, struct pollfd *fds, uint32_t nlive,
			 int64_t timeout_ns);
void rdmaq_verbs_ep_finish(struct rdmaq_verbs_ep *ep);
/* Wake the endpoint's blocked waiter (interrupt). */
void rdmaq_verbs_ep_wake(struct rdmaq_verbs_ep *ep);
/* Take in doorbells waiting in the hub, unless another thread is at it. */
void rdmaq_verbs_ep_poll(struct rdmaq_verbs_ep *ep);

#endif
