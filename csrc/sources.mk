# SPDX-License-Identifier: MIT
# The C sources, one list per part, named relative to csrc/.  Read by
# rdmaq/_build.py (the Python extensions) and tests/c/Makefile (the C
# tests), so keep to plain `NAME := file ...` lines.
#
#   rdmaq._rdmaq        CORE_SRCS + SHM_SRCS
#   rdmaq._rdmaq_verbs  CORE_SRCS + VERBS_SRCS, linked with libibverbs

# The ring engine: framing, flow control, waiting, errors.
CORE_SRCS := ring.c wait.c cadence.c slice.c busy.c schedstat.c error.c

# Transports.
SHM_SRCS := shm.c shm_proc.c
VERBS_SRCS := verbs/verbs_stats.c verbs/verbs_proc.c verbs/verbs_choice.c verbs/verbs_hub.c \
	verbs/verbs_live.c verbs/verbs_grave.c verbs/verbs_ctx.c verbs/verbs_qp.c verbs/verbs_pool.c \
	verbs/verbs_ep.c verbs/verbs_writer.c verbs/verbs_reader.c
