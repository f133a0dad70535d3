#!/usr/bin/env bash
# Regenerates data/kjv.txt, mxdp's default training corpus: the King James
# Version of the Bible (1611, public domain), books Genesis through the Song
# of Solomon (the first 22 books), as plain ASCII text.
#
# Source: Debian's bible-kjv-text package (compressed text) read with the
# `bible` program of the bible-kjv package (Debian 12: version 4.38).
# Layout of the output: for each chapter a heading line ("Genesis 1"), a blank
# line, then one verse per line with the verse number removed; chapters are
# separated by a blank line. Nothing else is changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v bible >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bible-kjv bible-kjv-text >/dev/null
fi

out=data/kjv.txt
tmp=$(mktemp data/.kjv.XXXXXX)
trap 'rm -f "$tmp"' EXIT
# -l 100000: no line wrapping (one verse per line). `bible` prints a blank line
# before each chapter heading; drop the very first one, strip "  12 " numbers.
bible -l 100000 "Gen1:1-SSol8:14" </dev/null \
  | sed -E '1{/^$/d}; s/^ +[0-9]+ //' > "$tmp"
# Sanity: pure ASCII, first and last verse where expected.
if LC_ALL=C grep -q -P '[^\x00-\x7f]' "$tmp"; then echo "make_corpus: non-ASCII bytes" >&2; exit 1; fi
head -3 "$tmp" | grep -q "^In the beginning God created the heaven and the earth.$"
tail -1 "$tmp" | grep -q "^Make haste, my beloved, and be thou like to a roe or to a young hart upon the mountains of spices.$"
mv "$tmp" "$out"
trap - EXIT
echo "make_corpus: wrote $out ($(wc -c <"$out") bytes, $(wc -l <"$out") lines)"
sha256sum "$out"
