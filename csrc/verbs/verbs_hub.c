/* SPDX-License-Identifier: MIT */
/*
 * The hub of a device context: every QP posts its receives to one SRQ and
 * completes them on one CQ with one completion channel.  Immediate data
 * names the local endpoint a WRITE_WITH_IMM is for (a doorbell to a reader,
 * a credit to a writer), so any thread that drains the CQ can hand each
 * completion to its endpoint, and a blocked endpoint waits on just its
 * eventfd plus the channel fd.  A failed receive, or an async event, breaks
 * the QP it names; a fatal device event breaks them all.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include "ring.h"
#include "verbs_errno.h"
#include "verbs_hub.h"
#include "verbs_stats.h"

static int hub_post_recvs(struct rdmaq_verbs_hub *hub, uint32_t n)
{
	struct ibv_recv_wr wrs[32], *bad;

	/* WRITE_WITH_IMM places its payload by address: receives carry no
	 * buffer, only the slot for the completion. */
	while (n) {
		uint32_t k = n < 32 ? n : 32, i;
		int ret;

		for (i = 0; i < k; i++)
			wrs[i] = (struct ibv_recv_wr){ .next = i + 1 < k ? &wrs[i + 1] : NULL };
		ret = ibv_post_srq_recv(hub->srq, wrs, &bad);
		if (ret) {
			ret = rdmaq_verbs_err(ret);
			return rdmaq_set_err(ret, "ibv_post_srq_recv: %s", strerror(-ret));
		}
		n -= k;
	}
	return 0;
}

static int set_nonblock(int fd, const char *what)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return rdmaq_set_err(-errno, "fcntl(O_NONBLOCK) on the %s: %s", what,
				     strerror(errno));
	return 0;
}

int rdmaq_verbs_hub_init(struct rdmaq_verbs_hub *hub, struct ibv_context *ibctx, struct ibv_pd *pd,
			 const char *device, uint32_t srq_depth)
{
	int ret;

	*hub = (struct rdmaq_verbs_hub){ .ibctx = ibctx, .device = device, .srq_depth = srq_depth };
	errno = 0;
	hub->chan = ibv_create_comp_channel(ibctx);
	if (!hub->chan) {
		ret = rdmaq_verbs_null_err(-ENOMEM);
		return rdmaq_set_err(ret, "ibv_create_comp_channel(%s): %s", device, strerror(-ret));
	}
	/* Non-blocking: several threads may wake for one event (pyverbs #1564). */
	ret = set_nonblock(hub->chan->fd, "completion channel");
	if (ret)
		goto clean_chan;
	/* Non-blocking too: async events are drained until EAGAIN. */
	ret = set_nonblock(ibctx->async_fd, "async event fd");
	if (ret)
		goto clean_chan;
	errno = 0;
	hub->rcq = ibv_create_cq(ibctx, (int)srq_depth + 64, hub, hub->chan, 0);
	if (!hub->rcq) {
		ret = rdmaq_verbs_null_err(-ENOMEM);
		ret = rdmaq_set_err(ret, "ibv_create_cq (receive, %u entries): %s", srq_depth + 64,
				    strerror(-ret));
		goto clean_chan;
	}
	errno = 0;
	hub->srq = ibv_create_srq(pd, &(struct ibv_srq_init_attr){
					      .attr = { .max_wr = srq_depth, .max_sge = 1 },
				      });
	if (!hub->srq) {
		ret = rdmaq_verbs_null_err(-ENOMEM);
		ret = rdmaq_set_err(ret, "ibv_create_srq (%u WRs): %s", srq_depth, strerror(-ret));
		goto clean_rcq;
	}
	ret = hub_post_recvs(hub, srq_depth);
	if (ret)
		goto clean_srq;
	hub->next_ep_id = (uint32_t)(rdmaq_random_u64() >> 40);
	pthread_mutex_init(&hub->lock, NULL);
	return 0;

clean_srq:
	ibv_destroy_srq(hub->srq);
clean_rcq:
	ibv_destroy_cq(hub->rcq);
clean_chan:
	ibv_destroy_comp_channel(hub->chan);
	return ret;
}

void rdmaq_verbs_hub_fini(struct rdmaq_verbs_hub *hub)
{
	ibv_destroy_srq(hub->srq);
	ibv_destroy_cq(hub->rcq);
	ibv_destroy_comp_channel(hub->chan);
	pthread_mutex_destroy(&hub->lock);
}

/* Caller holds the lock. */
static struct rdmaq_verbs_hub_client *hub_find(struct rdmaq_verbs_hub_client *list, uint32_t id)
{
	for (; list; list = list->next)
		if (list->id == id)
			return list;
	return NULL;
}

/* Caller holds the lock. */
static void hub_doorbell(struct rdmaq_verbs_hub *hub, uint32_t id)
{
	struct rdmaq_verbs_hub_client *ep = hub_find(hub->eps, id);

	/* None: an endpoint destroyed since, nothing to wake. */
	if (ep)
		ep->doorbell(ep);
}

/* Caller holds the lock.  A receive flushed or failed: its QP is broken. */
static void hub_recv_failed(struct rdmaq_verbs_hub *hub, uint32_t qp_num, enum ibv_wc_status status)
{
	struct rdmaq_verbs_hub_client *qp = hub_find(hub->qps, qp_num);
	char why[160];

	if (!qp)
		return;
	snprintf(why, sizeof(why), "queue pair %u to the peer failed: %s (wc status %d)", qp_num,
		 ibv_wc_status_str(status), status);
	qp->fail(qp, -EOWNERDEAD, why);
}

