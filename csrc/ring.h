/* SPDX-License-Identifier: MIT */
/*
 * The ring protocol, shared by every transport.
 *
 * Layout (FaRM-style): each reader owns one ring of `slots` fixed-size
 * slots.  The writer appends every message to every reader's ring; a
 * message longer than one slot spans consecutive slots, one record per
 * slot.  Slot sequence numbers start at 1 and never repeat, so a slot whose
 * header and trailer both carry the expected sequence number holds a whole
 * record:
 *
 *   +--------------------------+----------------+-------------------+
 *   | rdmaq_rec_hdr (seq, ...) | payload (len)  | trailer: seq^key  |
 *   +--------------------------+----------------+-------------------+
 *
 * The trailer lands last (it is stored last on shm and is the last byte of
 * the RDMA WRITE on verbs).  XOR with a per-queue random key means stale
 * payload bytes of an earlier lap can never pass for a trailer.
 *
 * Credit flows back lazily: each reader publishes "next sequence I expect"
 * into its slot of the writer's credit array, at most every slots/4 records
 * and always before it blocks.  The writer may emit sequence s only while
 * s - min(credit) < slots.
 *
 * Transports supply where records go and how peers are woken; everything
 * else (framing, flow control, adaptive waiting, stats) lives here.
 */
#ifndef RDMAQ_RING_H
#define RDMAQ_RING_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdmaq.h"

#define RDMAQ_MAGIC		0x7164726dU	/* "mrdq" */
#define RDMAQ_VERSION		1U
#define RDMAQ_CACHELINE		64U
#define RDMAQ_REC_FIRST		0x1U
#define RDMAQ_REC_LAST		0x2U
#define RDMAQ_REC_ABORT		0x4U	/* discard the message in progress */
#define RDMAQ_CREDIT_CLOSED	UINT64_MAX	/* reader left for good */
#define RDMAQ_MIN_SLOT_BYTES	128U
#define RDMAQ_MAX_READERS	256U
#define RDMAQ_DEFAULT_SPIN_NS	50000U
#define RDMAQ_PEER_CHECK_NS	100000000LL	/* liveness check period when blocked */

struct rdmaq_rec_hdr {
	uint64_t seq;		/* stored last: valid iff == expected */
	uint64_t msg_len;	/* whole message, repeated in every record */
	uint32_t len;		/* payload bytes in this record */
	uint32_t flags;		/* RDMAQ_REC_FIRST / RDMAQ_REC_LAST */
	uint64_t reserved;
};

#define RDMAQ_REC_OVERHEAD	(sizeof(struct rdmaq_rec_hdr) + sizeof(uint64_t))

/*
 * Head of every reader ring, in reader memory.  Writer-owned and
 * reader-owned words sit on separate cache lines.
 */
struct rdmaq_ring_ctrl {
	/* written by the writer */
	uint32_t magic;
	uint32_t ready;		/* writer connected: traffic may flow */
	uint64_t closed_seq;	/* 0 while open, else the first seq never sent */
	uint32_t doorbell;	/* shm: futex word the reader sleeps on */
	uint8_t pad0[RDMAQ_CACHELINE - 20];
	/* written by the reader */
	uint32_t sleeping;	/* shm: reader is (about to be) blocked */
	uint8_t pad1[RDMAQ_CACHELINE - 4];
	uint8_t pad2[2 * RDMAQ_CACHELINE];
};

#define RDMAQ_RING_DATA_OFF	sizeof(struct rdmaq_ring_ctrl)

/* One reader's entry in the writer's credit array, in writer memory. */
struct rdmaq_credit {
	uint64_t next_seq;	/* reader consumed everything below this */
	uint8_t pad[RDMAQ_CACHELINE - 8];
};

static inline size_t rdmaq_ring_bytes(uint32_t slot_bytes, uint32_t slots)
{
	return RDMAQ_RING_DATA_OFF + (size_t)slot_bytes * slots;
}

/* ---- waiting ---------------------------------------------------------- */

/*
 * How an endpoint blocks.  prepare() announces the sleep (so peers know to
 * wake us), the caller re-checks its condition, then block() sleeps until a
 * wake-up, the timeout or an interrupt; finish() retracts the announcement.
 * check_peer() reports a dead peer as -EOWNERDEAD with rdmaq_errmsg() set.
 */
struct rdmaq_wait_ops {
	int (*prepare)(void *ep);
	int (*block)(void *ep, int64_t timeout_ns);
	void (*finish)(void *ep);
	int (*check_peer)(void *ep);
};

struct rdmaq_waiter {
	const struct rdmaq_wait_ops *ops;
	void *ep;
	/* Runs once before the first block of a wait (a reader returns credit). */
	int (*before_block)(void *ep);
	uint32_t spin_max_ns;
	uint32_t spin_ns;	/* adaptive budget, in [spin_min, spin_max] */
	int cancelled;		/* set by another thread: fail with -ECANCELED */
	struct rdmaq_stats *stats;
};

