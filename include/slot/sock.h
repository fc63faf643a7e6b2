#ifndef SLOT_SOCK_H
#define SLOT_SOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "slot/addr.h"

/* Socket helpers. Like Redis' anet they never log: they return -1 with errno
 * set and the caller decides what to say. Every descriptor is non-blocking
 * and close-on-exec. */

/* TCP listener with SO_REUSEADDR (IPV6_V6ONLY for IPv6). Returns fd or -1. */
int sock_listen_tcp(const struct endpoint *ep, int backlog);

/* Bound UDP socket. Returns fd or -1. */
int sock_bind_udp(const struct endpoint *ep);

/* Starts a non-blocking connect to dst. mark != 0 sets SO_MARK (needs
 * CAP_NET_ADMIN). Returns fd (connection in progress or done) or -1. */
int sock_connect_nb(const struct endpoint *dst, uint32_t mark);

/* sock_connect_nb for a measurement that the server's application must never
 * accept: the handshake's last ACK is deferred (TCP_DEFER_ACCEPT on the
 * connecting socket, which delays it up to the kernel's delayed-ACK maximum,
 * 200 ms, or until data goes out). Closed by sock_close_rst before then, the
 * server sees SYN, SYN-ACK, RST, as for a bare SYN. SOCK_ACK_DEFER_MS is the
 * deferral's bound. */
int sock_connect_unacked(const struct endpoint *dst, uint32_t mark);
#define SOCK_ACK_DEFER_MS 200
/* The longest a caller may keep such a connection: the deferral's bound
 * less room for a busy event loop. */
#define SOCK_ACK_HOLD_MAX_MS 180

/* Whether this kernel defers the ACK as sock_connect_unacked needs, no
 * man page promising it: a connect to a loopback listener of its own,
 * begun, then ended SOCK_ACK_HOLD_MAX_MS later, when nothing may have been
 * accepted yet. */
struct sock_ackcheck {
	int lfd, cfd;
	uint64_t t0_us;		/* monotonic, after the connect */
};
enum sock_ackcheck_result {
	SOCK_ACKCHECK_DEFERRED,	/* established, not accepted: as needed */
	SOCK_ACKCHECK_EARLY,	/* accepted before the bound: not deferred */
	SOCK_ACKCHECK_UNSURE,	/* no connection, or ended too late to tell */
};
/* Returns 0, or -1 with errno (no loopback address, no descriptor). */
int sock_ackcheck_begin(struct sock_ackcheck *c);
/* Ends and closes it; *held_us: the time since the connect. DEFERRED needs
 * at least SOCK_ACK_HOLD_MAX_MS of it. */
enum sock_ackcheck_result sock_ackcheck_end(struct sock_ackcheck *c, uint64_t *held_us);

/* Sends a deferred handshake ACK now (TCP_QUICKACK): the server's
 * application may accept from here on. Returns 0 or -1. */
int sock_ack_now(int fd);
/* The same for a socket that may still be connecting: a SYN-ACK still to
 * come is acknowledged at once, no longer deferred. Returns 0 or -1. */
int sock_ack_from_now(int fd);

/* A connecting socket's retransmission timeout for its SYN: the kernel's
 * 1 s, or what a BPF program (BPF_SOCK_OPS_TIMEOUT_INIT) set; the default
 * if it cannot be read. */
#define SOCK_SYN_RTO_DEFAULT_US 1000000U
uint32_t sock_syn_rto_us(int fd);

/* Result of a finished non-blocking connect: 0, or the errno it failed with. */
int sock_connect_result(int fd);

int sock_set_keepalive(int fd, int idle_s, int intvl_s, int cnt);
int sock_set_nodelay(int fd);

/* TCP congestion control. The longest name the kernel takes, with its NUL
 * (TCP_CA_NAME_MAX). */
#define SOCK_CC_NAME_MAX 16

/* Sets fd's algorithm (TCP_CONGESTION); a listener's is inherited by the
 * sockets it accepts. Returns 0 or -1. */
int sock_set_congestion(int fd, const char *name);

