/* SPDX-License-Identifier: MIT */
/*
 * rdmaq public C API: a one-writer / N-reader message ring.
 *
 * This header holds what every transport shares: the configuration, the
 * statistics and the endpoint operations.  A transport's header creates
 * the endpoints: rdmaq_shm.h (shared memory), rdmaq_verbs.h (RDMA).
 *
 * Every function that can fail returns 0 or a negative errno; the calling
 * thread's rdmaq_errmsg() then says what failed.  Timeouts are in
 * nanoseconds, negative meaning "wait forever".  A blocking call returns
 * -EINTR when a signal handler ran (and, with
 * wait_config.eintr_on_main_thread, on the process's main thread at least
 * every 100 ms, so an interpreter can run its own signal handlers); calling
 * again (for put, rdmaq_writer_resume) continues where it stopped.  A put that fails
 * otherwise, or is not resumed before the next put, delivers nothing:
 * readers drop any records of it they got (one exception: a verbs put that
 * failed writing to a dead reader after framing the message; the others get
 * it when that reader is dropped).  An endpoint inherited through fork()
 * fails with -ESTALE in the child; its queue is the parent's.
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

/*
 * The bounds of struct rdmaq_config and struct rdmaq_wait_config: the C
 * core refuses a value outside them (-EINVAL naming it), and rdmaq's
 * Python layer reads them from here.
 */
enum {
	RDMAQ_MAX_READERS = 256,
	RDMAQ_MIN_SLOT_BYTES = 128, /* a record's header and trailer take 40 */
	RDMAQ_MAX_SLOT_BYTES = 1 << 30,
	RDMAQ_SLOT_ALIGN = 64, /* slot_bytes is a multiple: every slot starts a cache line */
	RDMAQ_MIN_SLOTS = 2,
	RDMAQ_MAX_SLOTS = 1 << 24,
	RDMAQ_MAX_SPIN_NS = 1000000000,
	RDMAQ_MIN_SLICE_NS = 100000, /* the kernel's clamp; 0 is "off" */
	RDMAQ_MAX_SLICE_NS = 100000000,
};

struct rdmaq_config {
	uint32_t n_readers;
	uint32_t slot_bytes;  /* bytes per slot, header and trailer included */
	uint32_t slots;	      /* slots per reader ring */
	uint64_t max_message; /* largest message put() accepts */
	uint32_t spin_ns;     /* longest busy-wait before blocking */
};

struct rdmaq_stats {
	uint64_t messages;
	uint64_t bytes;
	uint64_t spins;	    /* waits that ended while spinning (windows included) */
	uint64_t windows;   /* waits that ended in a window predicted from the writer's cadence */
	uint64_t misses;    /* predicted windows that ended without the message */
	uint64_t preempted; /* spins cut short because the thread lost its CPU */
	uint64_t naps;	    /* timed sleeps until a predicted window */
	uint64_t sleeps;    /* blocks in the kernel until woken */
	uint64_t woken;	    /* blocks that ended with what they waited for */
	uint64_t expired;   /* blocks that ended when their time ran out, not by a wake-up */
	uint64_t wakeups;   /* peers this endpoint woke */
	uint64_t credits;   /* credit updates sent (reader) or stalls on credit (writer) */
	uint64_t busy;	    /* waits that did not spin: more runnable tasks than CPUs */
	uint64_t settles;   /* blocks that settled the scheduler lag first (next message far) */
	uint64_t slice_ns;  /* scheduler slice asked for while blocked; 0: off or refused */
	uint64_t immediate; /* try_recv/try_put calls that found their message or room at once */
};

/*
 * Timestamps (CLOCK_MONOTONIC ns) of the last operation, for profiling.
 * Writer put: start = call, mid = records copied, end = published and
 * peers woken.  Reader: start = the writer's stamp (its clock when it
 * published), mid = the record was seen, end = copied out.
 */
struct rdmaq_trace {
	int64_t start_ns;
	int64_t mid_ns;
	int64_t end_ns;
	uint32_t how; /* how the wait for the record ended: 1 ready, 2 spin, 3 window, 4 woken */
};

/* How an endpoint waits; rdmaq_*_set_wait() validates it. */
struct rdmaq_wait_config {
	/* longest adaptive busy-wait before blocking */
	uint32_t spin_ns;
	/* scheduler slice to ask for while blocked: 0 off, else RDMAQ_MIN/MAX_SLICE_NS */
	uint32_t slice_ns;
	/* readers: nap, then spin through windows predicted from the cadence */
	uint32_t anticipate;
	/* give the thread its own slice back after each wake-up (default: keep the short one) */
	uint32_t restore_slice;
	/* on the main thread, return -EINTR every 100 ms while blocked */
	uint32_t eintr_on_main_thread;
	/* readers, policy "auto": spin up to this long, in place of napping, while the CPU
	 * is not contended and the next message can come within it (0: policy "efficient") */
	uint32_t free_spin_ns;
	/* experiment: spin up to this long before blocking also on a contended CPU (at most
	 * RDMAQ_MAX_SPIN_NS; 0: a wait on a contended CPU blocks at once) */
	uint32_t busy_spin_ns;
	/* experiment (0 or 1): the free spin also on a contended CPU, through preemptions */
	uint32_t free_spin_busy;
	/* settle the scheduler lag before blocking when the next message cannot come within
	 * this long (at most RDMAQ_MAX_SETTLE_FAR_NS; 0: never) */
	uint64_t settle_far_ns;
};

struct rdmaq_iovec {
	const void *base;
	size_t len;
};

