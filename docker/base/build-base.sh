#!/usr/bin/env bash
# The base image from Debian packages only: debootstrap --variant=minbase <suite> with the packages of
# packages.txt, the host's CA certificates added (update-ca-certificates also refreshes Java's cacerts),
# apt lists dropped, then `docker import`. Usage: build-base.sh SUITE MIRROR TAG PACKAGES_FILE
set -euo pipefail
SUITE=$1 MIRROR=$2 TAG=$3 PACKAGES=$4
if ! command -v debootstrap > /dev/null; then
  echo "installing debootstrap (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap > /dev/null \
    || { apt-get update -q > /dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap > /dev/null; }
fi
ROOTFS=$(mktemp -d /var/tmp/shoal-rootfs.XXXXXX)
cleanup() {
  umount "$ROOTFS/proc" 2> /dev/null || true
  rm -rf --one-file-system "$ROOTFS"
}
trap cleanup EXIT
INCLUDE=$(grep -v '^\s*#' "$PACKAGES" | grep -v '^\s*$' | paste -sd, -)
echo "debootstrap --variant=minbase --include=$INCLUDE $SUITE"
debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$ROOTFS" "$MIRROR" > "$ROOTFS.log" 2>&1 \
  || { tail -n 30 "$ROOTFS.log" >&2; exit 1; }
rm -f "$ROOTFS.log"
mkdir -p "$ROOTFS/usr/local/share/ca-certificates"
for f in /usr/local/share/ca-certificates/*.crt; do
  [ -f "$f" ] && cp "$f" "$ROOTFS/usr/local/share/ca-certificates/"
done
mount -t proc proc "$ROOTFS/proc"
chroot "$ROOTFS" update-ca-certificates > /dev/null
umount "$ROOTFS/proc"
chroot "$ROOTFS" apt-get clean
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/tmp/* "$ROOTFS"/usr/share/doc/* \
  "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/*
tar --numeric-owner -C "$ROOTFS" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENV REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
  --change 'CMD ["/bin/bash"]' \
  - "$TAG" > /dev/null
echo "imported $TAG"
