#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "slot/log.h"
#include "rulesync.h"

extern char **environ;

#define RETRY_MIN_MS 1000
#define RETRY_MAX_MS 30000
/* A restore that outlives its -w wait by this much is killed. */
#define KILL_GRACE_MS 2000
#define MSG_MAX 512

struct set {
	struct rules_set rs;		/* rs.n == 0: none */
	size_t job;			/* the one running or next */
	uint64_t gen;
};

struct rulesync {
	struct ev_loop *loop;
	rsync_done_fn *done;
	void *user;
	char iptables[RULES_TOOL_MAX];
	char nft[RULES_TOOL_MAX];
	struct rules_exec x;
	char tool[RULES_TOOL_MAX];	/* the running one, for the log */

	struct set next;		/* waiting (rs.n 0: none) */
	struct set cur;			/* running, or failed and due for a retry */
	pid_t pid;			/* the running restore; 0: none */
	int err_fd;			/* its stdout and stderr */
	ev_child child;
	ev_io err_io;
	ev_timer deadline;
	ev_timer retry;
	uint64_t retry_ms;		/* the next failure's delay */
	bool killed;
	char msg[MSG_MAX];
	size_t msglen;

	struct rsync_stats st;
};

static void start(struct rulesync *s);

static void
set_clear(struct set *x)
{
	rules_set_free(&x->rs);
	memset(x, 0, sizeof(*x));
}

static void
read_msg(struct rulesync *s)
{
	char tmp[1024];
	ssize_t n;

	while ((n = read(s->err_fd, tmp, sizeof(tmp))) > 0 || (n < 0 && errno == EINTR)) {
		if (n <= 0)
			continue;
		size_t k = (size_t)n;
		if (k > sizeof(s->msg) - 1 - s->msglen)
			k = sizeof(s->msg) - 1 - s->msglen;
		memcpy(s->msg + s->msglen, tmp, k);
		s->msglen += k;
	}
	if (n == 0 && ev_is_active(&s->err_io))
		ev_io_stop(s->loop, &s->err_io);	/* EOF: the child closed it */
	s->msg[s->msglen] = '\0';
}

static void
err_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	read_msg(w->data);
}

/* One line for the log: the tool's message without its newlines. */
static void
flatten(char *m)
{
	size_t n = strlen(m);

	while (n > 0 && (m[n - 1] == '\n' || m[n - 1] == ' '))
		m[--n] = '\0';
	for (char *p = m; *p; p++)
		if (*p == '\n')
			*p = ' ';
}

static void
schedule_retry(struct rulesync *s)
{
	uint64_t ms = s->retry_ms;

	s->retry_ms = s->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : s->retry_ms * 2;
	ev_timer_set(&s->retry, (double)ms / 1000, 0);
	ev_timer_start(s->loop, &s->retry);
}

static void
finish(struct rulesync *s, int status)
{
	char who[96];
	int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);

	ev_timer_stop(s->loop, &s->deadline);
	read_msg(s);
	ev_io_stop(s->loop, &s->err_io);
	close(s->err_fd);
	s->err_fd = -1;
	s->pid = 0;
	s->st.running = false;
	flatten(s->msg);

	/* The set's next tool (ip6tables-restore after iptables-restore), or
	 * a newer set that covers every tool of this one. */
	if (!s->killed && rc == 0 && s->cur.job + 1 < s->cur.rs.n) {
		if (s->next.rs.n)
			s->st.superseded++;
		else
			s->cur.job++;
		start(s);
		return;
	}
	if (!s->killed && rc == 0) {
		s->st.ok++;
		s->st.installed = s->cur.gen;
		s->retry_ms = RETRY_MIN_MS;
		uint64_t gen = s->cur.gen;
		set_clear(&s->cur);
		log_debug("rules: generation %llu installed", (unsigned long long)gen);
		if (s->next.rs.n)
			start(s);
		s->done(s->user, gen);	/* last: it may submit again */
		return;
	}
	s->st.failed++;
	/* A newer set is due anyway: it goes now, and supersedes this one. */
	bool newer = s->next.rs.n != 0;
	char retry[48];
	if (newer)
		snprintf(retry, sizeof(retry), "trying the newer set now");
	else
		snprintf(retry, sizeof(retry), "retrying in %llu s",
		    (unsigned long long)(s->retry_ms + 999) / 1000);
	if (s->killed) {
		s->st.killed++;
		log_warnx("rules: %s did not finish within %u s and was killed: %s; rules not "
		    "updated, %s", s->tool, s->x.wait_s + KILL_GRACE_MS / 1000, s->msg, retry);
	} else if (rules_lock_busy(rc, s->msg)) {
		s->st.lock_busy++;
		if (rules_lock_holder(NULL, who, sizeof(who)) > 0)
			log_warnx("rules: xtables lock held by %s for over %u s, rules not updated, %s",
			    who, s->x.wait_s, retry);
		else
			log_warnx("rules: xtables lock held by another program for over %u s, rules "
			    "not updated, %s", s->x.wait_s, retry);
	} else {
		log_warnx("rules: %s failed (%d): %s; rules not updated, %s",
		    s->tool, rc, s->msg[0] ? s->msg : "no message", retry);
	}
	if (newer) {
		set_clear(&s->cur);
		start(s);
	} else {
		s->cur.job = 0;		/* every text is whole: the retry runs all */
		schedule_retry(s);	/* cur stays, for the retry */
	}
}