/* Detail of the calling thread's last error. */
const char *rdmaq_errmsg(void);

/* Payload bytes one slot carries once its header and trailer are paid. */
uint32_t rdmaq_slot_payload(uint32_t slot_bytes);

/*
 * Does the kernel honour a short scheduler slice for this thread?  1 yes,
 * 0 no (rdmaq_errmsg() says why), <0 bad argument.  The thread's own
 * attributes are restored.
 */
int rdmaq_sched_slice_probe(uint32_t slice_ns);

/* Endpoint operations, the same for every transport. */
int rdmaq_writer_wait_ready(struct rdmaq_writer *w, int64_t timeout_ns);
int rdmaq_writer_put(struct rdmaq_writer *w, const struct rdmaq_iovec *iov, int iovcnt,
		     int64_t timeout_ns);
/* After -EINTR from put or resume: continue the same message (same buffers). */
int rdmaq_writer_resume(struct rdmaq_writer *w, const struct rdmaq_iovec *iov, int iovcnt,
			int64_t timeout_ns);
/*
 * put without waiting, for a caller that must not let go of a lock (an
 * interpreter's) unless it has to: -EAGAIN, with nothing done, when the put
 * would wait for room, for readers or for an interrupted put to resume; when
 * the message does not fit the ring whole; or when it is longer than
 * max_message (put names that error).  Otherwise as put.
 */
int rdmaq_writer_try_put(struct rdmaq_writer *w, const struct rdmaq_iovec *iov, int iovcnt);
/* try_put of the message head followed by body, for a caller that has no
 * iovec array at hand (an interpreter's bytes objects). */
int rdmaq_writer_try_put2(struct rdmaq_writer *w, const void *head, size_t head_len,
			  const void *body, size_t body_len);
int rdmaq_writer_close(struct rdmaq_writer *w);
/*
 * A reader whose process ended without closing holds the ring back: every
 * put that needs its credit fails with -EOWNERDEAD.  reader_dead: 1 if
 * reader `index` is such a reader, 0 if not (alive, closed or dropped).
 * drop_reader forgets it: the writer no longer waits for its credit, writes
 * to it or reports it dead, and the index stays taken.  0 when dropped (or
 * closed or dropped before), -EINVAL when it is alive or out of range,
 * -ENOTCONN before the queue is ready.
 */
int rdmaq_writer_reader_dead(struct rdmaq_writer *w, uint32_t index);
int rdmaq_writer_drop_reader(struct rdmaq_writer *w, uint32_t index);
void rdmaq_writer_cancel(struct rdmaq_writer *w);
void rdmaq_writer_destroy(struct rdmaq_writer *w);
void rdmaq_writer_stats(const struct rdmaq_writer *w, struct rdmaq_stats *out);
void rdmaq_writer_trace(const struct rdmaq_writer *w, struct rdmaq_trace *out);
int rdmaq_writer_set_wait(struct rdmaq_writer *w, const struct rdmaq_wait_config *wc);

int rdmaq_reader_wait_ready(struct rdmaq_reader *r, int64_t timeout_ns);
/*
 * A message in two steps, for a caller that sizes its buffer per message:
 * peek waits for the next message and sets *msg_len; read copies that
 * message (`len` must be *msg_len) into buf.  A read cut short (-EINTR,
 * -ETIMEDOUT) keeps its place: the next read continues it into the same
 * buffer.  Two returns are not failures: read's -ECONNABORTED says the
 * writer abandoned the message (its put failed; nothing of it is kept, the
 * next peek finds the message after it), and recv's -ENOBUFS below.
 */
int rdmaq_reader_peek(struct rdmaq_reader *r, uint64_t *msg_len, int64_t timeout_ns);
int rdmaq_reader_read(struct rdmaq_reader *r, void *buf, uint64_t len, int64_t timeout_ns);
/*
 * peek + read in one call when the message fits `cap` bytes; else -ENOBUFS
 * with *msg_len set and the message left to rdmaq_reader_read.  Like read,
 * -ECONNABORTED when the writer abandoned the message.
 */
int rdmaq_reader_recv(struct rdmaq_reader *r, void *buf, uint64_t cap, uint64_t *msg_len,
		      int64_t timeout_ns);
/*
 * recv without waiting, for the same callers as try_put: -EAGAIN, with
 * nothing done, unless a whole message of one record that fits `cap` has
 * landed (errors, longer messages and waiting are left to recv).
 */
int rdmaq_reader_try_recv(struct rdmaq_reader *r, void *buf, uint64_t cap, uint64_t *msg_len);
/*
 * Between messages: nap until the window in which the next message is
 * predicted (policy auto on a free CPU: spin to just before it).  1 when the
 * window is near and the message has not come yet (a good moment to warm
 * caches; the next peek/recv spins through the window), 0 when no window is
 * predicted or a message is there, <0 error.
 */
int rdmaq_reader_nap(struct rdmaq_reader *r, int64_t timeout_ns);
int rdmaq_reader_close(struct rdmaq_reader *r);
void rdmaq_reader_cancel(struct rdmaq_reader *r);
void rdmaq_reader_destroy(struct rdmaq_reader *r);
void rdmaq_reader_stats(const struct rdmaq_reader *r, struct rdmaq_stats *out);
void rdmaq_reader_trace(const struct rdmaq_reader *r, struct rdmaq_trace *out);
int rdmaq_reader_set_wait(struct rdmaq_reader *r, const struct rdmaq_wait_config *wc);

#endif
