/* CHECK for the test programs without cm.h (rsapi.c, rscredit.c, rsdgram.c, cmrace.c): on a false
 * condition, print the line, the condition, a message and errno, and exit 1. (cm.h has its
 * own, with the event channel these programs do not use.) */
#ifndef RSCHECK_H
#define RSCHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c, ...)                                                                  \
	do {                                                                           \
		if (!(c)) {                                                            \
			int e_ = errno;                                                \
			fprintf(stderr, "FAIL line %d: %s: ", __LINE__, #c);           \
			fprintf(stderr, __VA_ARGS__);                                  \
			fprintf(stderr, " (errno %d %s)\n", e_, strerror(e_));         \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

#endif
