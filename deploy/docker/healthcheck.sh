#!/bin/bash
# The image's HEALTHCHECK: GET /healthz on the port of ZARRGATE_LISTEN, healthy on 200.
#
# Plain bash (/dev/tcp), so the image needs no curl or wget. Exits 0 when zarrgate answers
# 200, 1 otherwise (nothing listening, another status, no answer within 3 s). Checks liveness
# only: a zarrgate whose catalog is unreachable is alive and degraded (GET /readyz), serving
# what it has cached, and restarting it would not help.
#
#   ZARRGATE_LISTEN=127.0.0.1:8080 deploy/docker/healthcheck.sh && echo healthy
set -u
listen=${ZARRGATE_LISTEN:-127.0.0.1:8080}
port=${listen##*:}
if ! exec 3<>"/dev/tcp/127.0.0.1/$port"; then
    echo "healthcheck: nothing listens on 127.0.0.1:$port" >&2
    exit 1
fi
printf 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nUser-Agent: zarrgate-healthcheck\r\nConnection: close\r\n\r\n' "$port" >&3
if ! IFS=' ' read -r -t 3 protocol status _ <&3; then
    echo "healthcheck: no answer from 127.0.0.1:$port within 3 s" >&2
    exit 1
fi
if [[ $protocol != HTTP/1.* || $status != 200 ]]; then
    echo "healthcheck: GET /healthz answered '$protocol $status'" >&2
    exit 1
fi
exit 0
