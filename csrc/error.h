/* SPDX-License-Identifier: MIT */
/*
 * Errors: a function that fails returns a negative errno and leaves a
 * message for the calling thread, which rdmaq_errmsg() (rdmaq.h) returns
 * and the Python layer puts into its exception.
 */
#ifndef RDMAQ_ERROR_H
#define RDMAQ_ERROR_H

#include <errno.h>

/* Set the calling thread's message; returns err, for `return rdmaq_set_err(...)`. */
int rdmaq_set_err(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
