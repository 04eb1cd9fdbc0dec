/* SPDX-License-Identifier: MIT */
/*
 * busy.c replaced by a CPU that is never busy and takes any gap in the clock
 * for a preemption: chosen_busy.h's stand-in, whose cpu_busy the tests that
 * include this file leave false.  Include it once, instead of busy.c.
 */
#ifndef RDMAQ_TEST_NEVER_BUSY_H
#define RDMAQ_TEST_NEVER_BUSY_H

#include "chosen_busy.h"

#endif
