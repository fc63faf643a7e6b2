/* slot-dird configuration (src/directory/dconf.c): defaults, every kind of
 * key, and broken files with the line named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "slot/ident.h"
#include "../../src/directory/dconf.h"

static char path[64];

static const char *
write_conf(const char *text)
{
	snprintf(path, sizeof(path), "/tmp/slot-test-dconf-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void
test_defaults_match_example(void **state)
{
	struct dconf c, d;
	char err[256], b[EP_STRLEN];
	(void)state;

	/* etc/dird.conf lists the defaults: loading it changes nothing. */
	assert_int_equal(dconf_load(&c, "etc/dird.conf", err, sizeof(err)), 0);
	dconf_defaults(&d);
	assert_string_equal(ep_fmt(&c.listen, b), "0.0.0.0:7602");
	assert_true(ep_eq(&c.listen, &d.listen));
	assert_string_equal(c.key_file, d.key_file);
	assert_string_equal(c.state_file, "/var/lib/slot/dird.state");
	assert_string_equal(c.state_file, d.state_file);
	assert_string_equal(c.control_socket, d.control_socket);
	assert_int_equal(c.metrics_listen.addr.family, 0);	/* off */
	assert_int_equal(d.metrics_listen.addr.family, 0);
	assert_int_equal(c.log_level, d.log_level);
	assert_int_equal(c.max_clock_skew_ms, 30000);
	assert_int_equal(c.auth_mode, IDENT_MODE_IDENTITY);
	assert_int_equal(d.auth_mode, IDENT_MODE_IDENTITY);
	assert_string_equal(c.id_key, d.id_key);
	assert_string_equal(c.id_cert, d.id_cert);
	assert_string_equal(c.id_ca, d.id_ca);
	assert_string_equal(c.revoked, "");
	assert_string_equal(d.revoked, "");
	assert_int_equal(c.max_body, 65536);
	assert_int_equal(c.max_body, d.max_body);
	assert_int_equal(c.max_conns, d.max_conns);
	assert_int_equal(c.max_conns, 64);
	assert_int_equal(c.max_header, 8192);
	assert_int_equal(c.max_header, d.max_header);
	assert_int_equal(c.max_conns_per_source, 8);
	assert_int_equal(c.max_conns_per_source, d.max_conns_per_source);
	assert_int_equal(c.header_timeout_ms, 5000);
	assert_int_equal(c.header_timeout_ms, d.header_timeout_ms);
	assert_int_equal(c.body_timeout_ms, 5000);
	assert_int_equal(c.body_timeout_ms, d.body_timeout_ms);
	assert_int_equal(c.max_relays, d.max_relays);
	assert_int_equal(c.max_report_entries, d.max_report_entries);
	assert_int_equal(c.heartbeat_interval_ms, 30000);
	assert_int_equal(c.expire_after_ms, 120000);
	assert_true(c.inflation == 2.0 && d.inflation == 2.0);
	assert_true(c.max_intra_rtt_ms == 50.0);
	assert_int_equal(c.regroup_interval_ms, d.regroup_interval_ms);
}

