/* SPDX-License-Identifier: MIT */
/*
 * rdmaq verbs transport: the ring protocol over RDMA WRITE (RC queue pairs).
 *
 * The data path is C; the bootstrap (who talks to whom, exchanging the
 * numbers below) is done by the Python layer over pyzmq, which calls these
 * functions on each side.  Every function returns 0 or a negative errno
 * with rdmaq_errmsg() set, like rdmaq.h.
 *
 * Set-up, writer process W and reader process R:
 *   both: rdmaq_verbs_ctx_open()            device context, cached per process
 *   W:    rdmaq_verbs_writer_create()       credit array + staging ring
 *   R:    rdmaq_verbs_reader_create()       ring, registered for remote write
 *   R:    rdmaq_verbs_pool_find(W's id)     per-CPU QP pool to W, if any; else
 *         rdmaq_verbs_pool_prepare()        new QPs in INIT, numbers to send
 *   W:    rdmaq_verbs_pool_accept()         (new pool) QPs connected to R's
 *   R:    rdmaq_verbs_pool_complete()       (new pool) R's QPs connected
 *   R:    rdmaq_verbs_reader_connect()      credit target, liveness fd
 *   W:    rdmaq_verbs_writer_attach()       ring target, liveness fd
 *   then rdmaq_writer_wait_ready() / rdmaq_reader_wait_ready() as usual.
 *
 * This header is fed to cffi's cdef after its preprocessor lines are
 * dropped, so keep it to plain declarations.
 */
#ifndef RDMAQ_VERBS_H
#define RDMAQ_VERBS_H

#include <stdint.h>

#include "rdmaq.h"

struct rdmaq_verbs_ctx;

/* The local port, as the peer needs it to address us. */
struct rdmaq_verbs_port {
	char device[64];
	uint32_t port;
	uint32_t gid_index;
	uint8_t gid[16];
	uint32_t lid;
	uint32_t link_layer;   /* IBV_LINK_LAYER_*: 1 InfiniBand, 2 Ethernet */
	uint32_t mtu;	       /* enum ibv_mtu of the active MTU */
	uint32_t max_inline;   /* inline bytes our QPs accept */
	uint32_t qps_per_peer; /* per-CPU pool size */
};

/* One queue pair of a pool, as the peer connects to it. */
struct rdmaq_verbs_qp_info {
	uint32_t qpn;
	uint32_t psn;
};

/*
 * One endpoint's exposed memory and its wake-up id (immediate data).
 * Reader: its ring.  Writer: the one reader's credit slot (an MR of its
 * own, so a reader can write nothing else of the writer's).
 */
struct rdmaq_verbs_ep_info {
	uint32_t ep_id;
	uint32_t rkey;
	uint64_t addr;
	uint64_t key; /* writer: trailer key; reader: unused */
};

/* Process-wide counters of the verbs transport. */
struct rdmaq_verbs_stats {
	uint64_t contexts; /* devices opened */
	uint64_t pools_created;
	uint64_t pools_reused; /* queue set-ups that found a connected pool */
	uint64_t qps_created;
	uint64_t qps_reused; /* QPs handed to a queue without creating them */
	uint64_t qps_live;
	uint64_t cq_events;    /* completion-channel events taken */
	uint64_t imm_received; /* WRITE_WITH_IMM doorbells/credits received */
	uint64_t graves;       /* closed endpoints' memory still registered */
};

/*
 * Open (or return the cached) context for a device.  device NULL or "" =
 * the first device with an ACTIVE port (preferring one whose RoCE address
 * lives in this network namespace), port 0 = first active port, gid_index
 * < 0 = the IPv4-mapped RoCEv2 GID (else index 0).
 */
int rdmaq_verbs_ctx_open(struct rdmaq_verbs_ctx **out, const char *device, uint32_t port,
			 int gid_index);
int rdmaq_verbs_ctx_port(struct rdmaq_verbs_ctx *ctx, struct rdmaq_verbs_port *out);

