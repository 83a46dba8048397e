# syntax=docker/dockerfile:1
# gracekeeper's container image: the operator (`gracekeeper run`), non-root,
# on a minimal Debian 13 runtime.
#
#   docker build -t gracekeeper:0.1.0 .
#   docker tag gracekeeper:0.1.0 <your-registry>/gracekeeper:0.1.0 && docker push ...
#
# Build stage: Debian 13 (trixie), the build half of hack/install-deps (its
# compiler, CMake, and the libraries CMakeLists.txt finds) and the CMake build
# of the README, tests and benchmarks off. hack/install-deps itself is not run
# here: its package list also installs the developer tools (clang-16,
# clang-format-14, clang-tidy-14, Boost 1.81 by versioned name), and Debian 13
# has none of those names, so it stops at apt-get. On Debian 13 prometheus-cpp
# comes from the prometheus-cpp-dev package, as install-deps does there.
#
# The base images are build arguments, so that a build can name them by
# digest: hack/image passes the digests of the base images it made, e.g.
#   --build-arg BUILD_IMAGE=debian:trixie@sha256:<digest>
# and a Docker build can pin the registry's the same way.
ARG BUILD_IMAGE=debian:trixie
ARG RUNTIME_IMAGE=debian:trixie-slim
FROM ${BUILD_IMAGE} AS build
ARG DEBIAN_FRONTEND=noninteractive
# The image's time stamps (buildah --timestamp, hack/image): declared in
# each stage so that the layer cache is keyed by it, as a step of another
# time stamp is another layer.
ARG SOURCE_DATE_EPOCH
# build-packages.tsv: every package of the build stage, with its version (the
# compiler and the libraries compiled in): hack/image's SBOM reads it.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config ca-certificates \
      libyaml-cpp-dev nlohmann-json3-dev libspdlog-dev libfmt-dev \
      libboost-dev libboost-url-dev libssl-dev prometheus-cpp-dev zlib1g-dev \
      libmimalloc-dev \
 && rm -rf /var/lib/apt/lists/* \
 && dpkg-query -W -f='${Package}\t${Version}\t${Architecture}\n' | LC_ALL=C sort >/build-packages.tsv
WORKDIR /src
COPY CMakeLists.txt ./
COPY include/ include/
COPY src/ src/
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGRACEKEEPER_TESTS=OFF -DGRACEKEEPER_BENCH=OFF \
 && cmake --build /build --target gracekeeper \
 && strip /build/gracekeeper \
 && /build/gracekeeper version \
 && /build/gracekeeper run --help >/dev/null

# Runtime stage: only the shared libraries the binary links (ldd), the CA
# bundle (an https Prometheus with a public CA), and the binary.
# apt's and dpkg's logs and ldconfig's cache hold the time of the build:
# removed, so that two builds of the same sources give the same image
# (hack/image --check-reproducible).
FROM ${RUNTIME_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
ARG SOURCE_DATE_EPOCH
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates libyaml-cpp0.8 libspdlog1.15 libfmt10 libboost-url1.83.0 \
      libssl3t64 libprometheus-cpp-core1.0 libstdc++6 zlib1g libmimalloc3 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/* /var/log/apt /var/log/dpkg.log \
      /var/log/alternatives.log /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old
COPY --from=build /build-packages.tsv /usr/share/gracekeeper/build-packages.tsv
COPY --from=build /build/gracekeeper /gracekeeper
# Fails the image build when a shared library is missing.
RUN /gracekeeper version
USER 65532:65532
# /metrics and /healthz /readyz (the chart's and config/manager's ports).
EXPOSE 8080 8081
ENTRYPOINT ["/gracekeeper", "run"]
