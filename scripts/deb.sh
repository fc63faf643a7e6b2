#!/bin/sh
# Builds slot's Debian packages (debian/; docs/deploy.md, "The Debian
# packages") with debhelper in a copy of this tree, and checks them with
# lintian.
#
#   scripts/deb.sh [-k] [-n] [-v VERSION] OUTDIR        (make deb: OUTDIR=build/deb)
#
# OUTDIR/src is the copy, synced from the tree on every run (so the tree gets
# no debian/tmp and its parent no .deb); OUTDIR/obj holds the objects, kept
# from run to run, so that a rebuild compiles only what changed (another
# version: the few files that print it). The source package, the .deb files,
# the .changes and lintian.txt land in OUTDIR.
#   -v VERSION  build this version: an entry is added on top of the copy's
#               debian/changelog (the tree's stays as it is). Default: the
#               changelog's version, which must be the Makefile's SLOT_VERSION.
#   -k          keep the packages of earlier runs in OUTDIR (default: removed,
#               so that OUTDIR/slot-relay_*.deb names one package)
#   -n          no lintian
# Exit status: 0 built (and lintian reported no error and no warning), 1
# otherwise.
set -eu

usage() {
	echo "usage: $0 [-k] [-n] [-v VERSION] OUTDIR" >&2
	exit 2
}

version="" keep=0 lint=1
while getopts knv: opt; do
	case $opt in
	k) keep=1 ;;
	n) lint=0 ;;
	v) version=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage

need="dpkg-buildpackage dpkg-parsechangelog dh rsync"
[ $lint = 1 ] && need="$need lintian"
for t in $need; do
	if ! command -v "$t" >/dev/null 2>&1; then
		echo "deb.sh: $t is not installed: no packages built" \
		    "(sudo ./scripts/deps.sh installs debhelper, dpkg-dev, lintian and rsync)" >&2
		exit 1
	fi
done

top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)

# One version: the Makefile's SLOT_VERSION is the changelog's.
mk=$(sed -n 's/^SLOT_VERSION[[:space:]]*?=[[:space:]]*//p' "$top/Makefile")
cl=$(dpkg-parsechangelog -l "$top/debian/changelog" -S Version)
if [ "$mk" != "$cl" ]; then
	echo "deb.sh: debian/changelog says $cl, the Makefile's SLOT_VERSION $mk:" \
	    "add a changelog entry for $mk" >&2
	exit 1
fi

# The copy: what git would track (.gitignore's patterns), without .git, and
# without OUTDIR itself if it is inside the tree.
skip=""
case $out in
"$top"/*) skip="--exclude=/${out#"$top"/}" ;;
esac
mkdir -p "$out/src" "$out/obj"
# shellcheck disable=SC2086
rsync -a --delete --exclude=/.git --exclude=.pytest_cache --filter=':- .gitignore' $skip \
    "$top/" "$out/src/"

if [ -n "$version" ]; then
	cl=$version
	{
		printf 'slot (%s) unstable; urgency=medium\n\n' "$version"
		printf '  * Built by scripts/deb.sh -v %s.\n\n' "$version"
		printf ' -- %s  %s\n\n' \
		    "$(dpkg-parsechangelog -l "$out/src/debian/changelog" -S Maintainer)" \
		    "$(date -R)"
		cat "$top/debian/changelog"
	} > "$out/src/debian/changelog"
fi

if [ $keep = 0 ]; then
	rm -f "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo "$out"/*.dsc \
	    "$out"/*.tar.xz "$out"/lintian.txt
fi

# A full build (source and binaries), unsigned. debian/rules' clean leaves
# OUTDIR/obj (SLOT_B) alone.
echo "deb.sh: building slot $cl in $out/src" >&2
(cd "$out/src" && SLOT_B="$out/obj" dpkg-buildpackage -F --no-sign -J"$(nproc)") \
    > "$out/build.log" 2>&1 || {
	tail -n 60 "$out/build.log" >&2
	echo "deb.sh: dpkg-buildpackage failed (whole log: $out/build.log)" >&2
	exit 1
}
arch=$(dpkg --print-architecture)
changes="$out/slot_${cl}_${arch}.changes"

if [ $lint = 1 ]; then
	# Errors and warnings fail; overrides are explained in
	# debian/*.lintian-overrides themselves.
	if ! lintian --fail-on error,warning "$changes" > "$out/lintian.txt" 2>&1; then
		cat "$out/lintian.txt" >&2
		echo "deb.sh: lintian reports errors or warnings ($out/lintian.txt)" >&2
		exit 1
	fi
	echo "deb.sh: lintian: no error, no warning ($out/lintian.txt)" >&2
fi
ls "$out"/*_"${cl}"_*.deb
