#!/usr/bin/env bash
# mktoolbox.sh OUT.tar BUSYBOX OCI_PACK [REF [PROGRAM...]]
# The toolbox image (berth.local/toolbox:1): Debian's static busybox with a
# link for every applet at its usual path, /tmp, and a passwd/group with
# root and nobody. Every example and test container runs it offline.
#
# With REF and PROGRAMs, the same image named REF plus each host PROGRAM at
# its path and what it needs to run: the shared libraries `ldd` lists and the
# dynamic loader, at their paths (the loader's default search path finds them
# without an ld.so.cache). berth.local/sqlite-toolbox:1 is the toolbox plus
# Debian's /usr/bin/sqlite3, for the backup tests' SQLite writer.
set -euo pipefail
out=$1 busybox=$2 oci_pack=$3 name=${4:-berth.local/toolbox:1}
shift $(($# < 4 ? $# : 4))
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
for program in "$@"; do
  [ -x "$program" ] || { echo "mktoolbox: $program is not an executable" >&2; exit 1; }
  # ldd's lines: "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)",
  # "/lib64/ld-linux-x86-64.so.2 (0x...)", "linux-vdso.so.1 (0x...)" (the
  # kernel's: no file). "not found" is an error: the program would not run.
  libs=$(ldd "$program") || { echo "mktoolbox: ldd $program failed" >&2; exit 1; }
  if grep -q "not found" <<<"$libs"; then
    echo "mktoolbox: $program needs libraries this host lacks:" >&2
    grep "not found" <<<"$libs" >&2
    exit 1
  fi
  for file in "$program" $(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$libs"); do
    # A busybox applet link at the program's path gives way to the program.
    rm -f "$root$file"
    mkdir -p "$root$(dirname "$file")"
    cp -L "$file" "$root$file"
  done
done
"$oci_pack" --rootfs "$root" --name "$name" --entrypoint /bin/sh --out "$out" >/dev/null
