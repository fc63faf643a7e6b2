/* slot-relayd configuration (src/relay/rconf.c): defaults, every kind of
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

#include "../../src/relay/rconf.h"

static char path[64];

static const char *
write_conf(const char *text)
{
	snprintf(path, sizeof(path), "/tmp/slot-test-rconf-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void
test_defaults_match_example(void **state)
{
	struct rconf c;
	char err[256], b[EP_STRLEN];
	(void)state;

	/* etc/relayd.conf lists the defaults: loading it changes nothing. */
	assert_int_equal(rconf_load(&c, "etc/relayd.conf", err, sizeof(err)), 0);
	struct rconf d;
	rconf_defaults(&d);
	assert_string_equal(c.user, d.user);
	assert_string_equal(c.key_file, d.key_file);
	assert_true(ep_eq(&c.probe_listen, &d.probe_listen));
	assert_true(ep_eq(&c.data_listen, &d.data_listen));
	assert_string_equal(ep_fmt(&c.control_listen, b), "0.0.0.0:7600");
	assert_int_equal(c.max_pipes, d.max_pipes);
	assert_int_equal(c.connect_timeout_ms, d.connect_timeout_ms);
	assert_int_equal(c.idle_timeout_ms, d.idle_timeout_ms);
	assert_int_equal(d.idle_timeout_ms, 0);	/* idle pipes live on */
	assert_int_equal(c.half_closed_timeout_ms, d.half_closed_timeout_ms);
	assert_int_equal(c.control_first_timeout_ms, d.control_first_timeout_ms);
	assert_int_equal(c.max_control_conns, d.max_control_conns);
	assert_int_equal(c.max_control_per_source, d.max_control_per_source);
	assert_true(c.control_rate == d.control_rate && c.control_burst == d.control_burst);
	assert_int_equal(c.max_kernel_pipes, d.max_kernel_pipes);
	assert_int_equal(c.user_timeout_ms, d.user_timeout_ms);
	assert_int_equal(c.keepalive_idle_ms, d.keepalive_idle_ms);
	assert_int_equal(c.pipe_size, d.pipe_size);
	assert_int_equal(c.rtt_cache_ttl_ms, d.rtt_cache_ttl_ms);
	assert_int_equal(c.max_clock_skew_ms, d.max_clock_skew_ms);
	assert_true(c.requester_rate == d.requester_rate);
	assert_memory_equal(c.policy.ports.bits, d.policy.ports.bits, sizeof(d.policy.ports.bits));
	assert_int_equal(c.policy.allow.n, 0);
	assert_int_equal(c.dir_urls.n, 0);
	assert_int_equal(c.advertise.addr.family, 0);
	assert_int_equal(c.metrics_listen.addr.family, 0);	/* off */
	assert_int_equal(d.metrics_listen.addr.family, 0);
	assert_int_equal(c.dir_timeout_ms, d.dir_timeout_ms);
	assert_int_equal(c.list_interval_ms, d.list_interval_ms);
	assert_int_equal(c.measure_interval_ms, d.measure_interval_ms);
	assert_true(c.measure_rate == d.measure_rate);
	assert_string_equal(c.congestion, d.congestion);
	assert_string_equal(d.congestion, "");	/* the system's */
	assert_string_equal(d.congestion_on_loss, "bbr");
	assert_string_equal(c.congestion_on_loss, d.congestion_on_loss);
	assert_int_equal(c.congestion_on_loss_set, 0);	/* the default may give way */
	assert_int_equal(c.learn_initcwnd, d.learn_initcwnd);
	assert_false(d.learn_initcwnd);		/* off unless asked */
	assert_int_equal(c.initcwnd_max, d.initcwnd_max);
	assert_int_equal(c.initcwnd_prefix4, d.initcwnd_prefix4);
	assert_int_equal(c.initcwnd_prefix6, d.initcwnd_prefix6);
	assert_int_equal(c.initcwnd_expiry_ms, d.initcwnd_expiry_ms);
	assert_int_equal(c.initcwnd_max_prefixes, d.initcwnd_max_prefixes);
	rconf_free(&c);
	rconf_free(&d);
}