/*
 * Returns 1 when the condition holds, 0 to keep waiting, or a negative
 * errno to stop.
 */
typedef int (*rdmaq_cond_fn)(void *arg);

int rdmaq_wait(struct rdmaq_waiter *wt, rdmaq_cond_fn cond, void *arg,
	       int64_t deadline_ns);
int64_t rdmaq_now_ns(void);
int64_t rdmaq_deadline(int64_t timeout_ns);

/* ---- endpoints ---------------------------------------------------------- */

struct rdmaq_writer;

struct rdmaq_writer_ops {
	/* Is every reader attached?  1 yes, 0 not yet, <0 error. */
	int (*poll_ready)(struct rdmaq_writer *w);
	/* Optional: wait_ready timed out; return -ETIMEDOUT naming the missing readers. */
	int (*ready_timeout)(struct rdmaq_writer *w);
	/* Connect to the attached readers and tell them traffic may flow. */
	int (*connect)(struct rdmaq_writer *w);
	/* Frame record `seq` into every open reader's slot. */
	int (*emit)(struct rdmaq_writer *w, uint64_t seq,
		    const struct rdmaq_rec_hdr *hdr, const struct rdmaq_iovec *iov,
		    int iovcnt, size_t iov_off);
	/* Make emitted records visible; wake sleeping readers if `doorbell`. */
	int (*flush)(struct rdmaq_writer *w, bool doorbell);
	/* Store closed_seq in every reader ring it can reach and wake them (also
	 * before ready: readers not connected yet must learn it some other way). */
	int (*mark_closed)(struct rdmaq_writer *w, uint64_t closed_seq);
	/* Wake a thread blocked in wait_ops.block (after cancel). */
	void (*interrupt)(struct rdmaq_writer *w);
	void (*destroy)(struct rdmaq_writer *w);
};

struct rdmaq_writer {
	const struct rdmaq_writer_ops *ops;
	struct rdmaq_waiter waiter;
	struct rdmaq_config cfg;
	uint64_t key;			/* trailer key */
	uint64_t next_seq;		/* next slot sequence to emit */
	struct rdmaq_credit *credits;	/* writer memory, one per reader */
	uint32_t payload;		/* payload bytes per slot */
	bool ready;
	bool closed;
	bool abort_pending;		/* a streamed message was cut short */
	struct rdmaq_stats stats;
};

struct rdmaq_reader;

struct rdmaq_reader_ops {
	/* Publish next_seq into the writer's credit array. */
	int (*credit)(struct rdmaq_reader *r, uint64_t next_seq);
	void (*interrupt)(struct rdmaq_reader *r);
	void (*destroy)(struct rdmaq_reader *r);
};

struct rdmaq_reader {
	const struct rdmaq_reader_ops *ops;
	struct rdmaq_waiter waiter;
	struct rdmaq_config cfg;
	uint32_t index;
	uint64_t key;
	uint8_t *ring;			/* reader memory: ctrl + slots */
	uint32_t payload;
	uint64_t next_seq;		/* next record to consume */
	uint64_t credited;		/* last next_seq published */
	uint32_t credit_batch;
	uint64_t msg_len;		/* message in progress (peeked) */
	uint64_t msg_off;		/* bytes of it already copied */
	bool in_message;
	bool closed;
	struct rdmaq_stats stats;
};

/* Shared set-up helpers for transports. */
int rdmaq_config_check(const struct rdmaq_config *cfg);
void rdmaq_writer_init(struct rdmaq_writer *w, const struct rdmaq_writer_ops *ops,
		       const struct rdmaq_wait_ops *wops,
		       const struct rdmaq_config *cfg, uint64_t key,
		       struct rdmaq_credit *credits);
void rdmaq_reader_init(struct rdmaq_reader *r, const struct rdmaq_reader_ops *ops,
		       const struct rdmaq_wait_ops *wops,
		       const struct rdmaq_config *cfg, uint32_t index, uint64_t key,
		       uint8_t *ring);

/*
 * Frame one record at `slot` (a slot in some ring, local or staging):
 * header fields, payload gathered from iov at iov_off, trailer, and the
 * header's seq last with release semantics.  Returns the number of bytes
 * from the slot start to the end of the trailer.
 */
size_t rdmaq_rec_frame(uint8_t *slot, uint64_t key, const struct rdmaq_rec_hdr *hdr,
		       const struct rdmaq_iovec *iov, int iovcnt, size_t iov_off);

static inline size_t rdmaq_rec_trailer_off(uint32_t len)
{
	return sizeof(struct rdmaq_rec_hdr) + (((size_t)len + 7) & ~(size_t)7);
}

static inline uint8_t *rdmaq_ring_slot(uint8_t *ring, const struct rdmaq_config *cfg,
				       uint64_t seq)
{
	return ring + RDMAQ_RING_DATA_OFF + (size_t)(seq % cfg->slots) * cfg->slot_bytes;
}

/* Error reporting: negative errno plus a thread-local message. */
int rdmaq_set_err(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t rdmaq_random_u64(void);

#endif
