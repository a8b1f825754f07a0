#!/usr/bin/env python3
"""Render a kustomization the way `kustomize build` does, for the features deploy/ uses.

    python deploy/tools/kustomize_lite.py deploy/kubernetes/overlays/example

kustomize itself is not to be had from the package registries this project installs from
(kubectl embeds it, where kubectl happens to be installed). scripts/check-deploy.sh renders
with `kubectl kustomize` or `kustomize build` when one is on PATH and compares the result with
this renderer's, so this file stays faithful; where neither exists, this renderer is what the
manifests are validated from.

Supported (anything else in a kustomization.yaml is an error, never silently ignored):

- ``resources``: YAML files (several documents each) and directories holding a
  kustomization.yaml, rendered recursively; a resource may appear once;
- ``labels``: ``pairs`` added to every resource's metadata.labels (``includeSelectors`` and
  ``includeTemplates`` false, their default);
- ``replicas``: ``name`` and ``count``, applied to the Deployment, StatefulSet, ReplicaSet or
  ReplicationController of that name;
- ``patches``: RFC 6902 JSON patches (``patch`` inline or ``path`` to a file) with a
  ``target`` of group, version, kind and name (exact names), operations add, remove, replace
  and test.

Needs PyYAML.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import yaml

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
TOP_KEYS = {"apiVersion", "kind", "resources", "labels", "replicas", "patches"}
SCALABLE = {"Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"}


class KustomizeError(Exception):
    pass


def _kustomization(directory: Path) -> tuple[Path, dict]:
    for name in KUSTOMIZATION_FILES:
        path = directory / name
        if path.is_file():
            doc = yaml.safe_load(path.read_text()) or {}
            if not isinstance(doc, dict):
                raise KustomizeError(f"{path}: not a mapping")
            unknown = set(doc) - TOP_KEYS
            if unknown:
                raise KustomizeError(f"{path}: kustomize_lite does not support "
                                     f"{', '.join(sorted(unknown))} (see its docstring)")
            if doc.get("kind", "Kustomization") != "Kustomization":
                raise KustomizeError(f"{path}: kind {doc.get('kind')!r} is not Kustomization")
            return path, doc
    raise KustomizeError(f"{directory}: no kustomization.yaml")


def _identity(obj: dict) -> tuple:
    api = obj.get("apiVersion", "")
    group, _, version = api.rpartition("/")
    meta = obj.get("metadata") or {}
    return group, version, obj.get("kind"), meta.get("namespace"), meta.get("name")


def _describe(ident: tuple) -> str:
    group, version, kind, namespace, name = ident
    api = f"{group}/{version}" if group else version
    return f"{api} {kind} {namespace + '/' if namespace else ''}{name}"


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise KustomizeError(f"JSON pointer {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts: list[str], where: str):
    node = doc
    for part in parts:
        if isinstance(node, dict):
            if part not in node:
                raise KustomizeError(f"{where}: path segment {part!r} does not exist")
            node = node[part]
        elif isinstance(node, list):
            try:
                node = node[int(part)]
            except (ValueError, IndexError) as e:
                raise KustomizeError(f"{where}: bad list index {part!r}") from e
        else:
            raise KustomizeError(f"{where}: cannot descend into a scalar at {part!r}")
    return node


def apply_json_patch(obj: dict, ops: list, where: str) -> dict:
    """RFC 6902 add, remove, replace and test on a copy of ``obj``."""
    obj = copy.deepcopy(obj)
    if not isinstance(ops, list):
        raise KustomizeError(f"{where}: a JSON patch is a list of operations")
    for op in ops:
        kind, parts = op.get("op"), _pointer(op.get("path", ""))
        if not parts:
            raise KustomizeError(f"{where}: operations on the whole document are not supported")
        parent = _walk(obj, parts[:-1], where)
        last = parts[-1]
        if kind == "test":
            if _walk(obj, parts, where) != op.get("value"):
                raise KustomizeError(f"{where}: test failed at {op['path']}")
        elif kind in ("add", "replace"):
            value = copy.deepcopy(op["value"])
            if isinstance(parent, dict):
                if kind == "replace" and last not in parent:
                    raise KustomizeError(f"{where}: replace of missing {op['path']}")
                parent[last] = value
            elif isinstance(parent, list):
                if last == "-" and kind == "add":
                    parent.append(value)
                else:
                    index = int(last)
                    if kind == "add":
                        parent.insert(index, value)
                    else:
                        parent[index] = value
            else:
                raise KustomizeError(f"{where}: {op['path']} is inside a scalar")
        elif kind == "remove":
            if isinstance(parent, dict):
                if last not in parent:
                    raise KustomizeError(f"{where}: remove of missing {op['path']}")
                del parent[last]
            else:
                del parent[int(last)]
        else:
            raise KustomizeError(f"{where}: JSON patch operation {kind!r} is not supported")
    return obj


def _matches(target: dict, ident: tuple, where: str) -> bool:
    unknown = set(target) - {"group", "version", "kind", "name", "namespace"}
    if unknown:
        raise KustomizeError(f"{where}: patch target keys {sorted(unknown)} are not supported")
    group, version, kind, namespace, name = ident
    actual = {"group": group, "version": version, "kind": kind, "name": name,
              "namespace": namespace}
    return all(actual[k] == v for k, v in target.items())


def render(directory: Path, _seen: set | None = None) -> list[dict]:
    """The resources of the kustomization in ``directory``, transformed."""
    directory = Path(directory).resolve()
    seen = _seen if _seen is not None else set()
    if directory in seen:
        raise KustomizeError(f"{directory}: kustomization cycle")
    seen.add(directory)
    path, k = _kustomization(directory)

    objects: list[dict] = []
    for entry in k.get("resources") or []:
        target = (directory / entry).resolve()
        if target.is_dir():
            objects.extend(render(target, seen))
        elif target.is_file():
            for doc in yaml.safe_load_all(target.read_text()):
                if doc is None:
                    continue
                if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
                    raise KustomizeError(f"{target}: a document without apiVersion and kind")
                objects.append(doc)
        else:
            raise KustomizeError(f"{path}: resource {entry!r} does not exist")
    ids = [_identity(o) for o in objects]
    for ident in ids:
        if ids.count(ident) > 1:
            raise KustomizeError(f"{path}: {_describe(ident)} is defined twice")

    for i, patch in enumerate(k.get("patches") or []):
        where = f"{path}: patches[{i}]"
        if set(patch) - {"patch", "path", "target"}:
            raise KustomizeError(f"{where}: only patch, path and target are supported")
        text = patch.get("patch")
        if text is None:
            text = (directory / patch["path"]).read_text()
        ops = yaml.safe_load(text)
        if not isinstance(ops, list):
            raise KustomizeError(f"{where}: only JSON 6902 patches (a list of operations) "
                                 "are supported, not strategic merge patches")
        target = patch.get("target")
        if not target:
            raise KustomizeError(f"{where}: a JSON patch needs a target")
        hits = [n for n, o in enumerate(objects) if _matches(target, _identity(o), where)]
        if not hits:
            raise KustomizeError(f"{where}: target {target} matches no resource")
        for n in hits:
            objects[n] = apply_json_patch(objects[n], ops, where)

    for rule in k.get("replicas") or []:
        hits = [o for o in objects
                if o.get("kind") in SCALABLE and (o.get("metadata") or {}).get("name") == rule["name"]]
        if not hits:
            raise KustomizeError(f"{path}: replicas: no workload named {rule['name']!r}")
        for o in hits:
            o.setdefault("spec", {})["replicas"] = int(rule["count"])

    for rule in k.get("labels") or []:
        if set(rule) - {"pairs", "includeSelectors", "includeTemplates"}:
            raise KustomizeError(f"{path}: labels supports pairs, includeSelectors, includeTemplates")
        if rule.get("includeSelectors") or rule.get("includeTemplates"):
            raise KustomizeError(f"{path}: labels with includeSelectors/includeTemplates are "
                                 "not supported")
        for o in objects:
            meta = o.setdefault("metadata", {})
            labels = meta.get("labels") or {}
            labels.update({str(a): str(b) for a, b in rule["pairs"].items()})
            meta["labels"] = labels
    return objects


def dump(objects: list[dict]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=True, default_flow_style=False)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        sys.stdout.write(dump(render(Path(argv[0]))))
    except KustomizeError as e:
        print(f"kustomize_lite: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
