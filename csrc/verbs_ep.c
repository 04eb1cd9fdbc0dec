/* SPDX-License-Identifier: MIT */
/*
 * What verbs writers and readers share: how they sleep, how they are woken
 * and how they notice a vanished peer.
 *
 * Sleep: announce `sleeping`, drain and arm the hub's receive CQ, let the
 * core re-check the ring, then ppoll() the endpoint's eventfd, the
 * completion channel and the liveness sockets.  A WRITE_WITH_IMM for this
 * endpoint either lands before the arm (seen by the drain or the re-check)
 * or raises a channel event; whoever takes the event drains the CQ and
 * writes the eventfd of each endpoint it has doorbells for.
 *
 * Liveness: each reader holds a TCP connection to its writer, set up by
 * the Python bootstrap and owned here.  Nothing is ever sent on it; the
 * kernel closes it when the process dies (SIGKILL included), so EOF wakes
 * the peer's ppoll() at once.  A clean close sends EOF too, after the
 * endpoint's last RDMA write has completed.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "barrier.h"
#include "verbs.h"

int rdmaq_verbs_ep_init(struct rdmaq_verbs_ep *ep, struct rdmaq_verbs_ctx *ctx)
{
	ep->ctx = ctx;
	ep->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ep->efd < 0)
		return rdmaq_set_err(-errno, "eventfd: %s", strerror(errno));
	rdmaq_verbs_hub_add(ctx, ep);
	return 0;
}

void rdmaq_verbs_ep_fini(struct rdmaq_verbs_ep *ep)
{
	if (ep->efd < 0)
		return;
	rdmaq_verbs_hub_del(ep->ctx, ep);
	close(ep->efd);
	ep->efd = -1;
}

void rdmaq_verbs_ep_wake(struct rdmaq_verbs_ep *ep)
{
	eventfd_write(ep->efd, 1);
}

int rdmaq_verbs_ep_prepare(struct rdmaq_verbs_ep *ep)
{
	__atomic_store_n(&ep->sleeping, 1, __ATOMIC_SEQ_CST);
	smp_mb();
	return rdmaq_verbs_hub_service(ep->ctx, true, false);
}

void rdmaq_verbs_ep_finish(struct rdmaq_verbs_ep *ep)
{
	__atomic_store_n(&ep->sleeping, 0, __ATOMIC_RELAXED);
}

/*
 * fds[0..RDMAQ_VERBS_EP_NFDS) are filled in here; the nlive after them are
 * the caller's liveness sockets (fd -1 = skip), whose revents the caller
 * inspects.  A signal ends the wait with -EINTR: the caller returns to
 * Python, which runs the handler and calls again with the time left.
 */
int rdmaq_verbs_ep_block(struct rdmaq_verbs_ep *ep, struct pollfd *fds, uint32_t nlive,
			 int64_t timeout_ns)
{
	struct timespec ts = {
		.tv_sec = timeout_ns / 1000000000LL,
		.tv_nsec = timeout_ns % 1000000000LL,
	};
	uint32_t i;
	int n, ret = 0;

	fds[RDMAQ_VERBS_EP_EFD] = (struct pollfd){ .fd = ep->efd, .events = POLLIN };
	fds[RDMAQ_VERBS_EP_CHAN] = (struct pollfd){ .fd = ep->ctx->chan->fd, .events = POLLIN };
	fds[RDMAQ_VERBS_EP_ASYNC] = (struct pollfd){ .fd = ep->ctx->ibctx->async_fd, .events = POLLIN };
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
		ret = rdmaq_verbs_hub_event(ep->ctx);
	if (fds[RDMAQ_VERBS_EP_ASYNC].revents & POLLIN)
		rdmaq_verbs_hub_async(ep->ctx);
	return ret;
}

int rdmaq_verbs_live_check(int fd, int *sock_err)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
	socklen_t len = sizeof(int);
	char buf[64];
	int err = 0;
	ssize_t n;

	if (sock_err)
		*sock_err = 0;
	if (fd < 0)
		return 1;
	if (poll(&p, 1, 0) <= 0)
		return 0;
	if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) {
		/* ETIMEDOUT: keepalive probes or unacknowledged data went
		 * unanswered, i.e. the network path failed, not the process. */
		if ((p.revents & POLLERR) && sock_err &&
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0)
			*sock_err = err;
		return 1;
	}
	/* The peer never sends: readable means EOF, or stray bytes we drop. */
	n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
	if (n == 0)
		return 1;
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		if (sock_err)
			*sock_err = errno;
		return 1;
	}
	return 0;
}

/* 1 when the peer's end of a liveness socket has closed (or failed). */
int rdmaq_verbs_live_gone(int fd)
{
	return rdmaq_verbs_live_check(fd, NULL);
}

int rdmaq_verbs_live_why(char *buf, size_t len, int sock_err)
{
	if (!sock_err)
		return snprintf(buf, len, "died: its connection closed before it closed the queue");
	return snprintf(buf, len, "became unreachable: its connection failed (%s)%s", strerror(sock_err),
			sock_err == ETIMEDOUT ? ": no answer over the network (link down, host "
			"gone or frozen)" : "");
}

bool rdmaq_verbs_live_ended(struct rdmaq_verbs_live *l)
{
	if (!l->gone && rdmaq_verbs_live_check(l->fd, &l->err))
		l->gone = true;
	return l->gone;
}

int rdmaq_verbs_live_err(const struct rdmaq_verbs_live *l, const char *who)
{
	char why[160];

	rdmaq_verbs_live_why(why, sizeof(why), l->err);
	return rdmaq_set_err(-EOWNERDEAD, "%s %s", who, why);
}
