/* SPDX-License-Identifier: MIT */
/*
 * Liveness sockets.  Each reader holds a TCP connection to its writer, set
 * up by the Python bootstrap and owned by the endpoints.  Nothing is ever
 * sent on it; the kernel closes it when the process dies (SIGKILL
 * included), so EOF wakes the peer's ppoll() at once.  A clean close sends
 * EOF too, after the endpoint's last RDMA write has completed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "rdmaq_verbs.h"
#include "ring.h"
#include "verbs_live.h"

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
	return snprintf(buf, len, "became unreachable: its connection failed (%s)%s",
			strerror(sock_err),
			sock_err == ETIMEDOUT ? ": no answer over the network (link down, host "
						"gone or frozen)"
					      : "");
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
