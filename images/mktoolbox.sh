#!/usr/bin/env bash
# mktoolbox.sh OUT.tar BUSYBOX OCI_PACK
# The toolbox image (berth.local/toolbox:1): Debian's static busybox with a
# link for every applet at its usual path, /tmp, and a passwd/group with
# root and nobody. Every example and test container runs it offline.
set -euo pipefail
out=$1 busybox=$2 oci_pack=$3
if ldd "$busybox" >/dev/null 2>&1; then
  echo "mktoolbox: $busybox is dynamically linked; install Debian's busybox-static" >&2
  exit 1
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/root" "$root/proc" "$root/sys" "$root/dev"
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
"$busybox" --list-full | while read -r applet; do
  [ "$applet" = bin/busybox ] && continue
  mkdir -p "$root/$(dirname "$applet")"
  rel=$(realpath --relative-to="$root/$(dirname "$applet")" "$root/bin/busybox")
  ln -sf "$rel" "$root/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
"$oci_pack" --rootfs "$root" --name berth.local/toolbox:1 --entrypoint /bin/sh --out "$out" >/dev/null
