"""Reading a Dockerfile and its .dockerignore, and replaying a build stage without a container.

Used by deploy/tools/check_deploy.py (scripts/check-deploy.sh). Standard library only.

The parser knows the syntax this repository's Dockerfile uses: comments, parser directives,
line continuations, ARG, FROM ... AS, and `--flag=value` options; the .dockerignore matcher
follows Docker's rules (patterns cleaned like paths, `*` and `?` never cross `/`, `**` any
number of directories, `!` re-includes, the last matching pattern wins, and a pattern that
matches a directory matches everything under it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath


class DockerfileError(Exception):
    pass


@dataclass
class Instruction:
    cmd: str            # upper case: RUN, COPY...
    args: str           # the rest, continuations joined, flags removed
    line: int           # first line in the file
    flags: dict = field(default_factory=dict)

    def exec_form(self) -> list[str] | None:
        """The JSON array of an exec-form instruction, or None for the shell form."""
        text = self.args.strip()
        if not text.startswith("["):
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


@dataclass
class Stage:
    base: str
    name: str | None
    line: int
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, cmd: str) -> list[Instruction]:
        return [i for i in self.instructions if i.cmd == cmd]

    def last(self, cmd: str) -> Instruction | None:
        found = self.all(cmd)
        return found[-1] if found else None


@dataclass
class Dockerfile:
    args: dict[str, str]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise DockerfileError(f"no stage named {name!r}")


FLAG = re.compile(r"--([a-z-]+)(?:=(\S*))?\s+")


def parse(path: Path) -> Dockerfile:
    lines = Path(path).read_text().splitlines()
    logical: list[tuple[int, str]] = []
    buf, start = "", None
    for n, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if buf == "" and (stripped == "" or stripped.startswith("#")):
            continue
        if buf != "" and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped
        if start is None:
            start = n
        if raw.rstrip().endswith("\\"):
            buf += raw.rstrip()[:-1] + " "
            continue
        buf += raw
        logical.append((start, buf.strip()))
        buf, start = "", None
    if buf:
        raise DockerfileError(f"{path}: the last instruction ends with a continuation")

    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line, text in logical:
        cmd, _, rest = text.partition(" ")
        cmd = cmd.upper()
        rest = rest.strip()
        flags = {}
        while True:
            m = FLAG.match(rest + " ") if rest.startswith("--") else None
            if not m:
                break
            flags[m.group(1)] = m.group(2) if m.group(2) is not None else "true"
            rest = rest[m.end():].strip() if m.end() <= len(rest) else ""
        instr = Instruction(cmd, rest, line, flags)
        if cmd == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)",
                          lambda m: global_args.get(m.group(1) or m.group(2), m.group(0)), parts[0])
            stages.append(Stage(base, name, line))
        elif not stages:
            if cmd != "ARG":
                raise DockerfileError(f"{path}:{line}: {cmd} before the first FROM")
            key, _, value = rest.partition("=")
            global_args[key] = value
        else:
            stages[-1].instructions.append(instr)
    if not stages:
        raise DockerfileError(f"{path}: no FROM")
    return Dockerfile(global_args, stages)


def env_pairs(instr: Instruction) -> dict[str, str]:
    """The variables of an ENV instruction (`K=V K2="V 2"` or the old `K V`)."""
    tokens = shlex.split(instr.args)
    if tokens and "=" not in tokens[0]:
        return {tokens[0]: " ".join(tokens[1:])}
    out = {}
    for t in tokens:
        key, sep, value = t.partition("=")
        if not sep:
            raise DockerfileError(f"line {instr.line}: ENV item {t!r} has no '='")
        out[key] = value
    return out


def copy_sources(instr: Instruction) -> tuple[list[str], str]:
    items = instr.exec_form() or shlex.split(instr.args)
    if len(items) < 2:
        raise DockerfileError(f"line {instr.line}: COPY needs a source and a destination")
    return items[:-1], items[-1]


# ---------------------------------------------------------------------------------------------
# .dockerignore


def _pattern_regex(pattern: str) -> re.Pattern:
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif c == "*":
            out += "[^/]*"
            i += 1
        elif c == "?":
            out += "[^/]"
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                raise DockerfileError(f".dockerignore: unterminated [ in {pattern!r}")
            body = pattern[i + 1:end]
            if body.startswith("^"):
                body = "!" + body[1:]
            out += "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
            i = end + 1
        elif c == "\\" and i + 1 < len(pattern):
            out += re.escape(pattern[i + 1])
            i += 2
        else:
            out += re.escape(c)
            i += 1
    return re.compile(out + r"\Z")


@dataclass
class IgnoreRule:
    pattern: str        # cleaned, without the leading !
    negate: bool
    regex: re.Pattern

    def literal_prefix(self) -> str:
        """The pattern up to its first wildcard."""
        return re.split(r"[*?\[\\]", self.pattern, maxsplit=1)[0]


def load_ignore(path: Path) -> list[IgnoreRule]:
    rules = []
    if not path.is_file():
        return rules
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:].strip()
        cleaned = str(PurePosixPath("/" + line)).lstrip("/") or "."
        cleaned = os.path.normpath(cleaned).replace(os.sep, "/")
        rules.append(IgnoreRule(cleaned, negate, _pattern_regex(cleaned)))
    return rules


def is_ignored(rel: str, rules: list[IgnoreRule]) -> bool:
    """Whether the context leaves out ``rel`` (a path relative to the context, with /)."""
    parts = rel.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for rule in rules:
        if any(rule.regex.match(c) for c in candidates):
            ignored = not rule.negate
    return ignored


def context_files(root: Path, rules: list[IgnoreRule]) -> list[str]:
    """Every file of the build context, as paths relative to ``root``. A directory is left
    unvisited only when it is ignored and no `!` rule could bring back something inside it."""
    negations = [r for r in rules if r.negate]
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath).relative_to(root).as_posix()
        base = "" if base == "." else base + "/"
        keep = []
        for d in sorted(dirnames):
            rel = base + d
            prefixes = [n.literal_prefix() for n in negations]
            if is_ignored(rel, rules) and not any(
                    (rel + "/").startswith(p) or p.startswith(rel + "/") for p in prefixes):
                continue
            keep.append(d)
        dirnames[:] = keep
        for f in sorted(filenames):
            rel = base + f
            if not is_ignored(rel, rules):
                out.append(rel)
    return out


def sync_context(root: Path, dest: Path, rules: list[IgnoreRule]) -> list[str]:
    """Make ``dest`` hold exactly the build context (files copied with their modification
    times, as `docker build` sends them); return the relative paths."""
    files = context_files(root, rules)
    wanted = set(files)
    dest.mkdir(parents=True, exist_ok=True)
    for dirpath, _dirs, filenames in os.walk(dest):
        for f in filenames:
            rel = (Path(dirpath) / f).relative_to(dest).as_posix()
            if rel not in wanted:
                (Path(dirpath) / f).unlink()
    for rel in files:
        src, dst = root / rel, dest / rel
        if dst.is_file():
            a, b = src.stat(), dst.stat()
            if a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns:
                continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    return files


# ---------------------------------------------------------------------------------------------
# replaying a stage


def _copy_into(src: Path, dest: Path) -> None:
    """Docker COPY of one source: a directory's contents, or a file, with modification times."""
    if src.is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        for child in src.iterdir():
            _copy_into(child, dest / child.name)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)