static void
child_cb(struct ev_loop *loop, ev_child *w, int revents)
{
	struct rulesync *s = w->data;
	(void)revents;

	ev_child_stop(loop, w);
	finish(s, w->rstatus);
}

static void
deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct rulesync *s = w->data;
	(void)loop;
	(void)revents;

	/* child_cb follows once the kernel has it. */
	if (s->pid > 0 && !s->killed) {
		s->killed = true;
		kill(s->pid, SIGKILL);
	}
}

static void
retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct rulesync *s = w->data;
	(void)loop;
	(void)revents;

	if (s->pid == 0)
		start(s);
}

/* Starts the newest set: next if there is one (also between two tools of
 * cur: the newer set covers them all), else cur's job (its next tool, or a
 * retry). A failure to start counts as a failed run. */
static void
start(struct rulesync *s)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	struct rules_argv a;
	sigset_t none, dfl;
	int in = -1, p[2] = { -1, -1 }, rc;
	pid_t pid;

	ev_timer_stop(s->loop, &s->retry);
	if (s->next.rs.n) {
		set_clear(&s->cur);
		s->cur = s->next;
		memset(&s->next, 0, sizeof(s->next));
	}
	if (s->cur.rs.n == 0)
		return;
	const struct rules_job *j = &s->cur.rs.job[s->cur.job];
	if (s->cur.job == 0)
		s->st.runs++;
	s->killed = false;
	s->msglen = 0;
	s->msg[0] = '\0';
	if (rules_restore_argv(&s->x, j->family, &a) == -1) {
		snprintf(s->msg, sizeof(s->msg), "tool name too long");
		goto fail;
	}
	snprintf(s->tool, sizeof(s->tool), "%s", a.tool);
	if ((in = rules_input_fd(j->text, j->len)) == -1 || pipe2(p, O_CLOEXEC) == -1) {
		snprintf(s->msg, sizeof(s->msg), "cannot start %s: %s", a.tool, strerror(errno));
		goto fail;
	}
	(void)fcntl(p[0], F_SETFL, O_NONBLOCK);
	/* The child gets default signals and an empty mask (slotd ignores
	 * SIGPIPE). */
	sigemptyset(&none);
	sigemptyset(&dfl);
	sigaddset(&dfl, SIGPIPE);
	sigaddset(&dfl, SIGHUP);
	sigaddset(&dfl, SIGTERM);
	sigaddset(&dfl, SIGINT);
	sigaddset(&dfl, SIGCHLD);
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&attr);
	posix_spawn_file_actions_adddup2(&fa, in, 0);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &dfl);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	rc = posix_spawnp(&pid, a.tool, &fa, &attr, a.argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	close(in);
	in = -1;
	close(p[1]);
	p[1] = -1;
	if (rc != 0) {
		snprintf(s->msg, sizeof(s->msg), "cannot run %s: %s", a.tool, strerror(rc));
		goto fail;
	}
	s->pid = pid;
	s->err_fd = p[0];
	s->st.running = true;
	ev_child_set(&s->child, pid, 0);
	ev_child_start(s->loop, &s->child);
	ev_io_set(&s->err_io, p[0], EV_READ);
	ev_io_start(s->loop, &s->err_io);
	ev_timer_set(&s->deadline, (double)s->x.wait_s + KILL_GRACE_MS / 1000.0, 0);
	ev_timer_start(s->loop, &s->deadline);
	return;
fail:
	if (in >= 0)
		close(in);
	if (p[0] >= 0)
		close(p[0]);
	if (p[1] >= 0)
		close(p[1]);
	s->st.failed++;
	log_warnx("rules: %s; rules not updated, retrying in %llu s", s->msg,
	    (unsigned long long)(s->retry_ms + 999) / 1000);
	s->cur.job = 0;
	schedule_retry(s);
}

