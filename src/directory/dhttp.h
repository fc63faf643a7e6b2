#ifndef SLOT_DIRECTORY_DHTTP_H
#define SLOT_DIRECTORY_DHTTP_H

#include <stddef.h>
#include <stdint.h>

#include <xmlrpc-c/server.h>

/*
 * The HTTP side of slot-dird: POST /RPC2 served by xmlrpc-c's Abyss HTTP
 * code with a method registry. Every other path answers 404, every other
 * HTTP method 405; a body over max_body gets an HTTP error without being
 * read; a body holding a DTD gets a MALFORMED fault without being parsed
 * (XML entities could blow a 64 KiB body up to gigabytes).
 *
 * We accept connections ourselves, on a thread of our own, and give each to
 * a thread that runs Abyss on it (ServerRunChannel). Abyss's own accept loop
 * (ServerRun) polls every 2 s for a free slot once max_conns connections are
 * open, and again at exit; ours waits on a condition variable, so a freed
 * slot is taken at once. With every slot busy, new connections wait in the
 * kernel's listen queue.
 *
 * One request per connection (Abyss's keep-alive off): a slot is held only
 * while a request is read and answered. The request's headers must arrive
 * within request_timeout (else 408, or 431 beyond 8 KiB), then its body
 * within request_timeout again (Abyss's timeout).
 */

struct dhttp_params {
	size_t max_body;
	unsigned max_conns;
	unsigned request_timeout_s;	/* for the headers, then for the body */
};

struct dhttp_counters {
	uint64_t conns;		/* accepted */
	uint64_t conns_active;	/* being served (gauge) */
	uint64_t requests;	/* XML-RPC bodies received */
	uint64_t refused;	/* of those, refused unparsed (a DTD) */
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

/* Stops accepting, waits for the connections open to end (each within
 * request_timeout, twice), frees. */
void dhttp_stop(struct dhttp *h);

void dhttp_counters(struct dhttp *h, struct dhttp_counters *out);

#endif
