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
VERBS_SRCS := verbs_stats.c verbs_proc.c verbs_choice.c verbs_hub.c verbs_live.c verbs_grave.c \
	verbs_ctx.c verbs_qp.c verbs_pool.c verbs_ep.c verbs_writer.c verbs_reader.c
