#ifndef SLOT_DIRECTORY_DSRC_H
#define SLOT_DIRECTORY_DSRC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "slot/addr.h"

/*
 * slot-dird's connections per source, so that one source cannot take every
 * connection slot (docs/directory.md, "Transport"). A source is an IPv4
 * address, or an IPv6 /64 (one host usually holds a whole /64). Holds at
 * most `sources` sources at once (the number of connection slots: never
 * more sources than connections), each with at most `per_source`
 * connections. Not thread-safe: the caller holds its lock.
 */

struct dsrc;

/* NULL on failure (out of memory, or a zero argument). */
struct dsrc *dsrc_new(unsigned sources, unsigned per_source);
void dsrc_free(struct dsrc *s);

/* The source of a peer address: IPv4 (also IPv4-mapped IPv6) as is, IPv6
 * with the low 64 bits zeroed. -1 if sa is neither. */
int dsrc_key(const struct sockaddr *sa, socklen_t len, struct addr *out);

/* Counts one more connection of key. Returns 0, or -1 (nothing counted)
 * when key holds per_source connections already or every entry is taken. */
int dsrc_take(struct dsrc *s, const struct addr *key);

/* Counts one connection of key less (one taken before). */
void dsrc_put(struct dsrc *s, const struct addr *key);

/* Connections key holds now. */
unsigned dsrc_count(const struct dsrc *s, const struct addr *key);

/* Sources with at least one connection. */
unsigned dsrc_sources(const struct dsrc *s);

#endif
