/* SPDX-License-Identifier: MIT */
/*
 * rdmaq shm transport: one segment in /dev/shm holding a broadcast ring
 * that every reader reads, futex wake-ups.  The writer names the segment
 * (unguessably) and unlinks it once every reader has attached.  Every
 * function returns 0 or a negative errno with rdmaq_errmsg() set, like
 * rdmaq.h.
 *
 * This header is fed to cffi's cdef after its preprocessor lines are
 * dropped, so keep it to plain declarations.
 */
#ifndef RDMAQ_SHM_H
#define RDMAQ_SHM_H

#include <stdint.h>

#include "rdmaq.h"

/* A queue's name, the segment's in /dev/shm: 1..RDMAQ_SHM_NAME_MAX characters, no '/'. */
enum { RDMAQ_SHM_NAME_MAX = 200 };

int rdmaq_shm_writer_create(struct rdmaq_writer **out, const struct rdmaq_config *cfg);
const char *rdmaq_shm_writer_name(const struct rdmaq_writer *w);
int rdmaq_shm_reader_attach(struct rdmaq_reader **out, const char *name, uint32_t index,
			    uint32_t spin_ns);
/* 1 if `name` is an rdmaq segment whose writer process is gone, 0 if not, <0 error. */
int rdmaq_shm_segment_stale(const char *name);

#endif
