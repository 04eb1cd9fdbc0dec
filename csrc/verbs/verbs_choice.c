/* SPDX-License-Identifier: MIT */
/*
 * Device, port and GID choice: the first device with an ACTIVE port,
 * preferring one whose RoCE address lives in this network namespace, and on
 * Ethernet the RoCEv2 GID with an IPv4-mapped address (routable over
 * UDP/IP, and what rdma_cm would pick for an IPv4 peer).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring.h"
#include "verbs_choice.h"

static bool gid_is_ipv4(const union ibv_gid *gid)
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return memcmp(gid->raw, prefix, sizeof(prefix)) == 0;
}

/* Is the GID's IPv4 address configured in this network namespace? */
static bool gid_ipv4_local(const union ibv_gid *gid)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd, ok;

	memcpy(&sa.sin_addr, gid->raw + 12, 4);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

/*
 * The default GID on Ethernet: RoCEv2 with an IPv4-mapped address.  Returns
 * its index, or -1.  *local says whether the address lives in our netns.
 */
static int port_pick_gid(struct ibv_context *ibctx, uint32_t port, int tbl_len, bool *local)
{
	int i, fallback = -1;

	*local = false;
	for (i = 0; i < tbl_len; i++) {
		struct ibv_gid_entry ent;

		if (ibv_query_gid_ex(ibctx, port, (uint32_t)i, &ent, 0))
			continue;
		if (ent.gid_type != IBV_GID_TYPE_ROCE_V2 || !gid_is_ipv4(&ent.gid))
			continue;
		if (gid_ipv4_local(&ent.gid)) {
			*local = true;
			return i;
		}
		if (fallback < 0)
			fallback = i;
	}
	return fallback;
}

int rdmaq_verbs_choose(struct ibv_device **list, int num, const char *device, uint32_t want_port,
		       int want_gid, struct rdmaq_verbs_choice *best)
{
	char seen[256] = "";
	int d, matched = 0;

	best->score = 0;
	for (d = 0; d < num; d++) {
		const char *name = ibv_get_device_name(list[d]);
		struct ibv_context *c;
		struct ibv_device_attr da;
		uint32_t p;

		if (device && *device && strcmp(device, name))
			continue;
		matched++;
		c = ibv_open_device(list[d]);
		if (!c)
			continue;
		if (ibv_query_device(c, &da)) {
			ibv_close_device(c);
			continue;
		}
		for (p = 1; p <= da.phys_port_cnt; p++) {
			struct ibv_port_attr pa;
			bool local = false;
			int gid = 0, score;

			if (want_port && p != want_port)
				continue;
			if (ibv_query_port(c, (uint8_t)p, &pa))
				continue;
			snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), "%s%s:%u %s",
				 *seen ? ", " : "", name, p, ibv_port_state_str(pa.state));
			if (pa.state != IBV_PORT_ACTIVE)
				continue;
			if (want_gid >= 0) {
				gid = want_gid;
				score = 1;
			} else if (pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
				gid = port_pick_gid(c, p, pa.gid_tbl_len, &local);
				if (gid < 0)
					continue; /* no RoCEv2 IPv4 GID (yet) */
				score = local ? 2 : 1;
			} else {
				score = 1;
			}
			if (score > best->score) {
				*best = (struct rdmaq_verbs_choice){
					.dev = list[d],
					.port = p,
					.gid_index = gid,
					.score = score,
				};
			}
		}
		ibv_close_device(c);
		if (best->score == 2)
			break;
	}
	if (best->score)
		return 0;
	if (device && *device && !matched)
		return rdmaq_set_err(-ENODEV, "no RDMA device named %s (see `rdmaq doctor`)",
				     device);
	return rdmaq_set_err(-ENODEV,
			     "no ACTIVE RDMA port with a usable GID%s%s%s (see `rdmaq doctor`)",
			     *seen ? " (ports: " : "", seen, *seen ? ")" : "");
}
