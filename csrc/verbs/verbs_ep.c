/* SPDX-License-Identifier: MIT */
/*
 * How a verbs writer or reader sleeps and is woken.
 *
 * Sleep: announce `sleeping`, drain and arm the hub's receive CQ, let the
 * core re-check the ring, then ppoll() the endpoint's eventfd, the
 * completion channel and the liveness sockets.  A WRITE_WITH_IMM for this
 * endpoint either lands before the arm (seen by the drain or the re-check)
 * or raises a channel event; whoever takes the event drains the CQ, and the
 * hub rings each endpoint it has doorbells for: a sleeping one gets its
 * eventfd written.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "barrier.h"
#include "ring.h"
#include "verbs_ep.h"

/* The hub's callback, under its lock: a doorbell for this endpoint arrived. */
static void ep_doorbell(struct rdmaq_verbs_hub_client *c)
{
	struct rdmaq_verbs_ep *ep = container_of(c, struct rdmaq_verbs_ep, hub);

	__atomic_add_fetch(&ep->doorbells, 1, __ATOMIC_SEQ_CST);
	/* Pairs with the barrier between setting `sleeping` and the
	 * endpoint's re-check of its ring (Dekker, as on shm). */
	if (__atomic_load_n(&ep->sleeping, __ATOMIC_SEQ_CST))
		rdmaq_verbs_ep_wake(ep);
}

int rdmaq_verbs_ep_init(struct rdmaq_verbs_ep *ep, struct rdmaq_verbs_ctx *ctx)
{
	ep->ctx = ctx;
	ep->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ep->efd < 0)
		return rdmaq_set_err(-errno, "eventfd: %s", strerror(errno));
	ep->hub = (struct rdmaq_verbs_hub_client){ .doorbell = ep_doorbell };
	rdmaq_verbs_hub_add_ep(&ctx->hub, &ep->hub);
	return 0;
}

void rdmaq_verbs_ep_fini(struct rdmaq_verbs_ep *ep)
{
	if (ep->efd < 0)
		return;
	rdmaq_verbs_hub_del(&ep->ctx->hub, &ep->hub);
	close(ep->efd);
	ep->efd = -1;
}

void rdmaq_verbs_ep_wake(struct rdmaq_verbs_ep *ep)
{
	eventfd_write(ep->efd, 1);
}

void rdmaq_verbs_ep_poll(struct rdmaq_verbs_ep *ep)
{
	rdmaq_verbs_hub_service(&ep->ctx->hub, false, true);
}

int rdmaq_verbs_ep_prepare(struct rdmaq_verbs_ep *ep)
{
	__atomic_store_n(&ep->sleeping, 1, __ATOMIC_SEQ_CST);
	smp_mb();
	return rdmaq_verbs_hub_service(&ep->ctx->hub, true, false);
}

void rdmaq_verbs_ep_finish(struct rdmaq_verbs_ep *ep)
{
	__atomic_store_n(&ep->sleeping, 0, __ATOMIC_RELAXED);
}

/*
 * fds[0..RDMAQ_VERBS_EP_NFDS) are filled in here; the nlive after them are
 * the caller's liveness sockets (fd -1 = skip), whose revents the caller
 * inspects.  1 when the timeout passed with nothing to wake it, 0 after an
 * event.  A signal ends the wait with -EINTR: the caller returns to
 * Python, which runs the handler and calls again with the time left.
 */
int rdmaq_verbs_ep_block(struct rdmaq_verbs_ep *ep, struct pollfd *fds, uint32_t nlive,
			 int64_t timeout_ns)
{
	struct rdmaq_verbs_hub *hub = &ep->ctx->hub;
	struct timespec ts = {
		.tv_sec = timeout_ns / 1000000000LL,
		.tv_nsec = timeout_ns % 1000000000LL,
	};
	uint32_t i;
	int n, ret = 0;

	fds[RDMAQ_VERBS_EP_EFD] = (struct pollfd){ .fd = ep->efd, .events = POLLIN };
	fds[RDMAQ_VERBS_EP_CHAN] = (struct pollfd){ .fd = hub->chan->fd, .events = POLLIN };
	fds[RDMAQ_VERBS_EP_ASYNC] = (struct pollfd){ .fd = hub->ibctx->async_fd, .events = POLLIN };
	for (i = 0; i < nlive; i++) {
		fds[RDMAQ_VERBS_EP_NFDS + i].events = POLLIN | POLLRDHUP;
		fds[RDMAQ_VERBS_EP_NFDS + i].revents = 0;
	}
	n = ppoll(fds, RDMAQ_VERBS_EP_NFDS + nlive, timeout_ns < 0 ? NULL : &ts, NULL);
	if (n < 0) {
		if (errno == EINTR)
			return rdmaq_set_err(-EINTR, "interrupted by a signal");
		return rdmaq_set_err(-errno, "ppoll: %s", strerror(errno));
	}
	if (fds[RDMAQ_VERBS_EP_EFD].revents & POLLIN) {
		eventfd_t v;

		eventfd_read(ep->efd, &v);
	}
	if (fds[RDMAQ_VERBS_EP_CHAN].revents & POLLIN)
		ret = rdmaq_verbs_hub_event(hub);
	if (fds[RDMAQ_VERBS_EP_ASYNC].revents & POLLIN)
		rdmaq_verbs_hub_async(hub);
	return ret ? ret : n == 0; /* 1: the timeout passed */
}
