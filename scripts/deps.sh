#!/bin/sh
# Installs every build and test dependency of slot from Debian packages.
# Idempotent and non-interactive: apt-get update runs only when something is missing.
set -eu

PKGS="
build-essential pkg-config
libnetfilter-queue-dev libmnl-dev libev-dev libxmlrpc-core-c3-dev libcurl4-openssl-dev
libcmocka-dev libsodium-dev libinih-dev
iptables nftables iproute2 iputils-ping conntrack procps psmisc util-linux kmod
python3 python3-pytest python3-pytest-xdist python3-matplotlib python3-cryptography
nginx curl wget iperf3 haproxy socat valgrind openssh-server openssh-client rsync
ansible-core ansible-lint
groff-base man-db mandoc
clang libclang-rt-14-dev
debhelper dh-python dpkg-dev fakeroot lintian
"

missing=""
for p in $PKGS; do
	# dpkg-query exits 0 for removed-but-configured packages too, so check the status word.
	st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$st" = "installed" ] || missing="$missing $p"
done

if [ -z "$missing" ]; then
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "deps.sh: missing packages:$missing" >&2
	echo "deps.sh: run as root (or: sudo $0) to install them" >&2
	exit 1
fi

echo "deps.sh: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Daemons pulled in as test tools (nginx, haproxy, sshd) must not start on install.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' > "$policy"
	chmod 755 "$policy"
	created_policy=1
fi
trap '[ "$created_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "deps.sh: done" >&2
