#ifndef SLOT_DIRECTORY_DHTTP_H
#define SLOT_DIRECTORY_DHTTP_H

#include <stddef.h>
#include <stdint.h>

#include <xmlrpc-c/server.h>

/*
 * The HTTP side of slot-dird: POST /RPC2 served by xmlrpc-c's Abyss HTTP
 * code with a method registry. Every other path answers 404, every other
 * HTTP method 405; a body over max_body gets an HTTP error without being
 * read; a body that is not plain UTF-8 XML (slot/xmlguard.h: a byte order
 * mark, a NUL, "<!", another encoding...) gets a MALFORMED fault without
 * being parsed (XML entities could blow a 64 KiB body up to gigabytes),
 * and a log line (once a minute per source).
 *
 * We accept connections ourselves, on a thread of our own, and give each to
 * a thread that runs Abyss on it (ServerRunChannel). Abyss's own accept loop
 * (ServerRun) polls every 2 s for a free slot once max_conns connections are
 * open, and again at exit; ours is woken when a slot frees, so it is taken
 * at once. With every slot busy, new connections wait in the kernel's
 * listen queue. A source (an IPv4 address, an IPv6 /64) that holds
 * max_conns_per_source connections gets 503 for more, so that one source
 * cannot take the slots that relays' heartbeats need.
 *
 * One request per connection (Abyss's keep-alive off): a slot is held only
 * while a request is read and answered. The request's headers must arrive
 * within header_timeout (else 408, or 431 beyond max_header bytes), then
 * its body within body_timeout (else 408), and the answer must be taken
 * within body_timeout again: the acceptor thread is also a watchdog that
 * shuts down a connection past its deadline (Abyss's own timeout counts
 * per read, so a peer trickling a byte at a time would never reach it).
 */

struct dhttp_params {
	size_t max_body;
	size_t max_header;		/* bytes of the request line and headers */
	unsigned max_conns;
	unsigned max_conns_per_source;
	uint64_t header_timeout_ms;
	uint64_t body_timeout_ms;	/* for the body, then for the answer */
};

struct dhttp_counters {
	uint64_t conns;		/* accepted */
	uint64_t conns_active;	/* being served (gauge) */
	uint64_t sources_active;	/* sources of those (gauge) */
	uint64_t refused_source;	/* closed at once: the source held its share */
	uint64_t timed_out;	/* cut at a deadline (408 or shut down) */
	uint64_t requests;	/* XML-RPC bodies received */
	uint64_t refused;	/* of those, refused unparsed (not plain UTF-8 XML) */
};

struct dhttp;

/* Call once, before any other thread exists. */
int dhttp_global_init(char *err, size_t errlen);
void dhttp_global_term(void);

/* Starts serving on fd, a listening TCP socket (still the caller's: close it
 * after dhttp_stop). The threads run with every signal blocked, so signals
 * reach the caller's loop. Returns NULL with the reason in err. */
struct dhttp *dhttp_start(int fd, const struct dhttp_params *p, xmlrpc_registry *reg,
    char *err, size_t errlen);

/* Stops accepting, waits for the connections open to end (each within its
 * deadlines), frees. */
void dhttp_stop(struct dhttp *h);

void dhttp_counters(struct dhttp *h, struct dhttp_counters *out);

#endif
