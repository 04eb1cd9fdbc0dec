/* SPDX-License-Identifier: MIT */
/*
 * rdmaq public C API: a one-writer / N-reader message ring.
 *
 * Every function that can fail returns 0 or a negative errno; the calling
 * thread's rdmaq_errmsg() then says what failed.  Timeouts are in
 * nanoseconds, negative meaning "wait forever".
 *
 * This header is fed to cffi's cdef after its preprocessor lines are
 * dropped, so keep it to plain declarations.
 */
#ifndef RDMAQ_H
#define RDMAQ_H

#include <stddef.h>
#include <stdint.h>

struct rdmaq_writer;
struct rdmaq_reader;

struct rdmaq_config {
	uint32_t n_readers;
	uint32_t slot_bytes;	/* bytes per slot, header and trailer included */
	uint32_t slots;		/* slots per reader ring */
	uint64_t max_message;	/* largest message put() accepts */
	uint32_t spin_ns;	/* longest busy-wait before blocking */
};

struct rdmaq_stats {
	uint64_t messages;
	uint64_t bytes;
	uint64_t spins;		/* waits that ended while spinning */
	uint64_t sleeps;	/* waits that blocked in the kernel */
	uint64_t wakeups;	/* wake-ups this endpoint sent to peers */
	uint64_t credits;	/* credit updates sent (reader) or seen stalled on (writer) */
};

struct rdmaq_iovec {
	const void *base;
	size_t len;
};

/* Detail of the calling thread's last error. */
const char *rdmaq_errmsg(void);

/* Payload bytes one slot carries once its header and trailer are paid. */
uint32_t rdmaq_slot_payload(uint32_t slot_bytes);

/* shm transport: rings in /dev/shm, futex wake-ups. */
int rdmaq_shm_writer_create(struct rdmaq_writer **out, const char *name,
			    const struct rdmaq_config *cfg);
int rdmaq_shm_reader_attach(struct rdmaq_reader **out, const char *name,
			    uint32_t index, uint32_t spin_ns);

/* Endpoint operations, the same for every transport. */
int rdmaq_writer_wait_ready(struct rdmaq_writer *w, int64_t timeout_ns);
int rdmaq_writer_put(struct rdmaq_writer *w, const struct rdmaq_iovec *iov,
		     int iovcnt, int64_t timeout_ns);
int rdmaq_writer_close(struct rdmaq_writer *w);
void rdmaq_writer_cancel(struct rdmaq_writer *w);
void rdmaq_writer_destroy(struct rdmaq_writer *w);
void rdmaq_writer_stats(const struct rdmaq_writer *w, struct rdmaq_stats *out);

int rdmaq_reader_wait_ready(struct rdmaq_reader *r, int64_t timeout_ns);
int rdmaq_reader_peek(struct rdmaq_reader *r, uint64_t *msg_len,
		      int64_t timeout_ns);
int rdmaq_reader_read(struct rdmaq_reader *r, void *buf, uint64_t len,
		      int64_t timeout_ns);
int rdmaq_reader_close(struct rdmaq_reader *r);
void rdmaq_reader_cancel(struct rdmaq_reader *r);
void rdmaq_reader_destroy(struct rdmaq_reader *r);
void rdmaq_reader_stats(const struct rdmaq_reader *r, struct rdmaq_stats *out);

#endif
