#ifndef SLOT_SLOT_H
#define SLOT_SLOT_H

/* libslot: the public API of slot, for applications that want a say in how
 * slotd carries their TCP connections (docs/man/libslot.3).
 *
 * This is the project's only public header: the other headers in
 * include/slot/ are internal to the daemons and are not installed. It
 * depends on nothing but libc, and its ABI is that of libslot.so.1: the
 * structures below that are not opaque only ever grow in a new soname.
 *
 * Every function that returns int returns 0, or -1 with errno set and a
 * text for people in slot_strerror(). The text is the only state the library
 * keeps, one per thread; everything else is thread-safe. */

#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SLOT_LIB_VERSION	"1.0.0"

/* slotd's lib socket, unless slot_opts_set_socket() or $SLOT_LIB_SOCKET
 * names another. */
#define SLOT_LIB_SOCKET_DEFAULT	"/run/slot/slotd-lib.sock"

#define SLOT_AVOID_MAX		8	/* slot_opts_avoid_relay() */
#define SLOT_CHAIN_MAX		3	/* relays of a chain, slot_opts_set_relay() */
#define SLOT_DEADLINE_MAX	60000	/* slot_opts_set_deadline(), ms */

/* slot_decision's state. */
#define SLOT_STATE_RELAYED	1	/* through relay */
#define SLOT_STATE_DIRECT	2	/* slotd let it go direct */
#define SLOT_STATE_PENDING	3	/* slotd has not decided yet */
#define SLOT_STATE_FALLBACK	4	/* slotd not reachable: went direct without it */

/* Options of one call; NULL everywhere means the defaults. Opaque, so that it
 * can grow; one opts may serve any number of calls, but is not itself
 * locked: do not change it while another thread uses it. */
struct slot_opts;

/* A new opts with the defaults, or NULL with errno ENOMEM. */
struct slot_opts *slot_opts_new(void);
void slot_opts_free(struct slot_opts *o);

/* Forces this relay (its control endpoint, "ADDR:PORT" or "[V6]:PORT", as
 * `slotctl relays` lists them), or a chain of relays, first relay first,
 * separated by commas: "EP1,EP2[,EP3]" (up to SLOT_CHAIN_MAX, E2BIG beyond;
 * each once). NULL clears. EINVAL for a bad endpoint or a relay twice. */
int slot_opts_set_relay(struct slot_opts *o, const char *endpoint);

/* Never this relay. Up to SLOT_AVOID_MAX, else E2BIG; the same endpoint
 * twice counts once; NULL clears the list. EINVAL for a bad endpoint. */
int slot_opts_avoid_relay(struct slot_opts *o, const char *endpoint);

/* No path chosen ms after the SYN: go direct. 0: slotd's own deadline;
 * else 1..SLOT_DEADLINE_MAX, EINVAL otherwise. */
int slot_opts_set_deadline(struct slot_opts *o, unsigned int ms);

/* When slotd cannot be reached, slot_connect() connects directly (direct
 * nonzero, the default) or fails with the reason in errno (0). */
int slot_opts_set_fallback(struct slot_opts *o, int direct);

/* The lib socket's path; NULL: $SLOT_LIB_SOCKET, then
 * SLOT_LIB_SOCKET_DEFAULT. ENAMETOOLONG if it does not fit a sockaddr_un. */
int slot_opts_set_socket(struct slot_opts *o, const char *path);

/* connect(2) through slot: hands fd and the options to slotd, then connects
 * fd to addr. fd must be an unconnected AF_INET or AF_INET6 SOCK_STREAM
 * socket of addr's family; if it is not bound, it is bound to the wildcard
 * address, port 0. Returns what connect(2) returns once slotd has said yes,
 * so a non-blocking fd gives -1 EINPROGRESS as usual. o may be NULL. */
int slot_connect(int fd, const struct sockaddr *addr, socklen_t len,
    const struct slot_opts *o);

/* What slotd did with a connected socket. */
struct slot_decision {
	int state;			/* SLOT_STATE_* */
	char relay[64];			/* "ADDR:PORT" when relayed, else "" */
	unsigned int path_rtt_us;	/* RTT through the relay, or direct */
	unsigned int direct_rtt_us;	/* 0: the direct path was not measured */
	int cached;			/* 1: from slotd's selection cache */
	char why[128];			/* the reason, for people */
};

/* Asks slotd about fd, which must be connected (ENOTCONN otherwise). When
 * slotd cannot be reached, state is SLOT_STATE_FALLBACK and why says why;
 * ENOENT when slotd knows no such connection. */
int slot_decision(int fd, struct slot_decision *out, const struct slot_opts *o);

/* Asks slotd to offer it every TCP connection this process and its children
 * open from now on (the "attach" request; needs cgroup v2 and slotd's run
 * cgroup, EOPNOTSUPP otherwise). */
int slot_attach_self(const struct slot_opts *o);

/* The calling thread's text for its last failed call: "" if none. Valid until
 * the thread's next call into the library. */
const char *slot_strerror(void);

/* SLOT_LIB_VERSION of the library actually loaded. */
const char *slot_version(void);

#ifdef __cplusplus
}
#endif

#endif
