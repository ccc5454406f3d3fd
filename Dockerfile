# rtserver's container image: one static binary on Debian, run as a
# non-root user, configured by a mounted file and RTSERVER_* variables.
#
#   docker build -t rtserver:$(cat VERSION) --build-arg REVISION=$(git rev-parse HEAD) .
#   docker run -p 8080:8080 -v "$PWD/rt.yaml:/etc/rtserver/rtserver.yaml:ro" \
#     rtserver:$(cat VERSION) --config /etc/rtserver/rtserver.yaml
#
# It needs nothing but Debian's package mirrors and the Go module proxy:
# Debian's golang-go fetches the Go release go.mod asks for from the proxy
# (GOTOOLCHAIN), and the module's dependencies come from there too.
# cmd/rtserver/container_test.go runs this file's go build line with the
# same settings and checks what it makes: static, stripped, stamped.

FROM debian:trixie-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends golang-go ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# Debian's go defaults to its own release only; this lets it fetch the
# toolchain go.mod names, checked against the Go checksum database.
ENV GOTOOLCHAIN=go1.26.8 CGO_ENABLED=0 GOFLAGS=-mod=readonly
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG REVISION=
RUN go build -trimpath -buildvcs=false -ldflags="-s -w -X main.revision=${REVISION}" -o /out/rtserver ./cmd/rtserver

FROM debian:trixie-slim
# curl only serves the HEALTHCHECK below.
RUN apt-get update \
 && apt-get install -y --no-install-recommends curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin rtserver
COPY --from=build /out/rtserver /usr/local/bin/rtserver
USER 10001:10001
# Inside a container the listener must take connections from outside it:
# all interfaces, where the binary's own default is loopback only.
# Variables take precedence over the config file, so change the port here
# (-e RTSERVER_LISTEN=0.0.0.0:9000) or with --listen, not with the file's
# listen, and keep the HEALTHCHECK's port in step.
ENV RTSERVER_LISTEN=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD curl -fsS -o /dev/null http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/rtserver"]
