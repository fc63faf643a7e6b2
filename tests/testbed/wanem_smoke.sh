#!/bin/sh
# Hand check of slot-wanem (root): hosts a and b through router r, the
# emulator in r. Pings with 40 ms each way, over IPv4 and IPv6 (both
# addresses of a host in one "host" line of the matrix); then throughput with zero delay,
# and ping RTT under that load; then 1 Gbit/s with 40 ms each way, and the
# lateness of releases (late_us_*) and ping RTT under that load.
#   tests/testbed/wanem_smoke.sh [build/slot-wanem] [seconds]
set -eu
WANEM=$(realpath "${1:-build/slot-wanem}")
SECS=${2:-10}
P=wmsmoke$$
A=$P-a R=$P-r B=$P-b
DIR=$(mktemp -d)
PID=

cleanup() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
	for n in $A $R $B; do
		ip netns pids "$n" 2>/dev/null | xargs -r kill 2>/dev/null || true
		ip netns del "$n" 2>/dev/null || true
	done
	rm -rf "$DIR"
}
trap cleanup EXIT INT TERM

for n in $A $R $B; do
	ip netns add "$n"; ip -n "$n" link set lo up
	ip netns exec "$n" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
done
ip link add va netns "$A" type veth peer name ra netns "$R"
ip link add vb netns "$B" type veth peer name rb netns "$R"
ip -n "$A" addr add 10.77.1.2/24 dev va; ip -n "$A" link set va up
ip -n "$B" addr add 10.77.2.2/24 dev vb; ip -n "$B" link set vb up
ip -n "$R" addr add 10.77.1.1/24 dev ra; ip -n "$R" link set ra up
ip -n "$R" addr add 10.77.2.1/24 dev rb; ip -n "$R" link set rb up
ip -n "$A" route add default via 10.77.1.1
ip -n "$B" route add default via 10.77.2.1
ip -n "$A" addr add fd00:77:1::2/64 dev va nodad; ip -n "$R" addr add fd00:77:1::1/64 dev ra nodad
ip -n "$B" addr add fd00:77:2::2/64 dev vb nodad; ip -n "$R" addr add fd00:77:2::1/64 dev rb nodad
ip -n "$A" -6 route add default via fd00:77:1::1
ip -n "$B" -6 route add default via fd00:77:2::1
ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
# 1 Gbit/s x 80 ms = 10 MB in flight
for n in $A $B; do
	ip netns exec "$n" sysctl -qw net.ipv4.tcp_rmem="4096 131072 33554432" \
	    net.ipv4.tcp_wmem="4096 16384 33554432"
done
ip netns exec "$R" iptables -t mangle -A FORWARD -j NFQUEUE --queue-num 7
ip netns exec "$R" ip6tables -t mangle -A FORWARD -j NFQUEUE --queue-num 7
sleep 1		# the veths' carrier: IPv6 holds packets until the links are up

stats() {
	ip netns exec "$R" python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b"counters\n")
out = b""
while True:
    d = s.recv(4096)
    if not d: break
    out += d
print(" ".join(out.decode().split("\n")))' "$DIR/stats"
}

start() {
	[ -n "$PID" ] && { kill "$PID"; wait "$PID" || true; }
	printf '%s\n' "$1" > "$DIR/matrix"
	ip netns exec "$R" "$WANEM" --queue 7 --matrix "$DIR/matrix" --stats "$DIR/stats" --seed 1 &
	PID=$!
	sleep 0.5
}

echo "== 40 ms each way, IPv4 then IPv6"
start "host a 10.77.1.2 fd00:77:1::2
host b 10.77.2.2 fd00:77:2::2
a b 40
b a 40"
ip netns exec "$A" ping -c 10 -i 0.2 -q 10.77.2.2 | tail -1
ip netns exec "$A" ping -6 -c 10 -i 0.2 -q fd00:77:2::2 | tail -1
stats

echo "== zero delay, iperf3 ${SECS}s a -> b"
start "default 0"
ip netns exec "$B" iperf3 -s -D -1 >/dev/null
sleep 0.3
ip netns exec "$A" ping -i 0.05 -q -w "$SECS" 10.77.2.2 > "$DIR/ping" &
ip netns exec "$A" iperf3 -c 10.77.2.2 -t "$SECS" | grep -E 'sender|receiver'
wait $! 2>/dev/null || true
echo "ping under load: $(tail -1 "$DIR/ping")"
stats

echo "== 40 ms each way, iperf3 ${SECS}s a -> b at 1 Gbit/s"
start "10.77.1.2 10.77.2.2 40
10.77.2.2 10.77.1.2 40"
ip netns exec "$B" iperf3 -s -D -1 >/dev/null
sleep 0.3
ip netns exec "$A" ping -i 0.05 -q -w "$SECS" 10.77.2.2 > "$DIR/ping" &
ip netns exec "$A" iperf3 -c 10.77.2.2 -t "$SECS" -b 1G | grep -E 'sender|receiver'
wait $! 2>/dev/null || true
echo "ping under load: $(tail -1 "$DIR/ping")"
stats
