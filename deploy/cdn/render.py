#!/usr/bin/env python3
"""Write a runnable copy of this directory's nginx configuration for a local nginx.

    deploy/cdn/render.py --out /tmp/cdn --listen 127.0.0.1:8081 \\
        --upstream 127.0.0.1:8080 --upstream 127.0.0.1:8090
    nginx -p /tmp/cdn -c /tmp/cdn/nginx.conf -g 'daemon off;'

The copy is the shipped configuration with only what is specific to a machine replaced:

- zarrgate-upstreams.conf: the `server` lines (their options kept) become the --upstream
  addresses;
- zarrgate-cdn.conf: the `listen` address and the proxy_cache_path directory;
- nginx.conf: pid, error log and temporary directories under --out, inserted before the
  shipped text (and `user root` when run as root, so that workers can use --out).

Every replaced line must be found exactly once: a shipped file that no longer has it is an
error, so the copy can never silently drift from the shipped files. tests/python/test_cdn.py
and scripts/check-deploy.sh (`nginx -t`) both run the copy. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMP_DIRECTIVES = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


class RenderError(Exception):
    pass


def _replace_once(text: str, pattern: str, replacement, where: str) -> str:
    """``re.sub`` of the one match of ``pattern``; ``replacement`` is a string (taken
    literally) or a function of the match."""
    found = list(re.finditer(pattern, text, flags=re.M))
    if len(found) != 1:
        raise RenderError(f"{where}: expected exactly one line matching {pattern!r}, found "
                          f"{len(found)}; update deploy/cdn/render.py with the shipped file")
    repl = replacement if callable(replacement) else (lambda _m: replacement)
    return re.sub(pattern, repl, text, count=1, flags=re.M)


def render(out: Path, listen: str, upstreams: list[str], cache_dir: Path | None = None,
           source: Path = HERE) -> Path:
    """Write nginx.conf, zarrgate-cdn.conf and zarrgate-upstreams.conf into ``out``;
    return the path of the main file."""
    if not upstreams:
        raise RenderError("at least one upstream address is needed")
    out = Path(out).resolve()
    cache_dir = Path(cache_dir).resolve() if cache_dir else out / "cache"
    for sub in ("tmp", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)

    # the replicas
    ups_src = (source / "zarrgate-upstreams.conf").read_text()
    servers = re.findall(r"^(\s*)server\s+(\S+?)((?:\s+[^;\s]+)*)\s*;", ups_src, flags=re.M)
    if not servers:
        raise RenderError("zarrgate-upstreams.conf: no `server` line in the upstream block")
    indent, _addr, options = servers[0]
    lines = "".join(f"{indent}server {a}{options};\n" for a in upstreams)
    first = True

    def swap(_m: re.Match) -> str:
        nonlocal first
        if first:
            first = False
            return lines.rstrip("\n")
        return "\0"

    ups = re.sub(r"^\s*server\s+\S+(?:\s+[^;\s]+)*\s*;", swap, ups_src, flags=re.M)
    ups = re.sub(r"^\0\n?", "", ups, flags=re.M)
    (out / "zarrgate-upstreams.conf").write_text(ups)

    # the site
    cdn = (source / "zarrgate-cdn.conf").read_text()
    cdn = _replace_once(cdn, r"^(\s*)listen\s+\S+;", lambda m: f"{m.group(1)}listen {listen};",
                        "zarrgate-cdn.conf")
    cdn = _replace_once(cdn, r"^proxy_cache_path\s+\S+", f"proxy_cache_path {cache_dir}",
                        "zarrgate-cdn.conf")
    (out / "zarrgate-cdn.conf").write_text(cdn)

    # the process
    main = (source / "nginx.conf").read_text()
    for directive in ("pid", "error_log", "user", "daemon"):
        if re.search(rf"^\s*{directive}\s", main, flags=re.M):
            raise RenderError(f"nginx.conf sets `{directive}`, which render.py sets itself")
    head = [f"pid {out / 'nginx.pid'};", f"error_log {out / 'logs' / 'error.log'} info;"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        head.insert(0, "user root root;")
    temps = "".join(f"    {name}_temp_path {out / 'tmp' / name};\n" for name in TEMP_DIRECTIVES)
    main = _replace_once(main, r"^http\s*\{\s*$", "http {\n" + temps.rstrip("\n"), "nginx.conf")
    main = "# rendered by deploy/cdn/render.py from deploy/cdn/nginx.conf\n" + "\n".join(head) \
        + "\n" + main
    path = out / "nginx.conf"
    path.write_text(main)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="directory to write into")
    parser.add_argument("--listen", default="127.0.0.1:8081", help="nginx's address")
    parser.add_argument("--upstream", action="append", default=[], required=True,
                        help="a zarrgate replica, host:port (repeat for each)")
    parser.add_argument("--cache-dir", type=Path, help="cache directory (default OUT/cache)")
    args = parser.parse_args(argv)
    try:
        path = render(args.out, args.listen, args.upstream, args.cache_dir)
    except RenderError as e:
        print(f"render: {e}", file=sys.stderr)
        return 1
    print(f"nginx -p {path.parent} -c {path} -g 'daemon off;'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
