/* SPDX-License-Identifier: MIT */
/*
 * Liveness sockets: how an endpoint notices that its peer is gone.
 */
#ifndef RDMAQ_VERBS_LIVE_H
#define RDMAQ_VERBS_LIVE_H

#include <stdbool.h>
#include <stddef.h>

/* An endpoint's liveness socket to one peer, and what became of it. */
struct rdmaq_verbs_live {
	int fd;	   /* -1: none */
	bool gone; /* the peer's end ended (sticky) */
	int err;   /* ... with this socket error (0: EOF) */
};

/* True once the socket has ended: known, or checked now. */
bool rdmaq_verbs_live_ended(struct rdmaq_verbs_live *l);
/* The ended socket as -EOWNERDEAD: "<who> died: ..." or "<who> became unreachable: ...". */
int rdmaq_verbs_live_err(const struct rdmaq_verbs_live *l, const char *who);

/* 1 once the peer's end of liveness socket fd ended; *sock_err: its error (0 = EOF). */
int rdmaq_verbs_live_check(int fd, int *sock_err);
/* "died: ..." or "became unreachable: ..." for a socket that ended with sock_err. */
int rdmaq_verbs_live_why(char *buf, size_t len, int sock_err);

#endif