static void
test_values(void **state)
{
	struct dconf c;
	char err[256], b[EP_STRLEN];
	(void)state;

	write_conf("[dird]\nlisten = [::1]:9000\nstate_file =\nlog_level = debug\n"
	    "metrics_listen = 127.0.0.1:9762\n"
	    "max_clock_skew = 1m\n"
	    "[limits]\nmax_body = 1M\nmax_conns = 8\nrequest_timeout = 2s\n"
	    "max_relays = 10\nmax_report_entries = 5\n"
	    "[relays]\nheartbeat_interval = 1s\nexpire_after = 2s\n"
	    "[groups]\ninflation = 1.5\nmax_intra_rtt = 20.5\nregroup_interval = 0\n");
	assert_int_equal(dconf_load(&c, path, err, sizeof(err)), 0);
	unlink(path);
	assert_string_equal(ep_fmt(&c.listen, b), "[::1]:9000");
	assert_string_equal(c.state_file, "");
	assert_string_equal(ep_fmt(&c.metrics_listen, b), "127.0.0.1:9762");
	assert_int_equal(c.log_level, SLOG_DEBUG);
	assert_int_equal(c.max_clock_skew_ms, 60000);
	assert_int_equal(c.max_body, 1 << 20);
	assert_int_equal(c.max_conns, 8);
	assert_int_equal(c.header_timeout_ms, 2000);	/* request_timeout: both */
	assert_int_equal(c.body_timeout_ms, 2000);
	assert_int_equal(c.max_relays, 10);
	assert_int_equal(c.max_report_entries, 5);
	assert_int_equal(c.heartbeat_interval_ms, 1000);
	assert_int_equal(c.expire_after_ms, 2000);
	assert_true(c.inflation == 1.5);
	assert_true(c.max_intra_rtt_ms == 20.5);
	assert_int_equal(c.regroup_interval_ms, 0);

	/* The limits one by one; a later key wins over request_timeout. */
	write_conf("[limits]\nrequest_timeout = 9s\nmax_header = 1k\nmax_conns_per_source = 2\n"
	    "header_timeout = 300ms\nbody_timeout = 1500ms\n");
	assert_int_equal(dconf_load(&c, path, err, sizeof(err)), 0);
	unlink(path);
	assert_int_equal(c.max_header, 1024);
	assert_int_equal(c.max_conns_per_source, 2);
	assert_int_equal(c.header_timeout_ms, 300);
	assert_int_equal(c.body_timeout_ms, 1500);
}

static void
bad(const char *text, const char *want)
{
	struct dconf c;
	char err[256] = "";

	write_conf(text);
	assert_int_equal(dconf_load(&c, path, err, sizeof(err)), -1);
	unlink(path);
	if (strstr(err, want) == NULL)
		fail_msg("error \"%s\" lacks \"%s\"", err, want);
}

static void
test_errors_name_the_line(void **state)
{
	(void)state;
	bad("[dird]\nlog_level = info\nbogus = 1\n", ":3: unknown key 'bogus'");
	/* slot-dird blamed the key for an unknown section. */
	bad("[relay]\nlisten = 1.2.3.4:5\n", ":2: unknown section [relay]");
	bad("[dird]\n\nlisten = 1.2.3.4\n", ":3:");
	bad("[dird]\nlisten = 1.2.3.4:0\n", "expected address:port");
	bad("[dird]\nmetrics_listen = 127.0.0.1\n", ":2: [dird] metrics_listen");
	bad("[limits]\nmax_conns = 0\n", ":2:");
	bad("[limits]\nmax_body = 1k\n", "max_body");
	bad("[limits]\nmax_relays = many\n", "max_relays");
	bad("[limits]\nrequest_timeout = 10ms\n", "between");
	bad("[limits]\nheader_timeout = 0\n", "between");
	bad("[limits]\nbody_timeout = 50ms\n", "between");
	bad("[limits]\nmax_conns_per_source = 0\n", "max_conns_per_source");
	bad("[limits]\nmax_header = 100\n", "max_header");
	bad("[relays]\nexpire_after = 30s\n", "must be greater than heartbeat_interval");
	bad("[relays]\nheartbeat_interval = 2m\n", "must be greater than heartbeat_interval");
	bad("[groups]\ninflation = 1\n", "inflation");
	bad("[groups]\ninflation = nan\n", "inflation");
	bad("[groups]\nmax_intra_rtt = -1\n", "max_intra_rtt");
	bad("[dird]\nlog_level = loud\n", "expected error, warn, info or debug");
	bad("[auth]\nmode = shared\n[dird]\nkey_file =\n", "must be set");
	bad("[auth]\ncertificate =\n", "[auth] mode identity needs key, certificate and ca");
	bad("[auth]\nmode = pgp\n", ":2: [auth] mode = pgp: expected identity or shared");
	bad("[dird]\ncontrol_socket =\n", "must be set");
	bad("this is not ini\n", ":1:");
}

static void
test_missing_file(void **state)
{
	struct dconf c;
	char err[256];
	(void)state;

	assert_int_equal(dconf_load(&c, "/nonexistent/dird.conf", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "/nonexistent/dird.conf"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults_match_example),
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_errors_name_the_line),
		cmocka_unit_test(test_missing_file),
	};
	return cmocka_run_group_tests_name("dconf", tests, NULL, NULL);
}
