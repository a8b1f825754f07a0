#!/usr/bin/env python3
"""The checks of scripts/check-deploy.sh, one subcommand per part of deploy/:

    check_deploy.py kubernetes   render base and overlays with `kubectl kustomize`, validate
                                 against the Kubernetes JSON schemas, check what the manifests
                                 promise each other and the image
    check_deploy.py compose      compose-spec schema, then services, files, ports and
                                 credentials that must agree
    check_deploy.py cdn          render deploy/cdn for a local nginx and `nginx -t` it
    check_deploy.py docker       .dockerignore context, builder stage replayed with the same
                                 commands, runtime stage's user, healthcheck and entrypoint
                                 run against the built binary, with the Kubernetes and compose
                                 configurations

Each prints what it checks and ends with `FAILED: <reasons>` (exit 1) or `ok`. Runs in the
venv of deploy/requirements.txt (PyYAML, kubernetes-validate, check-jsonschema); everything
it writes goes under target/check-deploy/.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import urlopen
from urllib.error import HTTPError, URLError

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "deploy" / "cdn"))

import dockerfile as dockerfile_mod  # noqa: E402

WORK = REPO / "target" / "check-deploy"
# The replayed builder stage's target/ (as a BuildKit cache mount would be): outside the checkout,
# so that a fresh clone (CI) on a machine that built before compiles only zarrgate.
DOCKER_TARGET = Path(os.environ.get("ZARRGATE_DOCKER_TARGET_DIR")
                     or Path.home() / ".cache" / "zarrgate" / "docker-target")
K8S = REPO / "deploy" / "kubernetes"
# Kubernetes releases the manifests must be valid for: the oldest still common, the newest
# kubernetes-validate knows.
K8S_VERSIONS = ("1.29.0", "1.37.0")
LISTENING = re.compile(r"zarrgate listening on (http://[0-9.]+:\d+)")
# Libraries the runtime image has: libc6 and libgcc-s1 are in every Debian image, libstdc++6
# is installed by the Dockerfile (checked below).
RUNTIME_LIBS = {
    "libc.so.6": "libc6", "libm.so.6": "libc6", "libdl.so.2": "libc6",
    "libpthread.so.0": "libc6", "librt.so.1": "libc6", "ld-linux-x86-64.so.2": "libc6",
    "ld-linux-aarch64.so.1": "libc6", "libgcc_s.so.1": "libgcc-s1",
    "libstdc++.so.6": "libstdc++6",
}


class Problems:
    def __init__(self, part: str):
        self.part, self.items = part, []

    def check(self, ok: bool, message: str) -> bool:
        if not ok:
            self.items.append(message)
            print(f"  PROBLEM: {message}", flush=True)
        return ok

    def finish(self) -> int:
        if self.items:
            print(f"check-deploy {self.part}: FAILED:", flush=True)
            for item in self.items:
                print(f"  - {item}", flush=True)
            return 1
        print(f"check-deploy {self.part}: ok", flush=True)
        return 0


def say(message: str) -> None:
    print(message, flush=True)


def rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------------------------------
# Kubernetes


def kustomizations() -> list[Path]:
    found = sorted({p.parent for p in K8S.rglob("kustomization.yaml")})
    return found


def kustomize() -> list[str]:
    """`kubectl kustomize` (kubectl ships kustomize), or a standalone `kustomize build`."""
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    raise SystemExit("check-deploy kubernetes: neither kubectl nor kustomize is on PATH; install "
                     "kubectl (https://kubernetes.io/docs/tasks/tools/) to render "
                     "deploy/kubernetes")


def by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o.get("kind") == kind}


def runtime_facts() -> dict:
    """What the Dockerfile's runtime stage sets, for the manifests to agree with."""
    df = dockerfile_mod.parse(REPO / "Dockerfile")
    stage = df.stages[-1]
    env = {}
    for instr in stage.all("ENV"):
        env.update(dockerfile_mod.env_pairs(instr))
    user = stage.last("USER")
    expose = stage.last("EXPOSE")
    return {
        "env": env,
        "uid": user.args.split(":")[0] if user else None,
        "gid": user.args.split(":")[1] if user and ":" in user.args else None,
        "ports": [p.split("/")[0] for p in expose.args.split()] if expose else [],
        "cmd": (stage.last("CMD").exec_form() if stage.last("CMD") else None),
    }


def zarrgate_config_of(configmap: dict, where: str, problems: Problems) -> dict | None:
    text = (configmap.get("data") or {}).get("zarrgate.toml")
    if not problems.check(text is not None, f"{where}: ConfigMap {configmap['metadata']['name']} "
                                              "has no zarrgate.toml"):
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        problems.check(False, f"{where}: zarrgate.toml in the ConfigMap is not TOML: {e}")
        return None


