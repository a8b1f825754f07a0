# syntax=docker/dockerfile:1
#
# The zarrgate container image.
#
#   docker build -t zarrgate .
#   docker run --rm -p 8080:8080 -e ZARRGATE_ADMIN_TOKENS=$(openssl rand -hex 24) zarrgate
#
# The image listens on 0.0.0.0:8080, so it refuses to start without an admin token
# (ZARRGATE_ADMIN_TOKENS) unless ZARRGATE_INSECURE=true: anyone reaching the port could
# otherwise register and delete stores. With no DATABASE_URL the catalog is an SQLite file in
# /var/lib/zarrgate/data (the user's own directory: mount a volume there to keep it); set
# DATABASE_URL=postgres://... to run several replicas on one catalog.
#
# scripts/check-deploy.sh replays the builder stage's COPY and RUN steps outside a container
# (same commands, same context as .dockerignore selects) and checks the runtime stage's user,
# healthcheck and entrypoint against the built binary; keep the steps plain `RUN` shell lines.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# ---------------------------------------------------------------------------------------------
FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder
WORKDIR /build

# Dependencies first, in their own layer: only Cargo.toml and Cargo.lock are copied, with empty
# sources, so this (slow) layer is rebuilt only when the dependencies change, not on every edit
# of src/.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src \
 && echo 'fn main() {}' > src/main.rs \
 && : > src/lib.rs \
 && cargo build --release --locked --bin zarrgate \
 && rm -rf src

# The server itself. COPY keeps the files' modification times, which can be older than the
# placeholder build above: touch them so that cargo rebuilds the crate instead of shipping the
# placeholder `fn main() {}`. Then compress the debug sections (the release profile keeps line
# tables for backtraces, which stay readable compressed; about 180 MB become about 70 MB), and
# make sure the result is the real server (the placeholder prints no version).
COPY src ./src
COPY migrations ./migrations
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked --bin zarrgate \
 && objcopy --compress-debug-sections=zlib target/release/zarrgate /build/zarrgate \
 && /build/zarrgate --version | grep '^zarrgate ' \
 && /build/zarrgate serve --help >/dev/null

# ---------------------------------------------------------------------------------------------
FROM debian:${DEBIAN_RELEASE}-slim AS runtime

# ca-certificates: TLS to S3, GCS, Azure, https:// sources and PostgreSQL. libstdc++6 is linked
# by the binary (slim has it for apt already; named so that it stays). Nothing else: the
# healthcheck below needs no curl or wget (curl would add about 20 packages, krb5, ldap, ssh2,
# rtmp..., and their security updates, for one GET).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libstdc++6 \
 && rm -rf /var/lib/apt/lists/*

# A fixed numeric uid/gid, so that Kubernetes' runAsNonRoot can check it; its home is the
# working directory, where the default SQLite catalog (./data/zarrgate.db) is created.
RUN groupadd --system --gid 10001 zarrgate \
 && useradd --system --uid 10001 --gid zarrgate --home-dir /var/lib/zarrgate --no-create-home \
      --shell /usr/sbin/nologin zarrgate \
 && install -d -o zarrgate -g zarrgate -m 0750 /var/lib/zarrgate /var/lib/zarrgate/data

COPY --from=builder /build/zarrgate /usr/local/bin/zarrgate
COPY --chmod=0755 deploy/docker/healthcheck.sh /usr/local/bin/zarrgate-healthcheck
# Every key with its default, all commented out: a starting point for ZARRGATE_CONFIG.
COPY config/zarrgate.toml /etc/zarrgate/zarrgate.toml.example

# Environment variables override a configuration file (ZARRGATE_CONFIG): change the address
# with ZARRGATE_LISTEN, not with `listen` in the file. mimalloc does not commit its arenas
# eagerly (as .cargo/config.toml builds it; the builder stage does not see that file): pages
# freed by parse threads go back to the system, at once (purge delay 0: a 100,000-file
# registration peaked at 200 MiB instead of 300, chunks served as fast; bench/README.md, stop 51).
ENV ZARRGATE_LISTEN=0.0.0.0:8080 \
    ZARRGATE_LOG_FORMAT=json \
    MIMALLOC_ARENA_EAGER_COMMIT=0 \
    MIMALLOC_PURGE_DELAY=0

WORKDIR /var/lib/zarrgate
USER 10001:10001
EXPOSE 8080

# GET /healthz over bash's /dev/tcp (see deploy/docker/healthcheck.sh); orchestrators use their
# own HTTP probes (deploy/kubernetes uses /healthz for liveness and /readyz for readiness).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["zarrgate-healthcheck"]

ENTRYPOINT ["zarrgate"]
CMD ["serve"]
