#ifndef SLOT_CLIENT_LIBSRV_H
#define SLOT_CLIENT_LIBSRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "slot/addr.h"

/* The lib socket ([lib] socket; docs/protocol.md, "The lib socket"):
 * programs offer their own sockets to slotd whatever the port (libslot's
 * slot_connect: slotd marks the socket with [lib] mark, which the rules
 * queue, and keeps the program's options for its SYN), ask how a connection
 * went (slot_decision), or move into the run cgroup, whose SYNs the rules
 * mark the same way (slotctl run). One request per connection, one line
 * each way. */

struct slotd;

#define LIB_AVOID_MAX 8
#define LIB_DEADLINE_MAX_MS 60000
#define LIB_CHAIN_MAX 3		/* relays of a forced chain (PROTO_CHAIN_MAX_HOPS + 1) */

/* What a program asked for one connection. */
struct lib_opts {
	bool has_relay;
	struct endpoint relay;		/* forced: the relay's control endpoint */
	/* forced chain (relay=EP1,EP2[,EP3]): the relays after relay */
	struct endpoint next[LIB_CHAIN_MAX - 1];
	size_t nnext;
	struct endpoint avoid[LIB_AVOID_MAX];	/* never these */
	size_t navoid;
	uint32_t deadline_ms;		/* a verdict by then, else direct; 0: none */
};

/* The run cgroup, as root and before the rules that name it: created under
 * the cgroup v2 mount, and its cgroup.procs opened now, so that moving a
 * program into it later works as slotd's unprivileged user (the kernel
 * checks the opener's credentials). Off, with a warning, where there is no
 * cgroup v2. */
void libsrv_cgroup_open(struct slotd *d);
/* The cgroup for the rules; NULL: none. */
const char *libsrv_cgroup(const struct slotd *d);

/* Serves listening socket fd. Returns 0, or -1 (out of memory). */
int libsrv_start(struct slotd *d, int fd);
/* Closes the socket, its clients, the cgroup (removed if empty). */
void libsrv_stop(struct slotd *d);

/* The options a program gave for the SYN from client to server: copied to
 * out and forgotten. False: none (or expired). */
bool libsrv_take(struct slotd *d, const struct endpoint *client, const struct endpoint *server,
    struct lib_opts *out);

bool lib_opts_avoids(const struct lib_opts *o, const struct endpoint *relay);

/* Parses a request's arguments after "connect " into server and o.
 * Returns 0, or -1 with a reason in err. */
int libsrv_parse_connect(const char *args, struct endpoint *server, struct lib_opts *o,
    char *err, size_t errlen);

/* [lib] attach_from: cgroup v2 paths as /proc/PID/cgroup shows them (from
 * '/'), separated by commas or blanks, at most LIB_ATTACH_FROM_MAX. Returns
 * 0, or -1 with a reason in err. */
#define LIB_ATTACH_FROM_MAX 8
int libsrv_attach_from_ok(const char *list, char *err, size_t errlen);
/* Whether cgroup cg (a /proc/PID/cgroup path) is one of list's or below
 * one, part by part: "/user.slice" takes "/user.slice/x", not
 * "/user.slicex". A path outside slotd's cgroup namespace ("/..") is under
 * none. */
bool libsrv_cgroup_under(const char *cg, const char *list);
/* The cgroup v2 path of process pid (its /proc/PID/cgroup "0::" line) into
 * out. Returns 0, or -1 with errno set. */
int libsrv_proc_cgroup(int pid, char *out, size_t len);

/* The descriptor of a "connect": a TCP socket of server's family (or a
 * dual-stack one for an IPv4 server), in state CLOSE (neither connected,
 * connecting nor listening), with a local port. Returns the port, or 0 with
 * "ERRNAME text" for the answer in err. */
uint16_t libsrv_check_socket(int fd, const struct endpoint *server, char *err, size_t errlen);

/* The descriptors (up to max, into fds) that came with a message recvmsg
 * returned n for: none when n < 0. Returns their number. */
struct msghdr;
size_t libsrv_msg_fds(struct msghdr *mh, ssize_t n, int *fds, size_t max);

/* Before a process is moved: it is still the peer that connected with uid
 * (its effective uid), and alive, so that pid is its own. pidfd: the
 * peer's (SO_PEERPIDFD), or -1 where the kernel has none, which leaves a
 * race: the peer may exit and its pid be taken by a new process between
 * this check and the move. Returns 0, or -1 with a reason in err. */
int libsrv_peer_check(int pidfd, int pid, unsigned uid, char *err, size_t errlen);

#endif
