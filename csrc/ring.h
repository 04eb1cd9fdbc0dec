/* SPDX-License-Identifier: MIT */
/*
 * The ring engine, shared by every transport: endpoints, framing, flow
 * control, message assembly.  The memory format is in format.h, waiting
 * in wait.h.
 *
 * Transports supply where records go and how peers are woken (the ops
 * tables below and struct rdmaq_wait_ops); everything else lives here.
 * A transport includes this header and finds all it calls.
 */
#ifndef RDMAQ_RING_H
#define RDMAQ_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cadence.h"
#include "container_of.h"
#include "error.h"
#include "format.h"
#include "rdmaq.h"
#include "wait.h"

struct rdmaq_writer;

struct rdmaq_writer_ops {
	/* Is every reader attached?  1 yes, 0 not yet, <0 error. */
	int (*poll_ready)(struct rdmaq_writer *w);
	/* Optional: wait_ready timed out; return -ETIMEDOUT naming the missing readers. */
	int (*ready_timeout)(struct rdmaq_writer *w);
	/* Connect to the attached readers and tell them traffic may flow. */
	int (*connect)(struct rdmaq_writer *w);
	/* Frame record `seq` into every open reader's slot. */
	int (*emit)(struct rdmaq_writer *w, uint64_t seq, const struct rdmaq_rec_hdr *hdr,
		    const struct rdmaq_iovec *iov, int iovcnt, size_t iov_off);
	/* Make emitted records visible; wake sleeping readers if `doorbell`. */
	int (*flush)(struct rdmaq_writer *w, bool doorbell);
	/* Store closed_seq in every reader ring it can reach and wake them (also
	 * before ready: readers not connected yet must learn it some other way). */
	int (*mark_closed)(struct rdmaq_writer *w, uint64_t closed_seq);
	/* Optional: short of credit, fetch the readers' cursors without their
	 * help (verbs: RDMA READ of rdmaq_ring_ctrl.consumed). */
	int (*refresh_credit)(struct rdmaq_writer *w);
	/* Wake a thread blocked in wait_ops.block (after cancel). */
	void (*interrupt)(struct rdmaq_writer *w);
	/* Has connected reader i's process ended (or become unreachable)?  1 yes, 0 no. */
	int (*reader_dead)(struct rdmaq_writer *w, uint32_t i);
	void (*destroy)(struct rdmaq_writer *w);
};

/* A put interrupted by a signal, resumed by rdmaq_writer_resume(). */
struct rdmaq_put_state {
	bool active;
	uint64_t total; /* message bytes */
	uint64_t nrec;	/* records it takes */
	uint64_t k;	/* records emitted so far */
	uint64_t off;	/* message bytes emitted so far */
	int64_t stamp_ns;
};

struct rdmaq_writer {
	const struct rdmaq_writer_ops *ops;
	struct rdmaq_waiter waiter;
	struct rdmaq_config cfg;
	uint64_t key;		      /* trailer key */
	uint64_t next_seq;	      /* next slot sequence to emit */
	struct rdmaq_credit *credits; /* writer memory, one per reader */
	uint32_t payload;	      /* payload bytes per slot */
	bool ready;
	bool closed;
	bool abort_pending; /* a streamed message was cut short: its ABORT record is owed */
	uint32_t forks;	    /* rdmaq_fork_count() when created (see rdmaq_forked) */
	/* Readers dropped after their process ended: in writer memory, which no
	 * peer can write, so a late credit write cannot bring one back. */
	uint64_t dropped[RDMAQ_MAX_READERS / 64];
	struct rdmaq_put_state put;
	struct rdmaq_trace trace;
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
	uint8_t *ring;	  /* ctrl + slots */
	uint64_t *cursor; /* if set, next_seq is stored here at every record */
	uint32_t payload;
	uint64_t next_seq;     /* next record to consume */
	uint64_t credited;     /* last next_seq published */
	uint32_t credit_batch; /* publish every this many records (and before blocking) */
	uint64_t msg_len;      /* message in progress (peeked) */
	uint64_t msg_off;      /* bytes of it already copied */
	bool in_message;
	bool closed;
	bool planned;	/* `window` was napped (or spun) to by rdmaq_reader_nap */
	uint32_t forks; /* rdmaq_fork_count() when created (see rdmaq_forked) */
	struct rdmaq_cad_window window;
	struct rdmaq_cadence cadence;
	struct rdmaq_trace trace;
	struct rdmaq_stats stats;
};

/* Shared set-up helpers for transports. */
int rdmaq_config_check(const struct rdmaq_config *cfg);
/* A random odd word for trailer keys, names and ids: not a secret, only unlikely to repeat. */
uint64_t rdmaq_random_u64(void);
void rdmaq_writer_init(struct rdmaq_writer *w, const struct rdmaq_writer_ops *ops,
		       const struct rdmaq_wait_ops *wops, const struct rdmaq_config *cfg,
		       uint64_t key, struct rdmaq_credit *credits);
void rdmaq_reader_init(struct rdmaq_reader *r, const struct rdmaq_reader_ops *ops,
		       const struct rdmaq_wait_ops *wops, const struct rdmaq_config *cfg,
		       uint32_t index, uint64_t key, uint8_t *ring);

/*
 * How many fork()s made this process, counted in each child once the first
 * endpoint asked for it (rdmaq_fork_count).  An endpoint created under
 * another count is a forked child's copy of its parent's: the queue is the
 * parent's, and the child must not touch it.
 */
extern uint32_t rdmaq_forks;
uint32_t rdmaq_fork_count(void);

static inline bool rdmaq_forked(uint32_t forks)
{
	return forks != __atomic_load_n(&rdmaq_forks, __ATOMIC_RELAXED);
}

/* Reader i was dropped (rdmaq_writer_drop_reader): never waited for or written to again. */
static inline bool rdmaq_writer_dropped(const struct rdmaq_writer *w, uint32_t i)
{
	return (w->dropped[i / 64] >> (i % 64)) & 1;
}

/*
 * Frame one record at `slot` (a slot in some ring, local or staging):
 * header fields, payload gathered from iov at iov_off, trailer, and the
 * header's seq last with release semantics.  Returns the number of bytes
 * from the slot start to the end of the trailer.
 */
size_t rdmaq_rec_frame(uint8_t *slot, uint64_t key, const struct rdmaq_rec_hdr *hdr,
		       const struct rdmaq_iovec *iov, int iovcnt, size_t iov_off);

static inline uint8_t *rdmaq_ring_slot(uint8_t *ring, const struct rdmaq_config *cfg, uint64_t seq)
{
	return ring + RDMAQ_RING_DATA_OFF + (size_t)(seq % cfg->slots) * cfg->slot_bytes;
}

#endif