def check_workloads(objects: list[dict], where: str, problems: Problems) -> None:
    """What the rendered manifests promise: probes, security, config, selectors, budgets."""
    facts = runtime_facts()
    deployments = by_kind(objects, "Deployment")
    services = by_kind(objects, "Service")
    configmaps = by_kind(objects, "ConfigMap")
    secrets = by_kind(objects, "Secret")
    if not problems.check("zarrgate" in deployments, f"{where}: no Deployment zarrgate"):
        return
    dep = deployments["zarrgate"]
    pod = dep["spec"]["template"]["spec"]
    labels = dep["spec"]["template"]["metadata"].get("labels") or {}
    selector = dep["spec"]["selector"].get("matchLabels") or {}
    problems.check(selector and all(labels.get(k) == v for k, v in selector.items()),
                   f"{where}: the Deployment's selector does not select its own pods")
    containers = {c["name"]: c for c in pod["containers"]}
    c = containers.get("zarrgate")
    if not problems.check(c is not None, f"{where}: the Deployment has no container zarrgate"):
        return
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
    env = {e["name"]: e.get("value") for e in c.get("env") or []}
    listen = env.get("ZARRGATE_LISTEN", facts["env"].get("ZARRGATE_LISTEN", ""))
    listen_port = int(listen.rsplit(":", 1)[1]) if ":" in listen else None
    problems.check(ports.get("http") == listen_port,
                   f"{where}: containerPort http {ports.get('http')} is not the listen port "
                   f"{listen_port} ({listen})")
    problems.check(str(listen_port) in facts["ports"],
                   f"{where}: listen port {listen_port} is not what the Dockerfile EXPOSEs "
                   f"({facts['ports']})")
    problems.check(listen.startswith("0.0.0.0:") or listen.startswith("[::]:"),
                   f"{where}: ZARRGATE_LISTEN {listen!r} is not reachable from outside the pod")

    def probe(name: str, path: str) -> None:
        p = c.get(name)
        if not problems.check(p is not None, f"{where}: the container has no {name}"):
            return
        get = p.get("httpGet") or {}
        problems.check(get.get("path") == path, f"{where}: {name} asks {get.get('path')}, "
                                                f"not {path}")
        port = get.get("port")
        problems.check(port == "http" or port == listen_port,
                       f"{where}: {name} targets port {port!r}, not the server's")

    probe("readinessProbe", "/readyz")
    probe("livenessProbe", "/healthz")
    if c.get("startupProbe"):
        probe("startupProbe", "/healthz")

    sc_pod = pod.get("securityContext") or {}
    sc = c.get("securityContext") or {}
    problems.check(sc.get("runAsNonRoot") or sc_pod.get("runAsNonRoot"),
                   f"{where}: runAsNonRoot is not set")
    problems.check(sc.get("readOnlyRootFilesystem") is True,
                   f"{where}: the zarrgate container's root file system is writable")
    problems.check(sc.get("allowPrivilegeEscalation") is False,
                   f"{where}: allowPrivilegeEscalation is not false")
    uid = sc.get("runAsUser", sc_pod.get("runAsUser"))
    problems.check(str(uid) == facts["uid"],
                   f"{where}: runAsUser {uid} is not the image's USER {facts['uid']}")
    res = c.get("resources") or {}
    problems.check(bool((res.get("requests") or {}).get("cpu")) and
                   bool((res.get("requests") or {}).get("memory")) and
                   bool((res.get("limits") or {}).get("memory")),
                   f"{where}: cpu/memory requests and a memory limit are needed (the HPA "
                   "scales on the cpu request)")
    args = c.get("args") or c.get("command")
    problems.check(args in (None, facts["cmd"]),
                   f"{where}: container args {args} differ from the image's CMD {facts['cmd']}")

    # configuration: the file from the ConfigMap, the secrets from the Secret
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts") or []}
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    config_path = env.get("ZARRGATE_CONFIG")
    config = None
    if problems.check(config_path is not None, f"{where}: ZARRGATE_CONFIG is not set"):
        mounted = [(name, path) for name, path in mounts.items()
                   if config_path.startswith(path.rstrip("/") + "/")]
        if problems.check(len(mounted) == 1, f"{where}: {config_path} is not inside a mount"):
            vol = volumes.get(mounted[0][0]) or {}
            cm_name = (vol.get("configMap") or {}).get("name")
            key = config_path[len(mounted[0][1].rstrip("/")) + 1:]
            if problems.check(cm_name in configmaps, f"{where}: {config_path} comes from "
                                                     f"ConfigMap {cm_name!r}, not rendered"):
                problems.check(key in (configmaps[cm_name].get("data") or {}),
                               f"{where}: ConfigMap {cm_name} has no key {key}")
                config = zarrgate_config_of(configmaps[cm_name], where, problems)
    if config is not None:
        problems.check("listen" not in config,
                       f"{where}: `listen` in the ConfigMap is overridden by ZARRGATE_LISTEN")
        problems.check("database_url" not in config and "admin_tokens" not in config,
                       f"{where}: database_url/admin_tokens belong in the Secret")
        drain = (config.get("http") or {}).get("drain_seconds", 30)
        grace = pod.get("terminationGracePeriodSeconds", 30)
        pre = (((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command")
        pause = int(pre[1]) if pre and pre[0] == "sleep" else 0
        problems.check(grace > drain + pause,
                       f"{where}: terminationGracePeriodSeconds {grace} must exceed "
                       f"http.drain_seconds {drain} + preStop {pause} s")
        hpas = by_kind(objects, "HorizontalPodAutoscaler")
        conns = config.get("database_max_connections", 16)
        most = max([h["spec"]["maxReplicas"] for h in hpas.values()] + [dep["spec"]["replicas"]])
        problems.check(most * conns <= 90,
                       f"{where}: {most} replicas x database_max_connections {conns} exceed "
                       "PostgreSQL's default max_connections (100) less a margin")
    refs = [e["secretRef"]["name"] for e in c.get("envFrom") or [] if "secretRef" in e]
    problems.check(bool(refs), f"{where}: no envFrom secretRef for DATABASE_URL and tokens")

    for name, svc in services.items():
        sel = svc["spec"].get("selector") or {}
        if all(labels.get(k) == v for k, v in sel.items()) and sel:
            for p in svc["spec"].get("ports") or []:
                target = p.get("targetPort")
                problems.check(target in ports or target in ports.values(),
                               f"{where}: Service {name} targets {target!r}, which the pod "
                               "does not expose")
    problems.check(any(all(labels.get(k) == v for k, v in (s["spec"].get("selector") or {}).items())
                       for s in services.values()), f"{where}: no Service selects the pods")
    for name, hpa in by_kind(objects, "HorizontalPodAutoscaler").items():
        ref = hpa["spec"]["scaleTargetRef"]
        problems.check(ref.get("kind") == "Deployment" and ref.get("name") in deployments,
                       f"{where}: HPA {name} scales {ref}, which is not rendered")
        problems.check(hpa["spec"].get("minReplicas", 1) <= hpa["spec"]["maxReplicas"],
                       f"{where}: HPA {name}: minReplicas above maxReplicas")
    pdbs = by_kind(objects, "PodDisruptionBudget")
    problems.check(bool(pdbs), f"{where}: no PodDisruptionBudget")
    for name, pdb in pdbs.items():
        sel = pdb["spec"]["selector"].get("matchLabels") or {}
        problems.check(sel and all(labels.get(k) == v for k, v in sel.items()),
                       f"{where}: PodDisruptionBudget {name} does not select the zarrgate pods")

    # an overlay that brings its own Secret and PostgreSQL: they must fit together
    for name in refs:
        if name in secrets:
            data = secrets[name].get("stringData") or {}
            for key in ("DATABASE_URL", "ZARRGATE_ADMIN_TOKENS"):
                problems.check(key in data, f"{where}: Secret {name} has no {key}")
            url = data.get("DATABASE_URL")
            if url:
                parts = urlsplit(url)
                if parts.hostname in services and parts.hostname != "zarrgate":
                    svc = services[parts.hostname]
                    sts = [s for s in by_kind(objects, "StatefulSet").values()
                           if all((s["spec"]["template"]["metadata"].get("labels") or {}).get(k) == v
                                  for k, v in (svc["spec"].get("selector") or {}).items())]
                    if problems.check(len(sts) == 1, f"{where}: Service {parts.hostname} of "
                                                     "DATABASE_URL selects no StatefulSet"):
                        pg = sts[0]["spec"]["template"]["spec"]["containers"][0]
                        pg_secret = [e["secretRef"]["name"] for e in pg.get("envFrom") or []
                                     if "secretRef" in e]
                        pg_env = {}
                        for s in pg_secret:
                            pg_env.update((secrets.get(s) or {}).get("stringData") or {})
                        problems.check(
                            (parts.username, parts.password, parts.path.lstrip("/")) ==
                            (pg_env.get("POSTGRES_USER"), pg_env.get("POSTGRES_PASSWORD"),
                             pg_env.get("POSTGRES_DB")),
                            f"{where}: DATABASE_URL's user, password or database differ from "
                            "the PostgreSQL Secret's")
                        problems.check(parts.port in {p["port"] for p in svc["spec"]["ports"]},
                                       f"{where}: DATABASE_URL port {parts.port} is not the "
                                       f"Service's")


def validate_schemas(files: list[Path], problems: Problems) -> None:
    for version in K8S_VERSIONS:
        cmd = [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet",
               "-k", version, *map(str, files)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        out = (done.stdout + done.stderr).strip()
        problems.check(done.returncode == 0,
                       f"Kubernetes {version} schemas: {out or 'kubernetes-validate failed'}")
        if done.returncode == 0:
            say(f"  schemas of Kubernetes {version}: {len(files)} files valid")


def cmd_kubernetes(_args) -> int:
    problems = Problems("kubernetes")
    out = WORK / "kubernetes"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    render = kustomize()
    rendered_files = []
    for directory in kustomizations():
        name = rel(directory).replace("deploy/kubernetes/", "").replace("/", "-")
        done = subprocess.run([*render, str(directory)], capture_output=True, text=True)
        if not problems.check(done.returncode == 0, f"{' '.join(render)} {rel(directory)}: "
                                                   f"{done.stderr.strip()}"):
            continue
        objects = [d for d in yaml.safe_load_all(done.stdout) if d]
        say(f"  {rel(directory)}: {len(objects)} resources (`{' '.join(render)}`)")
        path = out / f"{name}.yaml"
        path.write_text(done.stdout)
        rendered_files.append(path)
        check_workloads(objects, rel(directory), problems)
    # files outside every kustomization (the Secret example) are validated as they are
    listed = set()
    for directory in kustomizations():
        k = yaml.safe_load((directory / "kustomization.yaml").read_text()) or {}
        listed |= {(directory / r).resolve() for r in k.get("resources") or []}
    loose = [p for p in sorted(K8S.rglob("*.yaml"))
             if p.name != "kustomization.yaml" and p.resolve() not in listed]
    for p in loose:
        say(f"  {rel(p)}: not in a kustomization, validated as it is")
        for doc in yaml.safe_load_all(p.read_text()):
            if doc and doc.get("kind") == "Secret":
                values = " ".join(str(v) for v in (doc.get("stringData") or {}).values())
                problems.check("PLACEHOLDER" in values or "example" in values.lower(),
                               f"{rel(p)}: a Secret outside the overlays must hold placeholders")
    if rendered_files or loose:
        validate_schemas(rendered_files + loose, problems)
    return problems.finish()


# ---------------------------------------------------------------------------------------------
# compose


def cmd_compose(_args) -> int:
    problems = Problems("compose")
    path = REPO / "deploy" / "compose.yaml"
    done = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                           "vendor.compose-spec", str(path)], capture_output=True, text=True)
    if problems.check(done.returncode == 0, f"{rel(path)} against the compose specification: "
                                            f"{(done.stdout + done.stderr).strip()}"):
        say(f"  {rel(path)}: valid against the compose specification's schema")
    # `docker compose config` needs no engine, only the compose plugin, which may be missing
    plugin = shutil.which("docker") and subprocess.run(
        ["docker", "compose", "version"], capture_output=True, text=True).returncode == 0
    if plugin:
        done = subprocess.run(["docker", "compose", "-f", str(path), "config", "--quiet"],
                              capture_output=True, text=True,
                              env={**os.environ, "ZARRGATE_ADMIN_TOKENS": "check-deploy-0123456789"})
        if problems.check(done.returncode == 0, f"docker compose config: {done.stderr.strip()}"):
            say("  docker compose config: ok")
    else:
        say("  (no `docker compose` plugin here: schema and the checks below only)")
    doc = yaml.safe_load(path.read_text())
    services = doc.get("services") or {}
    base = path.parent
    for name, svc in services.items():
        for dep in (svc.get("depends_on") or {}):
            problems.check(dep in services, f"service {name} depends on unknown service {dep}")
        build = svc.get("build")
        if build:
            ctx = base / (build if isinstance(build, str) else build.get("context", "."))
            dockerfile = ctx / (build.get("dockerfile", "Dockerfile") if isinstance(build, dict)
                                else "Dockerfile")
            problems.check(dockerfile.is_file(), f"service {name}: {rel(dockerfile)} missing")
        for vol in svc.get("volumes") or []:
            source = vol.split(":")[0] if isinstance(vol, str) else vol.get("source", "")
            if source.startswith("."):
                problems.check((base / source).exists(),
                               f"service {name}: bind mount {source} does not exist")
            elif source:
                problems.check(source in (doc.get("volumes") or {}),
                               f"service {name}: volume {source} is not declared")
        for port in svc.get("ports") or []:
            problems.check(str(port).startswith("127.0.0.1:"),
                           f"service {name}: port {port} is published beyond this machine")

    zarrgates = {n: s for n, s in services.items() if "build" in s}
    problems.check(len(zarrgates) >= 2, "compose: fewer than two zarrgate replicas")
    facts = runtime_facts()
    pg = services.get("postgres", {}).get("environment") or {}
    upstreams = (REPO / "deploy" / "cdn" / "zarrgate-upstreams.conf").read_text()
    servers = re.findall(r"^\s*server\s+([^\s;]+)", upstreams, flags=re.M)
    listen_port = facts["env"].get("ZARRGATE_LISTEN", ":").rsplit(":", 1)[1]
    problems.check(sorted(servers) == sorted(f"{n}:{listen_port}" for n in zarrgates),
                   f"deploy/cdn/zarrgate-upstreams.conf lists {servers}, compose runs "
                   f"{sorted(zarrgates)} on port {listen_port}")
    for name, svc in zarrgates.items():
        env = svc.get("environment") or {}
        url = urlsplit(env.get("DATABASE_URL", ""))
        problems.check(url.hostname in services and (url.username, url.password,
                                                     url.path.lstrip("/")) ==
                       (pg.get("POSTGRES_USER"), pg.get("POSTGRES_PASSWORD"), pg.get("POSTGRES_DB")),
                       f"service {name}: DATABASE_URL does not match the postgres service")
        problems.check("ZARRGATE_ADMIN_TOKENS" in env,
                       f"service {name}: no ZARRGATE_ADMIN_TOKENS (it listens on 0.0.0.0)")
        problems.check("stop_grace_period" in svc, f"service {name}: no stop_grace_period")
        config_file = None
        for vol in svc.get("volumes") or []:
            src, _, dst = vol.partition(":")
            if dst.split(":")[0] == env.get("ZARRGATE_CONFIG"):
                config_file = base / src
        if problems.check(config_file is not None and config_file.is_file(),
                          f"service {name}: ZARRGATE_CONFIG is not a mounted file"):
            config = tomllib.loads(config_file.read_text())
            drain = (config.get("http") or {}).get("drain_seconds", 30)
            grace = int(str(svc.get("stop_grace_period", "10s")).rstrip("s"))
            problems.check(grace > drain, f"service {name}: stop_grace_period {grace}s must "
                                          f"exceed http.drain_seconds {drain}")
            for store in config.get("object_stores") or []:
                endpoint = urlsplit((store.get("options") or {}).get("endpoint", ""))
                if endpoint.hostname:
                    problems.check(endpoint.hostname in services,
                                   f"object store {store['name']}: endpoint host "
                                   f"{endpoint.hostname} is not a compose service")
    return problems.finish()


# ---------------------------------------------------------------------------------------------
# cdn


def nginx_binary() -> str | None:
    for candidate in (os.environ.get("ZARRGATE_TEST_NGINX"), shutil.which("nginx"),
                      "/usr/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def cmd_cdn(_args) -> int:
    import render  # deploy/cdn/render.py

    problems = Problems("cdn")
    nginx = nginx_binary()
    if not problems.check(nginx is not None, "nginx is not installed: apt-get install -y "
                                             "nginx-light (or set ZARRGATE_TEST_NGINX)"):
        return problems.finish()
    out = WORK / "cdn"
    shutil.rmtree(out, ignore_errors=True)
    try:
        main = render.render(out, "127.0.0.1:18081", ["127.0.0.1:18080", "127.0.0.1:18090"])
    except render.RenderError as e:
        problems.check(False, str(e))
        return problems.finish()
    done = subprocess.run([nginx, "-t", "-p", str(out), "-c", str(main)],
                          capture_output=True, text=True)
    version = subprocess.run([nginx, "-v"], capture_output=True, text=True).stderr.strip()
    if problems.check(done.returncode == 0, f"nginx -t: {done.stderr.strip()}"):
        say(f"  nginx -t ({version}) accepts deploy/cdn/nginx.conf + zarrgate-cdn.conf, "
            "rendered with loopback upstreams")
    text = (REPO / "deploy" / "cdn" / "zarrgate-cdn.conf").read_text()
    active = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    problems.check("proxy_cache_valid" not in active,
                   "zarrgate-cdn.conf: proxy_cache_valid would cache answers zarrgate did not "
                   "allow (errors included)")
    problems.check(re.search(r"location /api/ \{[^}]*proxy_cache off;", active, re.S) is not None,
                   "zarrgate-cdn.conf: /api/ must not be cached")
    problems.check("X-Cache-Status" in active, "zarrgate-cdn.conf: no X-Cache-Status header")
    return problems.finish()


# ---------------------------------------------------------------------------------------------
# docker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url: str) -> int:
    try:
        with urlopen(url, timeout=5) as r:
            return r.status
    except HTTPError as e:
        return e.code
    except URLError:
        return 0


class Running:
    def __init__(self, argv: list[str], env: dict, cwd: Path, log: Path):
        self.log = log
        with open(log, "wb") as sink:
            self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=sink, stderr=sink,
                                         stdin=subprocess.DEVNULL)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_listening(self, timeout: float = 30) -> str | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = LISTENING.search(self.text())
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                return None
            time.sleep(0.05)
        return None

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode


def forget_crate_fingerprints() -> None:
    """The replay builds the zarrgate crate (a placeholder, then the real one) from a copy
    of the sources, in DOCKER_TARGET. cargo records source paths relative to the package, so
    its fingerprint would make the next replay (from another clone, with older modification
    times) take whatever this one left in release/zarrgate as up to date. Removing the crate's
    fingerprints (not its dependencies') makes every replay recompile the crate."""
    for fp in (DOCKER_TARGET / "release" / ".fingerprint").glob("zarrgate-*"):
        if re.fullmatch(r"zarrgate-[0-9a-f]{16}", fp.name) and fp.is_dir():
            shutil.rmtree(fp)


def base_env() -> dict:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("ZARRGATE_") and k != "DATABASE_URL"}


def cmd_docker(args) -> int:
    problems = Problems("docker")
    df_path = REPO / "Dockerfile"
    try:
        df = dockerfile_mod.parse(df_path)
    except dockerfile_mod.DockerfileError as e:
        problems.check(False, str(e))
        return problems.finish()
    names = [s.name for s in df.stages]
    say(f"  stages: {', '.join(f'{s.name} ({s.base})' for s in df.stages)}")
    if not problems.check(len(df.stages) >= 2 and "builder" in names,
                          "the Dockerfile needs a `builder` stage and a runtime stage"):
        return problems.finish()
    builder, runtime = df.stage("builder"), df.stages[-1]
    problems.check(runtime.base.startswith("debian:") and runtime.base.endswith("-slim"),
                   f"runtime base {runtime.base} is not debian-slim")
    builds = [i.args for i in builder.all("RUN")
              if "cargo build --release --locked --bin zarrgate" in i.args]
    problems.check(len(builds) >= 1, "no `cargo build --release --locked --bin zarrgate` in "
                                     "the builder stage")
    problems.check(len(builds) >= 2, "no dependency layer: the builder should build the "
                                     "dependencies before copying src/")
    first_src = next((n for n, i in enumerate(builder.instructions)
                      if i.cmd == "COPY" and "src" in dockerfile_mod.copy_sources(i)[0]), None)
    first_build = next((n for n, i in enumerate(builder.instructions)
                        if i.cmd == "RUN" and "cargo build" in i.args), None)
    problems.check(first_src is not None and first_build is not None and first_build < first_src,
                   "the first cargo build must come before src/ is copied (dependency layer)")

    # runtime stage, statically
    user = runtime.last("USER")
    uid = user.args.split(":")[0] if user else None
    problems.check(uid is not None and uid not in ("0", "root"),
                   f"runtime USER is {uid!r}: the image must not run as root")
    problems.check(uid is not None and uid.isdigit(),
                   "runtime USER should be numeric, so that Kubernetes' runAsNonRoot can check it")
    runs = " ".join(i.args for i in runtime.all("RUN"))
    problems.check(uid is not None and re.search(rf"useradd\b.*--uid {uid}\b", runs) is not None,
                   f"no `useradd --uid {uid}` creates the runtime user")
    problems.check("ca-certificates" in runs, "ca-certificates is not installed")
    problems.check("rm -rf /var/lib/apt/lists" in runs, "apt lists are left in the image")
    hc = runtime.last("HEALTHCHECK")
    hc_cmd = None
    if problems.check(hc is not None, "no HEALTHCHECK"):
        form = hc.args.split(None, 1)
        if problems.check(form and form[0] == "CMD", f"HEALTHCHECK {hc.args}: no CMD"):
            hc_cmd = dockerfile_mod.Instruction("CMD", form[1], hc.line).exec_form()
            problems.check(hc_cmd is not None, "HEALTHCHECK CMD should be in exec form")
    expose = runtime.last("EXPOSE")
    problems.check(expose is not None and "8080" in expose.args.split(), "EXPOSE 8080 missing")
    env = {}
    for i in runtime.all("ENV"):
        env.update(dockerfile_mod.env_pairs(i))
    problems.check(env.get("ZARRGATE_LISTEN") == "0.0.0.0:8080",
                   f"ENV ZARRGATE_LISTEN is {env.get('ZARRGATE_LISTEN')!r}, not 0.0.0.0:8080")
    problems.check("DATABASE_URL" not in env,
                   "ENV DATABASE_URL would override database_url of a configuration file")
    entrypoint = runtime.last("ENTRYPOINT")
    cmd = runtime.last("CMD")
    problems.check(entrypoint is not None and entrypoint.exec_form() == ["zarrgate"],
                   'ENTRYPOINT must be ["zarrgate"]')
    problems.check(cmd is not None and cmd.exec_form() == ["serve"], 'CMD must be ["serve"]')
    workdir = runtime.last("WORKDIR")
    problems.check(workdir is not None and re.search(
        rf"install -d -o zarrgate\b[^&]*{re.escape(workdir.args)}\b", runs) is not None,
        "the runtime WORKDIR (where ./data/zarrgate.db goes) must be created for the user")
    binary_dest, hc_source = None, None
    for i in runtime.all("COPY"):
        sources, dest = dockerfile_mod.copy_sources(i)
        if i.flags.get("from") == "builder":
            binary_dest = (dest, sources[0])
        elif hc_cmd and dest.endswith("/" + hc_cmd[0]):
            hc_source = sources[0]
    problems.check(binary_dest is not None and binary_dest[0] == "/usr/local/bin/zarrgate",
                   "the binary must be copied from the builder to /usr/local/bin/zarrgate")
    problems.check(hc_cmd is None or hc_source is not None,
                   f"the healthcheck command {hc_cmd} is not copied into the image")
    if problems.items:
        return problems.finish()

    # the build context, as .dockerignore selects it
    rules = dockerfile_mod.load_ignore(REPO / ".dockerignore")
    context = WORK / "context"
    files = dockerfile_mod.sync_context(REPO, context, rules)
    size = sum((context / f).stat().st_size for f in files)
    say(f"  build context: {len(files)} files, {size / 1e6:.1f} MB (.dockerignore)")
    problems.check(size < 50e6, f"the build context is {size / 1e6:.0f} MB: .dockerignore lets "
                                "too much in")
    for i in runtime.all("COPY"):
        if "from" not in i.flags:
            for s in dockerfile_mod.copy_sources(i)[0]:
                problems.check((context / s).exists(),
                               f"runtime COPY {s}: not in the build context (.dockerignore?)")

    # the builder stage, replayed
    rootfs = WORK / "rootfs"
    # a fresh stage every time, like `docker build`; rmtree unlinks the target/ symlink and
    # never follows it
    shutil.rmtree(rootfs, ignore_errors=True)
    DOCKER_TARGET.mkdir(parents=True, exist_ok=True)
    say(f"  replaying stage builder in {rel(rootfs)} (target/ is {DOCKER_TARGET})")
    started = time.monotonic()
    try:
        dockerfile_mod.replay(builder, context, rootfs, {"target": DOCKER_TARGET},
                              log=say)
    except dockerfile_mod.DockerfileError as e:
        problems.check(False, f"builder stage: {e}")
        return problems.finish()
    finally:
        forget_crate_fingerprints()
    say(f"  builder stage done in {time.monotonic() - started:.0f} s")
    binary = rootfs / binary_dest[1].lstrip("/")
    if not problems.check(binary.is_file(), f"the builder stage made no {binary_dest[1]}"):
        return problems.finish()
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    problems.check(version.stdout.startswith("zarrgate "),
                   f"{binary_dest[1]} --version printed {version.stdout!r}: not the server")
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                        subprocess.run(["readelf", "-d", str(binary)], capture_output=True,
                                       text=True).stdout)
    installed = set(re.findall(r"[a-z0-9][a-z0-9.+-]+", runs))
    for lib in needed:
        pkg = RUNTIME_LIBS.get(lib)
        problems.check(pkg is not None, f"the binary links {lib}, which the runtime image does "
                                        "not provide: install its package and list it in "
                                        "RUNTIME_LIBS")
        if pkg == "libstdc++6":
            problems.check(pkg in installed, "the binary needs libstdc++6: install it")
    say(f"  binary {binary_dest[1]}: {binary.stat().st_size / 1e6:.0f} MB, links "
        f"{', '.join(needed)}")

    # the runtime stage's command, run
    hc_script = context / hc_source if hc_source else None
    live = WORK / "live"
    shutil.rmtree(live, ignore_errors=True)
    live.mkdir(parents=True)
    argv = [str(binary), *cmd.exec_form()]

    # 1. as the image starts by default: 0.0.0.0 and no token is refused, with the reason
    home = live / "default"
    home.mkdir()
    proc = Running(argv, {**base_env(), **env}, home, live / "default.log")
    try:
        code = proc.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.stop()
        code = None
    problems.check(code not in (0, None) and "ZARRGATE_ADMIN_TOKENS" in proc.text(),
                   "with the image's environment and no token, `zarrgate serve` must refuse to "
                   f"start naming ZARRGATE_ADMIN_TOKENS; it exited {code}: {proc.text()[-500:]}")
    say("  image defaults without a token: refused, naming ZARRGATE_ADMIN_TOKENS")

    # 2. with a token, in the image's working directory layout: healthcheck and probes
    port = free_port()
    home = live / "workdir"
    (home / "data").mkdir(parents=True)
    run_env = {**base_env(), **env, "ZARRGATE_LISTEN": f"127.0.0.1:{port}",
               "ZARRGATE_ADMIN_TOKENS": "check-deploy-token-0123456789"}
    proc = Running(argv, run_env, home, live / "workdir.log")
    url = proc.wait_listening()
    try:
        if problems.check(url is not None, f"`zarrgate serve` did not start: {proc.text()[-800:]}"):
            # the image's ZARRGATE_LISTEN with this run's port
            hc_listen = env["ZARRGATE_LISTEN"].rsplit(":", 1)[0] + f":{port}"
            done = subprocess.run([str(hc_script)], env={**base_env(), "ZARRGATE_LISTEN":
                                                         hc_listen},
                                  capture_output=True, text=True, timeout=20)
            problems.check(done.returncode == 0,
                           f"HEALTHCHECK {hc_cmd} failed on a running server: {done.stderr}")
            for path in ("/healthz", "/readyz"):
                problems.check(http_status(url + path) == 200, f"GET {path} is not 200")
            problems.check((home / "data" / "zarrgate.db").is_file(),
                           "the default SQLite catalog was not created in WORKDIR/data")
            say(f"  `{' '.join(['zarrgate', *cmd.exec_form()])}` serves; healthcheck, /healthz, "
                "/readyz ok; SQLite catalog in WORKDIR/data")
    finally:
        code = proc.stop()
    problems.check(code == 0, f"zarrgate did not exit cleanly on SIGTERM ({code})")
    done = subprocess.run([str(hc_script)], env={**base_env(), "ZARRGATE_LISTEN":
                                                 f"0.0.0.0:{port}"},
                          capture_output=True, text=True, timeout=20)
    problems.check(done.returncode != 0, "the healthcheck passes with no server running")
    say("  healthcheck fails once the server is gone")

    # 3. the configurations that deploy/ ships, on this binary
    configs = []
    rendered = WORK / "kubernetes"
    for path in sorted(rendered.glob("*.yaml")) if rendered.exists() else []:
        objects = [o for o in yaml.safe_load_all(path.read_text()) if o]
        dep = by_kind(objects, "Deployment").get("zarrgate")
        if not dep:
            continue
        c = dep["spec"]["template"]["spec"]["containers"][0]
        cms = by_kind(objects, "ConfigMap")
        cm = next(iter(cms.values()))
        text = (cm.get("data") or {}).get("zarrgate.toml", "")
        cfg = live / f"{path.stem}.toml"
        cfg.write_text(text)
        extra = {e["name"]: e["value"] for e in c.get("env") or [] if "value" in e}
        configs.append((f"Kubernetes {path.stem}", cfg, extra))
    if not rendered.exists():
        say("  (run `check_deploy.py kubernetes` first to include the Kubernetes ConfigMaps)")
    compose = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text())
    for name, svc in (compose.get("services") or {}).items():
        if "build" in svc:
            extra = {k: str(v) for k, v in (svc.get("environment") or {}).items()
                     if not str(v).startswith("${")}
            configs.append((f"compose {name}", REPO / "deploy" / "compose" / "zarrgate.toml",
                            extra))
            break
    for label, cfg, extra in configs:
        home = live / re.sub(r"\W+", "-", label)
        home.mkdir()
        port = free_port()
        run_env = {**base_env(), **env, **extra, "ZARRGATE_CONFIG": str(cfg),
                   "ZARRGATE_LISTEN": f"127.0.0.1:{port}",
                   "DATABASE_URL": f"sqlite://{home / 'catalog.db'}",
                   "ZARRGATE_ADMIN_TOKENS": "check-deploy-token-0123456789"}
        proc = Running(argv, run_env, home, live / f"{home.name}.log")
        url = proc.wait_listening()
        try:
            if problems.check(url is not None, f"{label}: zarrgate does not start with its "
                                               f"configuration: {proc.text()[-800:]}"):
                problems.check(http_status(url + "/readyz") == 200, f"{label}: /readyz not 200")
                say(f"  {label}: zarrgate starts with its configuration ({rel(cfg)})")
        finally:
            proc.stop()
    return problems.finish()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="part", required=True)
    for name, fn in (("kubernetes", cmd_kubernetes), ("compose", cmd_compose), ("cdn", cmd_cdn),
                     ("docker", cmd_docker)):
        sub.add_parser(name).set_defaults(fn=fn)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
