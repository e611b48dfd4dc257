#!/usr/bin/env bash
# mkimage.sh OUT.tar NAME ENTRYPOINT_JSON ROOTFS_DIR
# Packs ROOTFS_DIR as a one-layer OCI image archive (OCI image layout in a
# tar) named NAME (containerd's io.containerd.image.name annotation), with
# the given entrypoint. Deterministic: same input, same digests.
set -euo pipefail
out=$1 name=$2 entrypoint=$3 rootfs=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
blobs=$work/blobs/sha256
mkdir -p "$blobs"
tarit() { tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime "$@"; }

# put FILE: stores FILE as a blob; prints "digest size".
put() {
  local d s
  d=$(sha256sum "$1" | cut -d' ' -f1)
  s=$(stat -c %s "$1")
  mv "$1" "$blobs/$d"
  echo "sha256:$d $s"
}

tarit -C "$rootfs" -cf "$work/layer" .
read -r layer layer_size < <(put "$work/layer")
jq -cn --arg layer "$layer" --argjson entrypoint "$entrypoint" '{
  architecture: "amd64", os: "linux",
  config: {Entrypoint: $entrypoint, Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], WorkingDir: "/"},
  rootfs: {type: "layers", diff_ids: [$layer]},
  history: [{created_by: "berth images/mkimage.sh"}]
}' >"$work/config"
read -r config config_size < <(put "$work/config")
jq -cn --arg config "$config" --argjson config_size "$config_size" --arg layer "$layer" --argjson layer_size "$layer_size" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
  config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $config, size: $config_size},
  layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $layer, size: $layer_size}]
}' >"$work/manifest"
read -r manifest manifest_size < <(put "$work/manifest")
jq -cn --arg manifest "$manifest" --argjson manifest_size "$manifest_size" --arg name "$name" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
  manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $manifest, size: $manifest_size,
               platform: {architecture: "amd64", os: "linux"},
               annotations: {"io.containerd.image.name": $name, "org.opencontainers.image.ref.name": ($name | split(":") | last)}}]
}' >"$work/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci-layout"
tarit -C "$work" -cf "$out.tmp" oci-layout index.json blobs
mv "$out.tmp" "$out"
