/* SPDX-License-Identifier: MIT */
/*
 * The ring's memory format, shared by the writer, every reader and (on
 * verbs) the NIC.  Anything here changes only with RDMAQ_VERSION.
 *
 * Each message is framed into one or more slots of a ring of `slots`
 * fixed-size slots, one record per slot.  Slot sequence numbers start at
 * 1 and never repeat, so a slot whose header and trailer both carry the
 * expected sequence number holds a whole record:
 *
 *   +--------------------------+----------------+-------------------+
 *   | rdmaq_rec_hdr (seq, ...) | payload (len)  | trailer: seq^key  |
 *   +--------------------------+----------------+-------------------+
 *
 * rdmaq_rec_frame (ring.c) stores the header's fields, the payload and the
 * trailer, then the header's seq with release semantics; a reader loads seq
 * with acquire (rdmaq_reader_has_record), so on shm a matching seq alone
 * means the record is whole.  On verbs the record travels in one RDMA WRITE
 * whose last bytes, the trailer, land last: a reader that sees the expected
 * seq waits for the trailer too.  XOR with a per-queue random key means
 * stale payload bytes of an earlier lap can never pass for a trailer.
 *
 * Credit flows back from each reader into its entry of the writer's
 * credit array: "next sequence I expect".  The writer may emit sequence s
 * only while s - min(credit) < slots.
 *
 * The shm transport embeds this format in its segment (shm_format.h);
 * verbs carries it under its bootstrap's protocol version.  Both check
 * only their own version: a new RDMAQ_VERSION bumps theirs too
 * (docs/format.md).
 */
#ifndef RDMAQ_FORMAT_H
#define RDMAQ_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define RDMAQ_MAGIC	    0x7164726dU /* "mrdq" */
#define RDMAQ_VERSION	    2U
#define RDMAQ_CACHELINE	    64U
#define RDMAQ_REC_FIRST	    0x1U
#define RDMAQ_REC_LAST	    0x2U
#define RDMAQ_REC_ABORT	    0x4U       /* discard the message in progress */
#define RDMAQ_CREDIT_CLOSED UINT64_MAX /* reader left for good */

/*
 * A struct another process or the NIC reads: its size, alignment and
 * field offsets are the format, checked at compile time.
 */
#define RDMAQ_ASSERT_LAYOUT(type, size, align) \
	_Static_assert(sizeof(type) == (size) && _Alignof(type) == (align), #type " layout")
#define RDMAQ_ASSERT_OFFSET(type, member, off) \
	_Static_assert(offsetof(type, member) == (off), #type "." #member " offset")

struct rdmaq_rec_hdr {
	uint64_t seq;	  /* stored last, with release (shm): valid iff == expected */
	uint64_t msg_len; /* whole message, repeated in every record */
	uint32_t len;	  /* payload bytes in this record */
	uint32_t flags;	  /* RDMAQ_REC_FIRST / _LAST / _ABORT */
	int64_t stamp_ns; /* writer's CLOCK_MONOTONIC when the message was published */
};

#define RDMAQ_REC_OVERHEAD (sizeof(struct rdmaq_rec_hdr) + sizeof(uint64_t))

/* Head of every ring.  Writer-owned and reader-owned words sit on separate cache lines. */
struct rdmaq_ring_ctrl {
	/* written by the writer */
	uint32_t magic;
	uint32_t ready;	     /* writer connected: traffic may flow */
	uint64_t closed_seq; /* 0 while open, else the first seq never sent */
	uint32_t doorbell;   /* shm: futex word readers sleep on */
	uint8_t pad0[RDMAQ_CACHELINE - 20];
	/* written by the (one) reader of a per-reader ring */
	/* verbs: next_seq, stored at every record; the writer reads it when short of credit */
	uint64_t consumed;
	uint8_t pad1[RDMAQ_CACHELINE - 8];
	uint8_t pad2[2 * RDMAQ_CACHELINE];
};

#define RDMAQ_RING_DATA_OFF sizeof(struct rdmaq_ring_ctrl)

/* One reader's entry in the writer's credit array, in writer memory. */
struct rdmaq_credit {
	uint64_t next_seq; /* reader consumed everything below this */
	uint32_t sleeping; /* shm: reader is (about to be) blocked on the doorbell */
	uint8_t pad[RDMAQ_CACHELINE - 12];
};

RDMAQ_ASSERT_LAYOUT(struct rdmaq_rec_hdr, 32, 8);
RDMAQ_ASSERT_OFFSET(struct rdmaq_rec_hdr, seq, 0);
RDMAQ_ASSERT_OFFSET(struct rdmaq_rec_hdr, msg_len, 8);
RDMAQ_ASSERT_OFFSET(struct rdmaq_rec_hdr, len, 16);
RDMAQ_ASSERT_OFFSET(struct rdmaq_rec_hdr, flags, 20);
RDMAQ_ASSERT_OFFSET(struct rdmaq_rec_hdr, stamp_ns, 24);
RDMAQ_ASSERT_LAYOUT(struct rdmaq_ring_ctrl, 4 * RDMAQ_CACHELINE, 8);
RDMAQ_ASSERT_OFFSET(struct rdmaq_ring_ctrl, magic, 0);
RDMAQ_ASSERT_OFFSET(struct rdmaq_ring_ctrl, ready, 4);
RDMAQ_ASSERT_OFFSET(struct rdmaq_ring_ctrl, closed_seq, 8);
RDMAQ_ASSERT_OFFSET(struct rdmaq_ring_ctrl, doorbell, 16);
RDMAQ_ASSERT_OFFSET(struct rdmaq_ring_ctrl, consumed, RDMAQ_CACHELINE);
RDMAQ_ASSERT_LAYOUT(struct rdmaq_credit, RDMAQ_CACHELINE, 8);
RDMAQ_ASSERT_OFFSET(struct rdmaq_credit, next_seq, 0);
RDMAQ_ASSERT_OFFSET(struct rdmaq_credit, sleeping, 8);

static inline uint64_t rdmaq_ring_bytes(uint32_t slot_bytes, uint32_t slots)
{
	return RDMAQ_RING_DATA_OFF + (uint64_t)slot_bytes * slots;
}

static inline uint64_t rdmaq_rec_trailer_off(uint32_t len)
{
	return sizeof(struct rdmaq_rec_hdr) + (((uint64_t)len + 7) & ~(uint64_t)7);
}

#endif