struct rulesync *
rsync_new(struct ev_loop *loop, rsync_done_fn *done, void *user)
{
	struct rulesync *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	s->loop = loop;
	s->done = done;
	s->user = user;
	s->err_fd = -1;
	s->retry_ms = RETRY_MIN_MS;
	snprintf(s->iptables, sizeof(s->iptables), "iptables");
	snprintf(s->nft, sizeof(s->nft), "nft");
	s->x = (struct rules_exec){ s->iptables, RULES_WAIT_DEFAULT, RULES_IPTABLES, s->nft };
	ev_child_init(&s->child, child_cb, 0, 0);
	ev_io_init(&s->err_io, err_cb, -1, EV_READ);
	ev_timer_init(&s->deadline, deadline_cb, 0, 0);
	ev_timer_init(&s->retry, retry_cb, 0, 0);
	s->child.data = s->err_io.data = s->deadline.data = s->retry.data = s;
	return s;
}

int
rsync_set_exec(struct rulesync *s, const struct rules_exec *x)
{
	const char *nft = x->nft && x->nft[0] ? x->nft : "nft";

	if (x->iptables == NULL || strlen(x->iptables) >= sizeof(s->iptables) ||
	    strlen(nft) >= sizeof(s->nft) || x->wait_s == 0)
		return -1;
	snprintf(s->iptables, sizeof(s->iptables), "%s", x->iptables);
	snprintf(s->nft, sizeof(s->nft), "%s", nft);
	s->x.wait_s = x->wait_s;
	s->x.backend = x->backend;
	return 0;
}

void
rsync_mark_installed(struct rulesync *s, uint64_t gen)
{
	if (gen > s->st.installed)
		s->st.installed = gen;
	if (gen > s->st.wanted)
		s->st.wanted = gen;
}

int
rsync_submit(struct rulesync *s, struct rules_set *rs, uint64_t gen)
{
	if (gen <= s->st.wanted || rs->n == 0) {
		rules_set_free(rs);
		return -1;
	}
	s->st.wanted = gen;
	if (s->next.rs.n)
		s->st.superseded++;
	set_clear(&s->next);
	s->next = (struct set){ *rs, 0, gen };
	memset(rs, 0, sizeof(*rs));
	/* A running restore finishes first (killing it halfway could leave one
	 * table new and the other old); a failed one waiting for its retry is
	 * superseded now. */
	if (s->pid == 0) {
		if (s->cur.rs.n)
			s->st.superseded++;
		s->retry_ms = RETRY_MIN_MS;
		start(s);
	}
	return 0;
}

uint64_t
rsync_installed(const struct rulesync *s)
{
	return s->st.installed;
}

void
rsync_get_stats(const struct rulesync *s, struct rsync_stats *out)
{
	*out = s->st;
}

void
rsync_free(struct rulesync *s)
{
	if (s == NULL)
		return;
	if (s->pid > 0) {
		int status;
		kill(s->pid, SIGKILL);
		while (waitpid(s->pid, &status, 0) == -1 && errno == EINTR)
			;
		ev_child_stop(s->loop, &s->child);
	}
	if (s->err_fd >= 0) {
		ev_io_stop(s->loop, &s->err_io);
		close(s->err_fd);
	}
	ev_timer_stop(s->loop, &s->deadline);
	ev_timer_stop(s->loop, &s->retry);
	set_clear(&s->cur);
	set_clear(&s->next);
	free(s);
}