/* This process's identity (changes after fork), 16 random bytes. */
void rdmaq_verbs_process_id(uint8_t *out);

/*
 * Per-CPU QP pools, one per peer process, shared by every queue between
 * the two processes.
 *
 * pool_find: 0 and *pool_id when a connected pool to `peer` exists (for
 * our own id: the loopback pool, created on demand), -ENOENT when none,
 * -EINPROGRESS while another thread is creating one (retry).
 */
int rdmaq_verbs_pool_find(struct rdmaq_verbs_ctx *ctx, const uint8_t *peer, uint64_t *pool_id);
/* True (1) when the pool exists, is usable and leads to process `peer`, else 0. */
int rdmaq_verbs_pool_ok(struct rdmaq_verbs_ctx *ctx, const uint8_t *peer, uint64_t pool_id);
/* Initiator: create *n (<= max) QPs in INIT; the pool is pending. */
int rdmaq_verbs_pool_prepare(struct rdmaq_verbs_ctx *ctx, const uint8_t *peer, uint64_t *pool_id,
			     struct rdmaq_verbs_qp_info *out, uint32_t max, uint32_t *n);
/* Responder: create n QPs connected to the initiator's; fills out[n]. */
int rdmaq_verbs_pool_accept(struct rdmaq_verbs_ctx *ctx, const uint8_t *peer, uint64_t pool_id,
			    const struct rdmaq_verbs_port *remote,
			    const struct rdmaq_verbs_qp_info *rqps, uint32_t n,
			    struct rdmaq_verbs_qp_info *out);
/* Initiator: connect the pending pool to the responder's QPs. */
int rdmaq_verbs_pool_complete(struct rdmaq_verbs_ctx *ctx, uint64_t pool_id,
			      const struct rdmaq_verbs_port *remote,
			      const struct rdmaq_verbs_qp_info *rqps, uint32_t n);
/* Give up on a pending pool, or retire a connected one the peer does not know. */
void rdmaq_verbs_pool_abort(struct rdmaq_verbs_ctx *ctx, uint64_t pool_id);

/* Writer: ring protocol endpoint whose readers attach over verbs. */
int rdmaq_verbs_writer_create(struct rdmaq_writer **out, struct rdmaq_verbs_ctx *ctx,
			      const struct rdmaq_config *cfg);
/* What reader `index` needs: its own credit slot (addr, rkey), ep_id, trailer key. */
int rdmaq_verbs_writer_info(struct rdmaq_writer *w, uint32_t index, struct rdmaq_verbs_ep_info *out);
/*
 * Reader `index` is connected: its ring, the pool to its process, and a
 * liveness socket (the writer now owns the fd; EOF = the reader is gone).
 * `desc` names the reader in error messages ("pid 42 on host x").
 */
int rdmaq_verbs_writer_attach(struct rdmaq_writer *w, uint32_t index, uint64_t pool_id,
			      const struct rdmaq_verbs_ep_info *reader, int live_fd,
			      const char *desc);
/* Number of readers attached so far. */
uint32_t rdmaq_verbs_writer_attached(struct rdmaq_writer *w);

/* Reader: cfg comes from the handle; spin_ns is this reader's own. */
int rdmaq_verbs_reader_create(struct rdmaq_reader **out, struct rdmaq_verbs_ctx *ctx,
			      const struct rdmaq_config *cfg, uint32_t index);
void rdmaq_verbs_reader_info(struct rdmaq_reader *r, struct rdmaq_verbs_ep_info *out);
int rdmaq_verbs_reader_connect(struct rdmaq_reader *r, uint64_t pool_id,
			       const struct rdmaq_verbs_ep_info *writer, int live_fd,
			       const char *desc);

void rdmaq_verbs_stats(struct rdmaq_verbs_stats *out);

/* 1 when the peer's end of a liveness socket has closed (or fd < 0), else 0. */
int rdmaq_verbs_live_gone(int fd);

#endif