/* The segments fd has retransmitted since it connected (TCP_INFO's
 * tcpi_total_retrans) into out. Returns 0 or -1. */
int sock_retransmits(int fd, unsigned *out);

/* Raises fd's send buffer to at least bytes, and leaves the kernel free to
 * grow it further (SO_SNDBUF, or SO_SNDBUFFORCE with force, which passes
 * net.core.wmem_max; then SO_BUF_LOCK 0, as setting a size locks it).
 * Never lowers one the kernel has grown. Returns 1 if raised, 0 if it was
 * as large already, -1 on failure. */
int sock_raise_sndbuf(int fd, int bytes, bool force);

/* Whether this kernel lets sock_raise_sndbuf unlock what it set
 * (SO_BUF_LOCK, Linux 5.14): 0, or -1 with errno. *force says whether
 * SO_SNDBUFFORCE is allowed (CAP_NET_ADMIN). */
int sock_sndbuf_check(bool *force);

/* The network namespace's default algorithm (net.ipv4.tcp_congestion_control)
 * into buf. Returns 0 or -1. */
int sock_congestion_default(char *buf, size_t len);

/* What each TCP leg of a relayed connection carries: TCP_NODELAY (the
 * sender already applied Nagle), keepalive and TCP_USER_TIMEOUT (a dead peer
 * is found in minutes), SO_LINGER {1, 0} if linger_rst (a close resets:
 * the peer never takes a cut stream for a complete one), and a congestion
 * control. Set on a listener, all of it is inherited by the sockets it
 * accepts (no system call per connection). */
struct sock_leg {
	int keepidle_s, keepintvl_s, keepcnt;	/* <= 0: the system's */
	unsigned int user_timeout_ms;		/* 0: the kernel's */
	int linger_rst;
	const char *congestion;			/* NULL or "": left alone */
	int reset;	/* a listener reconfigured: user timeout 0 is set too */
	int later;	/* keepalive and user timeout left out: they only
			 * matter after tens of seconds (sock_set_leg_later) */
};

/* Returns 0, or -1 with errno of the first option that failed (the others
 * are still set). */
int sock_set_leg(int fd, const struct sock_leg *o);

/* The options sock_set_leg leaves out when o->later: keepalive and the
 * user timeout. Both count from the socket's own timestamps (the last
 * segment received, the first retransmission), not from when they are set,
 * so setting them late on a live connection loses nothing. Returns 0 or -1
 * as sock_set_leg. */
int sock_set_leg_later(int fd, const struct sock_leg *o);

/* Whether an unprivileged process may use algorithm name on this host: it
 * must be available (a loaded module), allowed for unprivileged sockets
 * (net.ipv4.tcp_allowed_congestion_control) or the default, and a test
 * socket must take it. Returns 0, or -1 with the reason, naming the
 * sysctls' values, in err. */
int sock_congestion_check(const char *name, char *err, size_t errlen);

/* Closes fd so that the peer gets a RST rather than a FIN (SO_LINGER 0). */
void sock_close_rst(int fd);

/* Unix stream listener at path (a stale socket file is replaced), chmod mode.
 * Returns fd or -1. */
int sock_listen_unix(const char *path, mode_t mode, int backlog);

/* The daemons' control sockets: sock_listen_unix (backlog 16) after making
 * the socket's directory (0755) if it is missing (systemd makes it with
 * RuntimeDirectory=, by hand we do). Returns fd, or -1 with "<what>
 * directory <dir>: ..." or "<what> <path>: ..." in err. */
int sock_listen_unix_mkdir(const char *what, const char *path, mode_t mode, char *err,
    size_t errlen);

/* Raises the soft limit on open descriptors to the hard limit (daemons
 * hold many sockets). Failure is harmless: the old limit stays. */
void sock_raise_nofile(void);

/* Whether the kernel has family (AF_INET6 is missing with ipv6.disable=1). */
bool sock_has_family(int family);

/* Local and peer endpoints of a connected socket. Return 0 or -1. */
int sock_local_ep(int fd, struct endpoint *out);
int sock_peer_ep(int fd, struct endpoint *out);

#endif
