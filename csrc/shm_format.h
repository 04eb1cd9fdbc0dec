/* SPDX-License-Identifier: MIT */
/*
 * The shm transport's segment in /dev/shm: what the writer and every local
 * reader map and share.  Anything here changes only with RDMAQ_SHM_VERSION
 * (docs/format.md).
 *
 *   +-----+-------+-----------+-----------+-----------+------------------+
 *   | hdr | wwait | attach[n] | credit[n] | ring ctrl | slots            |
 *   +-----+-------+-----------+-----------+-----------+------------------+
 *     64     64     64 each     64 each     format.h    slots x slot_bytes
 *
 * The writer fills hdr, then stores its magic with release; a reader loads
 * the magic with acquire, then copies hdr once and computes every offset
 * from its own copy, checked against the file's size (shm.c).  hdr.version
 * is RDMAQ_SHM_VERSION: the segment's layout and the ring format it embeds
 * (format.h) change together with it.  wwait holds the writer's futex,
 * attach[i] reader i's claim on its index, credit[i] its struct
 * rdmaq_credit; one broadcast ring follows, which every reader reads.
 * Every part is a whole number of cache lines, so each starts on one.
 */
#ifndef RDMAQ_SHM_FORMAT_H
#define RDMAQ_SHM_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"

#define RDMAQ_SHM_VERSION 2U /* 2 as RDMAQ_VERSION was, which the header carried before */

/* A new ring format is a new segment: bump RDMAQ_SHM_VERSION, then this. */
_Static_assert(RDMAQ_VERSION == 2, "the ring format changed: bump RDMAQ_SHM_VERSION with it");

/* The segment header, written once by the writer, magic last. */
struct rdmaq_shm_hdr {
	uint32_t magic;	  /* RDMAQ_MAGIC */
	uint32_t version; /* RDMAQ_SHM_VERSION */
	uint32_t n_readers;
	uint32_t slot_bytes;
	uint32_t slots;
	int32_t writer_pid;
	uint64_t max_message;
	uint64_t key;	       /* the trailer key */
	uint64_t seg_bytes;    /* the whole segment, as rdmaq_shm_seg_bytes says */
	uint64_t writer_start; /* the writer's start time, against pid reuse */
	uint8_t pad[RDMAQ_CACHELINE - 56];
};

/* Where the writer sleeps, waiting for attaches or credit. */
struct rdmaq_shm_wwait {
	uint32_t doorbell; /* futex word, bumped by readers */
	uint32_t sleeping; /* set by the writer */
	uint8_t pad[RDMAQ_CACHELINE - 8];
};

/* attach[i].state: reader i's index is free, claimed (compare-and-swap), attached. */
enum { RDMAQ_SHM_ATTACH_FREE = 0, RDMAQ_SHM_ATTACH_CLAIMED = 1, RDMAQ_SHM_ATTACH_DONE = 2 };

struct rdmaq_shm_attach {
	uint32_t state;
	int32_t pid; /* the reader's, stored before state becomes DONE */
	uint8_t pad[RDMAQ_CACHELINE - 8];
};

RDMAQ_ASSERT_LAYOUT(struct rdmaq_shm_hdr, RDMAQ_CACHELINE, 8);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_hdr, magic, 0);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_hdr, version, 4);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_hdr, n_readers, 8);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_hdr, slot_bytes, 12);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_hdr, slots, 16);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_hdr, writer_pid, 20);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_hdr, max_message, 24);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_hdr, key, 32);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_hdr, seg_bytes, 40);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_hdr, writer_start, 48);
RDMAQ_ASSERT_LAYOUT(struct rdmaq_shm_wwait, RDMAQ_CACHELINE, 4);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_wwait, doorbell, 0);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_wwait, sleeping, 4);
RDMAQ_ASSERT_LAYOUT(struct rdmaq_shm_attach, RDMAQ_CACHELINE, 4);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_attach, state, 0);
RDMAQ_ASSERT_OFFSET(struct rdmaq_shm_attach, pid, 4);

/* The parts of a mapped segment. */
struct rdmaq_shm_layout {
	struct rdmaq_shm_hdr *hdr;
	struct rdmaq_shm_wwait *wwait;
	struct rdmaq_shm_attach *attach;
	struct rdmaq_credit *credits;
	uint8_t *ring; /* struct rdmaq_ring_ctrl, then the slots */
};

static inline uint64_t rdmaq_shm_seg_bytes(uint32_t n_readers, uint32_t slot_bytes, uint32_t slots)
{
	return sizeof(struct rdmaq_shm_hdr) + sizeof(struct rdmaq_shm_wwait) +
	       (uint64_t)n_readers *
		       (sizeof(struct rdmaq_shm_attach) + sizeof(struct rdmaq_credit)) +
	       rdmaq_ring_bytes(slot_bytes, slots);
}

/* Offsets come from the caller's own copy of n_readers, never from the segment. */
static inline struct rdmaq_shm_layout rdmaq_shm_layout(void *base, uint32_t n_readers)
{
	struct rdmaq_shm_layout l = { .hdr = base };

	l.wwait = (struct rdmaq_shm_wwait *)(l.hdr + 1);
	l.attach = (struct rdmaq_shm_attach *)(l.wwait + 1);
	l.credits = (struct rdmaq_credit *)(l.attach + n_readers);
	l.ring = (uint8_t *)(l.credits + n_readers);
	return l;
}

#endif
