/* SPDX-License-Identifier: MIT */
/*
 * Which device, port and GID a context opens.
 */
#ifndef RDMAQ_VERBS_CHOICE_H
#define RDMAQ_VERBS_CHOICE_H

#include <infiniband/verbs.h>
#include <stdint.h>

struct rdmaq_verbs_choice {
	struct ibv_device *dev;
	uint32_t port;
	int gid_index;
	int score; /* 2: RoCE address in our netns, 1: usable */
};

/*
 * The best ACTIVE port of list[num] (device NULL or "" = any, want_port 0 =
 * any, want_gid < 0 = the IPv4-mapped RoCEv2 GID on Ethernet, else index 0);
 * -ENODEV naming the ports seen when none fits.
 */
int rdmaq_verbs_choose(struct ibv_device **list, int num, const char *device, uint32_t want_port,
		       int want_gid, struct rdmaq_verbs_choice *best);

#endif
