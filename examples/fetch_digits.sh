#!/bin/sh
# examples/fetch_digits.sh [DEST_DIR]: put the UCI handwritten digits (1797 8x8 images, 10 classes)
# into DEST_DIR/digits.csv (default: data/ next to this script's parent, which git ignores).
#
# Debian ships the set inside python3-sklearn (sklearn/datasets/data/digits.csv.gz). We download
# the package file with `apt-get download` (no install, no root, no Python) and extract only that
# member with dpkg-deb | tar. A local sklearn install is used instead when one exists.
# Each line of digits.csv is 64 pixel values (0..16) and the label (0..9).
# Exit status: 0 when the file is there, 1 when it could not be fetched.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-"$here/../data"}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
out="$dest/digits.csv"
member=usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz

if [ -s "$out" ] && [ "$(wc -l < "$out")" -eq 1797 ]; then
    exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ember-digits.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

if [ -r "/$member" ]; then
    cp "/$member" "$tmp/digits.csv.gz"
else
    for tool in apt-get dpkg-deb tar gzip; do
        if ! command -v "$tool" > /dev/null 2>&1; then
            echo "fetch_digits: '$tool' not found (a Debian-like system is needed)" >&2
            exit 1
        fi
    done
    if ! (cd "$tmp" && apt-get download -q python3-sklearn > "$tmp/apt.log" 2>&1); then
        echo "fetch_digits: 'apt-get download python3-sklearn' failed:" >&2
        tail -n 5 "$tmp/apt.log" >&2
        exit 1
    fi
    deb=$(ls "$tmp"/python3-sklearn_*.deb 2> /dev/null | head -n 1)
    if [ -z "$deb" ]; then
        echo "fetch_digits: no python3-sklearn package file was downloaded" >&2
        exit 1
    fi
    dpkg-deb --fsys-tarfile "$deb" | tar -xO "./$member" > "$tmp/digits.csv.gz"
fi

gzip -dc "$tmp/digits.csv.gz" > "$tmp/digits.csv"
lines=$(wc -l < "$tmp/digits.csv")
if [ "$lines" -ne 1797 ]; then
    echo "fetch_digits: expected 1797 rows, got $lines" >&2
    exit 1
fi
mv "$tmp/digits.csv" "$out"
echo "fetch_digits: wrote $out"