static int hub_drain(struct rdmaq_verbs_hub *hub)
{
	struct ibv_wc wc[32];
	uint32_t consumed = 0;
	int n, i;

	do {
		n = ibv_poll_cq(hub->rcq, 32, wc);
		if (n < 0)
			return rdmaq_set_err(-EIO, "ibv_poll_cq (receive CQ of %s) failed: %s",
					     hub->device, strerror(-rdmaq_verbs_err(n)));
		for (i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				hub_recv_failed(hub, wc[i].qp_num, wc[i].status);
				continue;
			}
			if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				RDMAQ_VSTAT_ADD(imm_received, 1);
				hub_doorbell(hub, ntohl(wc[i].imm_data));
			}
		}
		consumed += (uint32_t)n;
	} while (n == 32);
	return consumed ? hub_post_recvs(hub, consumed) : 0;
}

int rdmaq_verbs_hub_service(struct rdmaq_verbs_hub *hub, bool arm, bool trylock)
{
	int ret;

	if (trylock) {
		if (pthread_mutex_trylock(&hub->lock))
			return 0; /* somebody else is draining */
	} else {
		pthread_mutex_lock(&hub->lock);
	}
	ret = hub_drain(hub);
	if (!ret && arm && !hub->armed) {
		ret = ibv_req_notify_cq(hub->rcq, 0);
		if (ret) {
			ret = rdmaq_verbs_err(ret);
			ret = rdmaq_set_err(ret, "ibv_req_notify_cq (receive CQ of %s): %s",
					    hub->device, strerror(-ret));
		} else {
			hub->armed = true;
			/* Completions that landed before the arm raise no event. */
			ret = hub_drain(hub);
		}
	}
	pthread_mutex_unlock(&hub->lock);
	return ret;
}

/* Every QP fails: the device is gone. */
static void hub_fail_all(struct rdmaq_verbs_hub *hub, const char *what)
{
	struct rdmaq_verbs_hub_client *qp;
	char why[160];

	snprintf(why, sizeof(why), "RDMA device %s: %s", hub->device, what);
	pthread_mutex_lock(&hub->lock);
	for (qp = hub->qps; qp; qp = qp->next)
		qp->fail(qp, -EIO, why);
	pthread_mutex_unlock(&hub->lock);
}

/* The async fd was readable (O_NONBLOCK): take every pending event. */
void rdmaq_verbs_hub_async(struct rdmaq_verbs_hub *hub)
{
	struct ibv_async_event ev;
	struct rdmaq_verbs_hub_client *qp;
	char why[160];

	while (ibv_get_async_event(hub->ibctx, &ev) == 0) {
		switch (ev.event_type) {
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
		case IBV_EVENT_PATH_MIG_ERR:
			qp = ev.element.qp ? ev.element.qp->qp_context : NULL;
			if (qp) {
				snprintf(why, sizeof(why), "async event on QP %u: %s",
					 ev.element.qp->qp_num, ibv_event_type_str(ev.event_type));
				qp->fail(qp, -EIO, why);
			}
			break;
		case IBV_EVENT_DEVICE_FATAL:
			hub_fail_all(hub, ibv_event_type_str(ev.event_type));
			break;
		default:
			break;
		}
		ibv_ack_async_event(&ev);
	}
}

/* The completion channel fd was readable: take the event, re-arm, drain. */
int rdmaq_verbs_hub_event(struct rdmaq_verbs_hub *hub)
{
	struct ibv_cq *cq;
	void *cq_ctx;
	int ret;

	pthread_mutex_lock(&hub->lock);
	/* O_NONBLOCK: another blocked thread may have taken the event. */
	while (ibv_get_cq_event(hub->chan, &cq, &cq_ctx) == 0) {
		hub->unacked++;
		hub->armed = false;
		RDMAQ_VSTAT_ADD(cq_events, 1);
	}
	/* Acking takes a lock inside libibverbs: do it in batches. */
	if (hub->unacked >= 64) {
		ibv_ack_cq_events(hub->rcq, hub->unacked);
		hub->unacked = 0;
	}
	pthread_mutex_unlock(&hub->lock);
	ret = rdmaq_verbs_hub_service(hub, true, false);
	rdmaq_verbs_hub_async(hub);
	return ret;
}

void rdmaq_verbs_hub_add_ep(struct rdmaq_verbs_hub *hub, struct rdmaq_verbs_hub_client *ep)
{
	pthread_mutex_lock(&hub->lock);
	ep->id = ++hub->next_ep_id;
	ep->next = hub->eps;
	hub->eps = ep;
	pthread_mutex_unlock(&hub->lock);
}

void rdmaq_verbs_hub_add_qp(struct rdmaq_verbs_hub *hub, struct rdmaq_verbs_hub_client *qp)
{
	pthread_mutex_lock(&hub->lock);
	qp->next = hub->qps;
	hub->qps = qp;
	pthread_mutex_unlock(&hub->lock);
}

void rdmaq_verbs_hub_del(struct rdmaq_verbs_hub *hub, struct rdmaq_verbs_hub_client *c)
{
	struct rdmaq_verbs_hub_client **pp;

	pthread_mutex_lock(&hub->lock);
	for (pp = c->fail ? &hub->qps : &hub->eps; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	pthread_mutex_unlock(&hub->lock);
}