static void
test_values(void **state)
{
	struct rconf c;
	char err[256];
	(void)state;

	write_conf("[relay]\nuser = nobody\ndata_listen = [::]:9000\nlog_level = debug\n"
	    "metrics_listen = [::1]:9761\n"
	    "[limits]\nconnect_timeout = 1500ms\npipe_size = 256k\nmax_pipes = 10\n"
	    "[policy]\nallowed_ports = 80, 443\nallow_destinations = 10.0.0.0/8, fd00::/8\n"
	    "public_address = 198.51.99.7, 2a00:1450::1\n"
	    "[probe]\nrequester_rate = 2.5\n[auth]\nmax_clock_skew = 1m\n");
	assert_int_equal(rconf_load(&c, path, err, sizeof(err)), 0);
	unlink(path);
	assert_string_equal(c.user, "nobody");
	assert_int_equal(c.data_listen.addr.family, AF_INET6);
	assert_int_equal(c.data_listen.port, 9000);
	assert_int_equal(c.metrics_listen.addr.family, AF_INET6);
	assert_int_equal(c.metrics_listen.port, 9761);
	assert_int_equal(c.log_level, SLOG_DEBUG);
	assert_int_equal(c.connect_timeout_ms, 1500);
	assert_int_equal(c.pipe_size, 262144);
	assert_int_equal(c.max_pipes, 10);
	assert_true(portset_has(&c.policy.ports, 443));
	assert_false(portset_has(&c.policy.ports, 22));
	assert_int_equal(c.policy.allow.n, 2);
	assert_int_equal(c.policy.public.n, 2);
	assert_true(c.requester_rate == 2.5);
	assert_int_equal(c.max_clock_skew_ms, 60000);
	rconf_free(&c);

	write_conf("[directory]\nurls = http://192.0.2.53:7602/RPC2, http://dir2/RPC2\n"
	    "advertise = 198.51.100.7:7600\ntimeout = 2s\nlist_interval = 1m\n"
	    "measure_interval = 30s\nmeasure_rate = 0.5\n");
	assert_int_equal(rconf_load(&c, path, err, sizeof(err)), 0);
	unlink(path);
	assert_int_equal(c.dir_urls.n, 2);
	assert_string_equal(c.dir_urls.url[1], "http://dir2/RPC2");
	assert_int_equal(c.advertise.port, 7600);
	assert_int_equal(c.advertise2.addr.family, 0);
	assert_int_equal(c.dir_timeout_ms, 2000);
	assert_int_equal(c.list_interval_ms, 60000);
	assert_int_equal(c.measure_interval_ms, 30000);
	assert_true(c.measure_rate == 0.5);
	rconf_free(&c);

	/* a dual-stack relay registers once per family */
	write_conf("[directory]\nadvertise = [2001:db8::7]:7600, 198.51.100.7:7600\n");
	assert_int_equal(rconf_load(&c, path, err, sizeof(err)), 0);
	unlink(path);
	assert_int_equal(c.advertise.addr.family, AF_INET6);
	assert_int_equal(c.advertise2.addr.family, AF_INET);
	assert_int_equal(c.advertise2.port, 7600);
	rconf_free(&c);

	write_conf("[limits]\nidle_timeout = 3d\nhalf_closed_timeout = off\n"
	    "control_first_message_timeout = 1500ms\nmax_control_per_source = 2\n"
	    "max_control_connections = 50\ncontrol_rate = 3\ncontrol_burst = 4\n"
	    "max_kernel_pipes = 6\nuser_timeout = 0\nrelay_control_rate = 7\n"
	    "relay_control_burst = 8\nmax_pending_per_relay = 9\ndata_hold = off\n");
	assert_int_equal(rconf_load(&c, path, err, sizeof(err)), 0);
	unlink(path);
	assert_int_equal(c.idle_timeout_ms, 3 * 24 * 3600 * 1000ull);
	assert_int_equal(c.half_closed_timeout_ms, 0);
	assert_int_equal(c.control_first_timeout_ms, 1500);
	assert_int_equal(c.max_control_per_source, 2);
	assert_int_equal(c.max_control_conns, 50);
	assert_true(c.control_rate == 3 && c.control_burst == 4);
	assert_int_equal(c.max_kernel_pipes, 6);
	assert_int_equal(c.user_timeout_ms, 0);
	assert_true(c.relay_control_rate == 7 && c.relay_control_burst == 8);
	assert_int_equal(c.max_pending_per_relay, 9);
	assert_int_equal(c.data_hold_ms, 0);
	rconf_free(&c);
	write_conf("[limits]\nrelay_control_burst = 0.5\n");
	assert_int_equal(rconf_load(&c, path, err, sizeof(err)), -1);
	unlink(path);
	assert_non_null(strstr(err, "relay_control_burst must be at least 1"));

	write_conf("[pipe]\ncongestion = cubic\n");
	assert_int_equal(rconf_load(&c, path, err, sizeof(err)), 0);
	unlink(path);
	assert_string_equal(c.congestion, "cubic");
	/* what the legs' sockets get */
	struct sock_leg o;
	rconf_leg(&c, &o);
	assert_string_equal(o.congestion, "cubic");
	assert_int_equal(o.keepidle_s, 60);
	assert_int_equal(o.keepintvl_s, 10);
	assert_int_equal(o.keepcnt, 6);
	assert_int_equal(o.user_timeout_ms, 120000);
	assert_int_equal(o.linger_rst, 1);
	assert_int_equal(o.reset, 0);
	assert_int_equal(o.later, 0);
	/* a server leg's keepalive and user timeout: at half the shorter */
	assert_int_equal(rconf_leg_later_ms(&c), 30000);
	c.user_timeout_ms = 20000;
	assert_int_equal(rconf_leg_later_ms(&c), 10000);
	c.user_timeout_ms = 0;		/* off: keepalive alone */
	assert_int_equal(rconf_leg_later_ms(&c), 30000);
	rconf_free(&c);

	/* system: no TCP_CONGESTION at all, the host's default */
	write_conf("[pipe]\ncongestion = system\n");
	assert_int_equal(rconf_load(&c, path, err, sizeof(err)), 0);
	unlink(path);
	assert_string_equal(c.congestion, "");
	rconf_free(&c);

	/* off: a leg keeps its algorithm whatever it loses */
	write_conf("[pipe]\ncongestion_on_loss = off\n");
	assert_int_equal(rconf_load(&c, path, err, sizeof(err)), 0);
	unlink(path);
	assert_string_equal(c.congestion_on_loss, "");
	assert_int_equal(c.congestion_on_loss_set, 1);
	assert_string_equal(c.congestion, "");
	rconf_free(&c);
	write_conf("[pipe]\ncongestion = reno\ncongestion_on_loss = cubic\n");
	assert_int_equal(rconf_load(&c, path, err, sizeof(err)), 0);
	unlink(path);
	assert_string_equal(c.congestion, "reno");
	assert_string_equal(c.congestion_on_loss, "cubic");
	rconf_free(&c);

	/* the longest name the kernel takes: 15 characters */
	write_conf("[pipe]\ncongestion = abcdefghij_1234\n");
	assert_int_equal(rconf_load(&c, path, err, sizeof(err)), 0);
	unlink(path);
	assert_string_equal(c.congestion, "abcdefghij_1234");
	rconf_free(&c);

	write_conf("[pipe]\nlearn_initcwnd = yes\ninitcwnd_max = 64\ninitcwnd_prefix4 = 20\n"
	    "initcwnd_prefix6 = 56\ninitcwnd_expiry = 2m\ninitcwnd_max_prefixes = 100\n");
	assert_int_equal(rconf_load(&c, path, err, sizeof(err)), 0);
	unlink(path);
	assert_true(c.learn_initcwnd);
	assert_int_equal(c.initcwnd_max, 64);
	assert_int_equal(c.initcwnd_prefix4, 20);
	assert_int_equal(c.initcwnd_prefix6, 56);
	assert_int_equal(c.initcwnd_expiry_ms, 120000);
	assert_int_equal(c.initcwnd_max_prefixes, 100);
	rconf_free(&c);
}

