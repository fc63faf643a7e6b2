/* What the fuzz targets share (tests/fuzz, docs/reliability.md, "Fuzzing"): the
 * fixed key, a NUL-terminated copy of an input, and a file holding an input
 * for the loaders that take only a path. Header-only: each target is one
 * translation unit linked with libFuzzer's main. */
#ifndef SLOT_FUZZ_H
#define SLOT_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "slot/auth.h"

/* A failed invariant: abort, so libFuzzer keeps the input as a crash. */
#define FUZZ_CHECK(cond) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,	\
		    __LINE__, #cond);					\
		abort();						\
	}								\
} while (0)

/* Says why an input was refused, when SLOT_FUZZ_VERBOSE is set (to check
 * that seeds are valid: run a target on one file). */
static inline void
fuzz_say(const char *what, const char *why)
{
	static int verbose = -1;

	if (verbose == -1)
		verbose = getenv("SLOT_FUZZ_VERBOSE") != NULL;
	if (verbose)
		fprintf(stderr, "%s: %s\n", what, why);
}

/* The key of docs/protocol.md's test vectors, 00 01 .. 1f: the seed corpora
 * are signed with it. */
static inline void
fuzz_key(struct auth_key *k)
{
	for (int i = 0; i < AUTH_KEY_LEN; i++)
		k->k[i] = (uint8_t)i;
}

/* data as a malloc'ed C string (NUL-terminated; an inner NUL stays and cuts
 * it, as it would a line read by the daemons). Aborts when out of memory. */
static inline char *
fuzz_cstr(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	FUZZ_CHECK(s != NULL);
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

/* A path whose file holds exactly data: one memfd, rewritten per input, so
 * the loaders read it through their own fopen/getline code. */
static inline const char *
fuzz_file(const uint8_t *data, size_t size)
{
	static int fd = -1;
	static char path[64];

	if (fd == -1) {
		fd = memfd_create("slot-fuzz", MFD_CLOEXEC);
		FUZZ_CHECK(fd != -1);
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	}
	FUZZ_CHECK(ftruncate(fd, 0) == 0);
	FUZZ_CHECK(size == 0 || pwrite(fd, data, size, 0) == (ssize_t)size);
	return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#endif
