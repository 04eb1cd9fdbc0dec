/* SPDX-License-Identifier: MIT */
/*
 * container_of, as in the kernel: from a pointer to a member back to the
 * struct that holds it.  A transport's endpoint embeds the core's struct
 * (rdmaq_writer, rdmaq_reader, a waiter's sleep state, a hub entry) and
 * finds itself from it, wherever the member sits.  The pointer must have
 * the member's type, or be a void * (a callback's opaque argument).
 */
#ifndef RDMAQ_CONTAINER_OF_H
#define RDMAQ_CONTAINER_OF_H

#include <stddef.h>

#define container_of(ptr, type, member)                                                         \
	({                                                                                      \
		_Static_assert(__builtin_types_compatible_p(__typeof__(*(ptr)),                 \
							    __typeof__(((type *)0)->member)) || \
				       __builtin_types_compatible_p(__typeof__(*(ptr)), void),  \
			       "container_of: the pointer is not to the member's type");        \
		(type *)((char *)(ptr)-offsetof(type, member));                                 \
	})

#endif