def replay(stage: Stage, context: Path, rootfs: Path, shared: dict[str, Path],
           log=print) -> dict[str, str]:
    """Run ``stage``'s WORKDIR, ENV, COPY and RUN in ``rootfs`` (an absolute path /x of the
    stage is ``rootfs``/x, also inside RUN commands). ``shared`` maps paths relative to a
    WORKDIR to host directories linked there before anything runs (for cargo: "target" to the
    repository's target directory, so that dependencies already built are reused). Returns
    the stage's environment. Raises DockerfileError on the first failing step."""
    workdir = PurePosixPath("/")
    env = dict(os.environ)
    mapped: list[str] = []

    def host(p: PurePosixPath | str) -> Path:
        return rootfs / str(p).lstrip("/")

    def map_paths(command: str) -> str:
        for absolute in sorted(mapped, key=len, reverse=True):
            command = re.sub(rf"(?<![\w./-]){re.escape(absolute)}(?=/|\s|$|;|&|\|)",
                             str(host(absolute)), command)
        return command

    for instr in stage.instructions:
        if instr.cmd == "WORKDIR":
            workdir = workdir / instr.args.strip()
            where = host(workdir)
            where.mkdir(parents=True, exist_ok=True)
            if str(workdir) != "/" and str(workdir) not in mapped:
                mapped.append(str(workdir))
            for rel, target in shared.items():
                link = where / rel
                if not link.exists() and not link.is_symlink():
                    link.symlink_to(target, target_is_directory=True)
        elif instr.cmd == "ENV":
            env.update(env_pairs(instr))
        elif instr.cmd == "COPY":
            if "from" in instr.flags:
                raise DockerfileError(f"line {instr.line}: COPY --from in a replayed stage")
            sources, dest = copy_sources(instr)
            dest_path = PurePosixPath(dest) if dest.startswith("/") else workdir / dest
            into_dir = dest.endswith("/") or dest in (".", "./") or len(sources) > 1
            for s in sources:
                src = context / s
                if not src.exists():
                    raise DockerfileError(
                        f"line {instr.line}: COPY {s}: not in the build context (the Dockerfile "
                        "copies it, but it is missing or .dockerignore leaves it out)")
                target = host(dest_path)
                if into_dir and not src.is_dir():
                    target = target / src.name
                _copy_into(src, target)
        elif instr.cmd == "RUN":
            if instr.flags:
                raise DockerfileError(f"line {instr.line}: RUN flags {sorted(instr.flags)} "
                                      "cannot be replayed")
            argv = instr.exec_form() or ["/bin/sh", "-c", map_paths(instr.args)]
            log(f"  RUN {instr.args}")
            started = time.monotonic()
            done = subprocess.run(argv, cwd=host(workdir), env=env)
            if done.returncode != 0:
                raise DockerfileError(f"line {instr.line}: RUN exited with {done.returncode}: "
                                      f"{instr.args}")
            log(f"    ({time.monotonic() - started:.0f} s)")
        elif instr.cmd in ("ARG", "LABEL"):
            continue
        else:
            raise DockerfileError(f"line {instr.line}: {instr.cmd} cannot be replayed")
    return env
