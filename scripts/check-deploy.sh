#!/usr/bin/env bash
# Check everything under deploy/, the Dockerfile and .dockerignore, without a container engine:
#
#   scripts/check-deploy.sh                 # all parts
#   scripts/check-deploy.sh kubernetes cdn  # some: kubernetes, compose, cdn, docker
#
# kubernetes  renders deploy/kubernetes/base and every overlay with `kubectl kustomize` (or
#             `kustomize build`; fails when neither is on PATH), validates every resource
#             against the Kubernetes 1.29 and 1.37 JSON schemas (kubernetes-validate
#             --strict, schemas shipped in the package, no download), and
#             checks what the manifests promise: probes on /readyz and /healthz, non-root and
#             read-only root file system, the image's uid and port, the ConfigMap's
#             zarrgate.toml, terminationGracePeriodSeconds above drain_seconds + preStop,
#             selectors, HPA target, PDB, the example PostgreSQL's credentials.
# compose     deploy/compose.yaml against the compose specification's JSON schema (there is no
#             `docker compose` plugin here, and `docker compose config` would need one), then
#             depends_on, build context, bind mounts, ports on 127.0.0.1, DATABASE_URL against
#             the postgres service, the CDN's upstreams against the replicas.
# cdn         renders deploy/cdn with loopback upstreams (deploy/cdn/render.py) and runs
#             `nginx -t` on it. Needs nginx: apt-get install -y nginx-light.
# docker      copies the build context as .dockerignore selects it, replays the Dockerfile's
#             builder stage with its own COPY and RUN commands (same `cargo build --release
#             --locked --bin zarrgate`; its target/ is ~/.cache/zarrgate/docker-target
#             ($ZARRGATE_DOCKER_TARGET_DIR), kept between runs as a BuildKit cache mount would
#             be, so dependencies are built once per machine: about 2 minutes when they are
#             built, 10-15 the first time), then runs the result as the
#             runtime stage would: ENTRYPOINT + CMD, refused without a token on 0.0.0.0, the
#             HEALTHCHECK script against it (and failing once it stops), /healthz and /readyz,
#             the SQLite default in WORKDIR/data, and the Kubernetes and compose configurations.
#
# Python tools come from deploy/requirements.txt, in a venv made once and reused
# ($ZARRGATE_DEPLOY_VENV, default ~/.cache/zarrgate/deploy-venv-<hash of the file>). Work files
# go to target/check-deploy/. Exit status 0 when every part passes; each failing part says why.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

requirements=deploy/requirements.txt
hash=$(sha256sum "$requirements" | cut -c1-12)
venv=${ZARRGATE_DEPLOY_VENV:-${HOME}/.cache/zarrgate/deploy-venv-$hash}
marker="$venv/.zarrgate-installed"
if [[ ! -f $marker || $(cat "$marker") != "$hash" || ! -x $venv/bin/python ]]; then
    echo "check-deploy: creating $venv" >&2
    mkdir -p "$(dirname "$venv")"
    [[ -x $venv/bin/python ]] || "${PYTHON:-python3}" -m venv "$venv" >&2
    rm -f "$marker"
    "$venv/bin/python" -m pip install --disable-pip-version-check --quiet -r "$requirements" >&2
    printf '%s\n' "$hash" >"$marker"
fi

parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(kubernetes compose cdn docker)
failed=()
for part in "${parts[@]}"; do
    case $part in
        kubernetes|compose|cdn|docker) ;;
        *) echo "check-deploy: unknown part '$part' (kubernetes, compose, cdn, docker)" >&2; exit 2 ;;
    esac
    printf '\n== check-deploy %s\n' "$part"
    started=$SECONDS
    if "$venv/bin/python" deploy/tools/check_deploy.py "$part"; then
        echo "   ($((SECONDS - started)) s)"
    else
        failed+=("$part")
    fi
done

echo
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "check-deploy: FAILED: ${failed[*]} (see the PROBLEM lines above)" >&2
    exit 1
fi
echo "check-deploy: ${#parts[@]} passed, 0 failed"
