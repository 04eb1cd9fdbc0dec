/* SPDX-License-Identifier: MIT */
/*
 * Checks for the C unit tests: a failed CHECK names itself and the test
 * goes on (every broken behaviour shows in one run); check_report() ends
 * main with PASS or FAIL, which tests/core/test_c_units.py reads.
 */
#ifndef RDMAQ_TEST_CHECK_H
#define RDMAQ_TEST_CHECK_H

#include <stdio.h>

static int check_failures;

#define CHECK(cond)                                                                          \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__, __LINE__, \
				__func__, #cond);                                            \
			check_failures++;                                                    \
		}                                                                            \
	} while (0)

/* The exit status of a unit test called `unit`: 0 when every check held. */
static inline int check_report(const char *unit)
{
	printf("%s: %s, %d failed checks\n", check_failures ? "FAIL" : "PASS", unit, check_failures);
	return check_failures != 0;
}

#endif