static void
bad(const char *text, const char *want)
{
	struct rconf c;
	char err[256] = "";

	write_conf(text);
	assert_int_equal(rconf_load(&c, path, err, sizeof(err)), -1);
	unlink(path);
	if (strstr(err, want) == NULL)
		fail_msg("error \"%s\" lacks \"%s\"", err, want);
}

static void
test_errors_name_the_line(void **state)
{
	(void)state;
	bad("[relay]\nuser = x\nbogus = 1\n", ":3: unknown key 'bogus'");
	bad("[relays]\nuser = x\n", ":2: unknown section [relays]");
	bad("[relay]\n\ndata_listen = 1.2.3.4\n", ":3:");
	bad("[limits]\nmax_pipes = 0\n", ":2:");
	bad("[limits]\nmax_pipes = lots\n", "max_pipes");
	bad("[limits]\nconnect_timeout = 10ms\n", "between");
	bad("[limits]\nidle_timeout = 10ms\n", "0 (off) or between");
	bad("[limits]\nhalf_closed_timeout = never\n", "half_closed_timeout");
	bad("[limits]\ncontrol_first_message_timeout = 0\n", "between");
	bad("[limits]\nmax_control_per_source = 0\n", "max_control_per_source");
	bad("[limits]\ncontrol_burst = 0.5\n", "control_burst must be at least 1");
	bad("[limits]\npipe_size = 2M\n", "pipe_size");
	bad("[policy]\nallowed_ports = 80-70\n", "allowed_ports");
	bad("[policy]\nallow_destinations = 10.0.0.1/8\n", "allow_destinations");
	bad("[relay]\nlog_level = loud\n", "expected error, warn, info or debug");
	bad("[probe]\nrequester_burst = 0.5\n", "bursts must be at least 1");
	bad("[relay]\nkey_file =\n", "must be set");
	bad("this is not ini\n", ":1:");
	bad("[directory]\nurls = dir:7602\n", "expected http://host[:port]/path");
	bad("[directory]\nadvertise = 10.0.0.1\n", "expected address:port");
	bad("[directory]\nadvertise = 10.0.0.1:7600, 10.0.0.2:7600\n", "of one family");
	bad("[directory]\nadvertise = 10.0.0.1:7600 [2001:db8::1]:7600 10.0.0.3:7600\n",
	    "two of different families");
	bad("[directory]\nadvertise = 10.0.0.1:7600, [2001:db8::1]\n", "expected address:port");
	bad("[relay]\nmetrics_listen = localhost:9761\n", "expected address:port");
	bad("[directory]\nmeasure_rate = 0\n", "measure_rate");
	bad("[pipe]\ncongestion =\n", ":2: [pipe] congestion");
	bad("[pipe]\ncongestion = BBR\n", "expected an algorithm's name");
	bad("[pipe]\ncongestion = bbr cubic\n", "expected an algorithm's name");
	bad("[pipe]\ncongestion = abcdefghij_12345\n", "expected an algorithm's name");
	bad("[pipe]\ncongestion = ../x\n", "expected an algorithm's name");
	bad("[pipe]\ncongestion = off\n", "expected an algorithm's name");
	bad("[pipe]\ncongestion_on_loss = system\n", "or off");
	bad("[pipe]\ncongestion_on_loss = BBR\n", "[pipe] congestion_on_loss = BBR: expected");
	bad("[pipe]\ncongestion_on_loss =\n", ":2: [pipe] congestion_on_loss");
	bad("[pipe]\nlearn_initcwnd = maybe\n", "learn_initcwnd");
	/* Not above the kernel's own 10: nothing to learn. */
	bad("[pipe]\ninitcwnd_max = 10\n", "initcwnd_max");
	bad("[pipe]\ninitcwnd_prefix4 = 33\n", "initcwnd_prefix4");
	bad("[pipe]\ninitcwnd_prefix6 = 8\n", "initcwnd_prefix6");
	bad("[pipe]\ninitcwnd_expiry = 10ms\n", "initcwnd_expiry");
	bad("[relay]\nprobe_listen = 0.0.0.0:7000\n[directory]\nurls = http://d/RPC2\n",
	    "same port");
}

static void
test_missing_file(void **state)
{
	struct rconf c;
	char err[256];
	(void)state;

	assert_int_equal(rconf_load(&c, "/nonexistent/relayd.conf", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "/nonexistent/relayd.conf"));
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
	return cmocka_run_group_tests_name("rconf", tests, NULL, NULL);
}
