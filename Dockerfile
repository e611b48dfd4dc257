# berth-csi container image (docs/kubernetes.md):
#
#   docker build -t <registry>/berth-csi:0.1.0 .
#
# Stage 1 builds berth-csi alone with the `release` preset from Debian 12's
# packages (the build dependencies of scripts/install-deps that berth-csi
# needs). Stage 2 is bookworm-slim with exactly what berth-csi runs and
# links:
#   - tools it executes: mkfs.ext4, e2fsck, resize2fs (e2fsprogs); mkfs.xfs,
#     xfs_growfs (xfsprogs); blkid (util-linux). Loop devices, mounts and
#     freezing use the kernel directly (LOOP_CONFIGURE, mount(2), FIFREEZE),
#     so neither losetup nor mount/umount is needed.
#   - the packages of its NEEDED shared libraries (`objdump -p` mapped with
#     `dpkg -S`); tests/deploy/dockerfile_test checks this list against the
#     binary the tree builds. The Kubernetes API client of
#     --adopt-snapshot-contents (http/api_client) adds no library.

FROM debian:bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc \
      libabsl-dev libsqlite3-dev libyaml-cpp-dev libyaml-dev nlohmann-json3-dev libcli11-dev \
      libspdlog-dev libfmt-dev libboost-dev libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt CMakePresets.json ./
COPY cmake cmake
COPY proto proto
COPY src src
RUN cmake --preset release -DBERTH_BUILD_TESTS=OFF -DBERTH_BUILD_BENCH=OFF -DBERTH_MIMALLOC=OFF \
 && cmake --build --preset release --target berth-csi \
 && strip --strip-unneeded build/release/berth-csi

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      e2fsprogs xfsprogs util-linux \
      libc6 libgcc-s1 libstdc++6 libssl3 \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 libspdlog1.10 libfmt9 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/release/berth-csi /usr/local/bin/berth-csi
ENTRYPOINT ["/usr/local/bin/berth-csi"]
