/* Binds slotd's SYN queue (src/client/synq.c) over and over while a child
 * floods SYNs through it, for test_rules: a packet queued while the queue
 * is being bound must not reach the callback (slotd's is not ready then:
 * it crashed on one), but be accepted unheld.
 *   slot-synq-bind QUEUE PORT SECONDS
 * floods 127.0.0.1:PORT, binds until SECONDS pass or 5 packets were queued
 * during a bind, and prints "binds=N early=E bind_accepted=A held=H". */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "slot/clock.h"
#include "../../src/client/synq.h"

struct state {
	struct synq *q;
	bool open;		/* synq_open returned */
	unsigned long long early, held;
};

static void
on_packet(void *user, uint32_t id, uint32_t mark, const uint8_t *pkt, size_t caplen,
    size_t wirelen, enum nlq_ct ct, uint32_t ct_status)
{
	struct state *s = user;
	(void)mark, (void)pkt, (void)caplen, (void)wirelen, (void)ct, (void)ct_status;

	if (!s->open) {
		s->early++;	/* s->q is not set yet: no verdict possible */
		return;
	}
	s->held++;
	synq_verdict(s->q, id, true, false, 0);
}

static _Noreturn void
flood(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

		if (fd < 0)
			_exit(1);
		(void)connect(fd, (struct sockaddr *)&a, sizeof(a));
		close(fd);
	}
}

int
main(int argc, char **argv)
{
	struct state s = { 0 };
	unsigned long long binds = 0, accepted = 0;
	char err[256];
	pid_t child;

	if (argc != 4) {
		fprintf(stderr, "usage: slot-synq-bind QUEUE PORT SECONDS\n");
		return 2;
	}
	uint16_t num = (uint16_t)atoi(argv[1]), port = (uint16_t)atoi(argv[2]);
	uint64_t end = clock_mono_us() + (uint64_t)(atof(argv[3]) * 1e6);

	if ((child = fork()) == 0)
		flood(port);
	while (clock_mono_us() < end && accepted < 5) {
		struct synq_stats st;

		s.open = false;
		if ((s.q = synq_open(num, 1024, on_packet, &s, err, sizeof(err))) == NULL) {
			fprintf(stderr, "slot-synq-bind: %s\n", err);
			kill(child, SIGKILL);
			return 1;
		}
		s.open = true;
		binds++;
		for (int i = 0; i < 4; i++)
			if (synq_read(s.q) == -1 && errno != EAGAIN && errno != EWOULDBLOCK)
				break;
		synq_stats(s.q, &st);
		accepted += st.bind_accepted;
		synq_close(s.q);
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	printf("binds=%llu early=%llu bind_accepted=%llu held=%llu\n", binds, s.early, accepted,
	    s.held);
	return s.early ? 3 : 0;
}
