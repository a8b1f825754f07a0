"""Register VirtualiZarr references with a zarrgate server.

Three lines take a file to a Zarr v3 store served over HTTP::

    vds = open_virtual_dataset(url, registry=registry, parser=HDFParser())
    register("http://localhost:8080", "era5", vds)
    xr.open_zarr("http://localhost:8080/era5", zarr_format=3)

:func:`manifeststore_to_native` turns a VirtualiZarr virtual dataset, datatree,
``ManifestStore`` or ``ManifestGroup`` into zarrgate's native manifest document
``{"nodes": {path: zarr.json + "manifest"}}``; :func:`register` and
:func:`register_object_store` call the control plane.

The conversion follows what ``xarray.Dataset.to_zarr(zarr_format=3)`` writes,
so that ``xr.open_zarr`` of the served store gives back the same dataset:

* virtual variables keep VirtualiZarr's array metadata (codecs, chunk grid,
  fill value), with the xarray variable's attributes and dimensions;
* loaded (in-memory) variables, e.g. the dimension coordinates VirtualiZarr
  loads by default or ``loadable_variables``, are CF-encoded and written by
  xarray itself, then stored as one uncompressed chunk whose bytes are inline;
* a numeric ``_FillValue`` attribute on a float array is encoded the way
  xarray's Zarr v3 backend reads it (base64 of a little-endian float64);
* non-dimension coordinates are recorded in ``coordinates`` attributes.

Only ``requests`` is needed to register a ready document; the conversion
imports xarray, zarr and VirtualiZarr (2.x) when it is called.
"""

from __future__ import annotations

import base64
import json
import math
import random
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

import requests

__all__ = [
    "ZarrgateError",
    "manifeststore_to_native",
    "patch",
    "register",
    "register_icechunk",
    "register_object_store",
    "sync_icechunk",
]

DEFAULT_TIMEOUT = 60.0

# Variable encodings that xarray's CF encoders use; storage encodings
# (chunks, compressors...) are dropped so a loaded variable becomes one chunk.
_CF_ENCODING_KEYS = ("dtype", "units", "calendar", "scale_factor", "add_offset",
                     "_FillValue", "missing_value", "fill_value", "_Unsigned")


class ZarrgateError(RuntimeError):
    """A non-2xx answer from zarrgate; ``detail`` is the problem+json detail and ``problems``
    the list of problems a refused document had (also in the message, one per line, as the
    command line prints them)."""

    def __init__(self, status: int, title: str, detail: str, body: Any = None):
        problems = body.get("problems") if isinstance(body, dict) else None
        self.problems: list[str] = [str(p) for p in problems] if isinstance(problems, list) else []
        message = f"zarrgate answered {status} {title}: {detail}"
        if self.problems:
            message += "".join(f"\n  - {p}" for p in self.problems)
        super().__init__(message)
        self.status, self.title, self.detail, self.body = status, title, detail, body


# --------------------------------------------------------------------------
# conversion
# --------------------------------------------------------------------------

def manifeststore_to_native(store_or_vds: Any, *, fill_value_as_mask: bool = False) -> dict:
    """Convert VirtualiZarr references into a zarrgate native manifest document.

    ``store_or_vds`` is one of:

    * an ``xarray.Dataset`` from ``virtualizarr.open_virtual_dataset`` (or
      ``open_virtual_mfdataset``, ``xr.concat`` of such...), whose variables wrap
      ``ManifestArray`` objects or are loaded in memory;
    * an ``xarray.DataTree`` from ``open_virtual_datatree`` (one node per group);
    * a ``virtualizarr.manifests.ManifestStore`` as returned by a parser, e.g.
      ``HDFParser()(url=..., registry=...)``, or its ``ManifestGroup``.

    Returns ``{"nodes": {...}}``: each node is its Zarr v3 ``zarr.json`` as
    zarr-python writes it, arrays also carry ``manifest``, mapping chunk grid
    indices joined by ``.`` (``""`` for a 0-d array) to ``{"path", "offset",
    "length"}`` or ``{"data": base64}``. Missing chunks are absent. The result
    is plain JSON (no NaN tokens); ``json.dumps`` it as is.

    ``fill_value_as_mask=True`` gives a virtual array with no ``_FillValue``
    attribute one equal to its Zarr ``fill_value`` (unless that is the
    dtype's default, NaN or 0), restoring Zarr v2 semantics. Use it for
    stores built from kerchunk references (``NetCDF3Parser``,
    ``KerchunkJSONParser``, ``KerchunkParquetParser``): kerchunk moves a
    netCDF ``_FillValue`` into the v2 ``fill_value``, which xarray reads as
    a mask in Zarr v2 but not in v3 (VirtualiZarr issue #982), so masked
    values would otherwise come back as the sentinel. Leave it off for
    ``HDFParser`` output: there ``fill_value`` is HDF5's, not a mask.
    """
    import xarray as xr

    nodes: dict[str, dict] = {}
    if isinstance(store_or_vds, xr.DataTree):
        for path, node in store_or_vds.subtree_with_keys:
            ds = node.to_dataset(inherit=False)
            _add_dataset(nodes, "" if path == "." else path, ds, fill_value_as_mask)
    elif isinstance(store_or_vds, xr.Dataset):
        _add_dataset(nodes, "", store_or_vds, fill_value_as_mask)
    else:
        from virtualizarr.manifests import ManifestGroup, ManifestStore

        group = store_or_vds._group if isinstance(store_or_vds, ManifestStore) else store_or_vds
        if not isinstance(group, ManifestGroup):
            raise TypeError(
                "expected an xarray Dataset or DataTree of ManifestArrays, a ManifestStore "
                f"or a ManifestGroup, got {type(store_or_vds).__name__}"
            )
        _add_manifest_group(nodes, "", group, fill_value_as_mask)
    return {"nodes": nodes}


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def _group_node(attributes: Mapping) -> dict:
    return {"zarr_format": 3, "node_type": "group",
            "attributes": _json_clean(dict(attributes))}


def _add_manifest_group(nodes: dict, path: str, group: Any, mask: bool) -> None:
    """A ManifestGroup and its descendants: metadata is used as it stands."""
    nodes[path] = _group_node(group.metadata.attributes)
    for name, marr in group.arrays.items():
        where = _join(path, name)
        nodes[where] = _virtual_array_node(marr, None, None, where, mask)
    for name, sub in group.groups.items():
        _add_manifest_group(nodes, _join(path, name), sub, mask)


def _add_dataset(nodes: dict, path: str, ds: Any, mask: bool) -> None:
    """An xarray Dataset as xarray's ``to_zarr`` would lay it out."""
    from virtualizarr.manifests import ManifestArray
    from xarray.conventions import encode_dataset_coordinates

    variables, attrs = encode_dataset_coordinates(ds)
    nodes[path] = _group_node(attrs)
    for name, var in variables.items():
        node_path = _join(path, str(name))
        if isinstance(var.data, ManifestArray):
            nodes[node_path] = _virtual_array_node(var.data, var.attrs, var.dims, node_path, mask)
        else:
            nodes[node_path] = _loaded_array_node(str(name), var)


def _virtual_array_node(marr: Any, attrs: Mapping | None, dims: Any, where: str,
                        mask: bool) -> dict:
    """zarr.json of a ManifestArray plus its manifest.

    In a virtual Dataset VirtualiZarr moves attributes and dimension names
    from the array metadata onto the xarray variable; ``attrs``/``dims`` put
    them back. ``None`` keeps those of the metadata (ManifestStore input).
    """
    node = json.loads(json.dumps(marr.metadata.to_dict(), default=_json_default))
    if attrs is not None:
        node["attributes"] = dict(attrs)
    if dims is not None:
        node["dimension_names"] = [str(d) for d in dims]
    attributes = dict(node.get("attributes") or {})
    if mask and "_FillValue" not in attributes:
        fv = _fill_value_as_mask(node["fill_value"])
        if fv is not None:
            attributes["_FillValue"] = fv
    node["attributes"] = _cf_attributes(attributes, marr.dtype, where)
    node["fill_value"] = _json_clean(node["fill_value"])
    # ChunkManifest.dict(): keys "i.j.k" ("" when 0-d), missing chunks left out
    node["manifest"] = {
        key: {"path": e["path"], "offset": int(e["offset"]), "length": int(e["length"])}
        for key, e in marr.manifest.dict().items()
    }
    return node


def _fill_value_as_mask(fill_value: Any) -> Any:
    """A v3 JSON fill value as a ``_FillValue``, or None for a dtype default."""
    special = {"Infinity": math.inf, "-Infinity": -math.inf}
    if isinstance(fill_value, str):
        return special.get(fill_value)  # "NaN" and hex NaN payloads: no mask needed
    if isinstance(fill_value, bool) or fill_value in (0, None):
        return None
    return fill_value if isinstance(fill_value, (int, float)) else None


def _cf_attributes(attrs: Mapping, dtype: Any, where: str) -> dict:
    """Attributes as xarray's Zarr v3 backend expects to read them.

    xarray decodes a ``_FillValue`` attribute with ``FillValueCoder`` for the
    array's dtype: floats must be base64 of a little-endian float64 (a bare
    number raises TypeError), integers plain ints. VirtualiZarr's HDF parser
    encodes it already; its kerchunk-based parsers (netCDF3, kerchunk JSON)
    leave the raw number.
    """
    import numpy as np
    from xarray.backends.zarr import FillValueCoder

    out = dict(attrs)
    if "_FillValue" in out and out["_FillValue"] is not None:
        fv, dt = out["_FillValue"], np.dtype(dtype)
        if isinstance(fv, (list, tuple)) and len(fv) == 1 and dt.kind != "c":
            fv = fv[0]
        if isinstance(fv, np.generic):
            fv = fv.item()
        if isinstance(fv, str) and fv.lower() in ("nan", "infinity", "-infinity", "inf", "-inf"):
            fv = float(fv)  # a v2-style special float spelt as a string, not base64
        if dt.kind in "fc" and not isinstance(fv, (str, list, tuple)):
            fv = FillValueCoder.encode(fv if dt.kind == "f" else complex(fv), dt)
        elif dt.kind in "iu" and isinstance(fv, float) and fv.is_integer():
            fv = int(fv)
        out["_FillValue"] = fv
    return _json_clean(out)


def _loaded_array_node(name: str, var: Any) -> dict:
    """An in-memory variable, written by xarray into a MemoryStore as one
    uncompressed chunk, and read back as zarr.json plus inline chunk bytes."""
    import xarray as xr
    import zarr

    # to_zarr(encoding=...) would replace the variable's encoding, dropping
    # the CF encoding (time units, calendar, dtype...): set everything on it.
    encoding = {k: var.encoding[k] for k in _CF_ENCODING_KEYS if k in var.encoding}
    if "_FillValue" not in var.attrs:
        # decoding moved any source _FillValue into encoding; if there is
        # none, stop xarray from inventing a NaN one for float variables
        encoding.setdefault("_FillValue", None)
    encoding.update(chunks=tuple(max(1, n) for n in var.shape), compressors=None, filters=None)
    plain = xr.Variable(var.dims, var.data, dict(var.attrs), encoding)
    store = zarr.storage.MemoryStore()
    xr.Dataset({name: plain}).to_zarr(store, mode="w", zarr_format=3, consolidated=False)
    files = {k: v.to_bytes() for k, v in store._store_dict.items()}
    node = json.loads(files.pop(f"{name}/zarr.json"))
    node["attributes"] = _json_clean(node.get("attributes", {}))
    node["fill_value"] = _json_clean(node["fill_value"])
    manifest = {}
    for key, data in files.items():
        prefix, _, chunk_key = key.partition("/")
        if prefix != name or key.endswith("zarr.json"):
            continue
        parts = chunk_key.split("/")[1:]  # "c/0/0" -> ["0", "0"]; "c" -> []
        manifest[".".join(parts)] = {"data": base64.b64encode(data).decode("ascii")}
    node["manifest"] = manifest
    return node


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    raise TypeError(f"cannot put {type(obj).__name__} into JSON")


def _json_clean(value: Any) -> Any:
    """Plain JSON values. Non-finite floats, which strict JSON cannot carry, become the strings
    "NaN", "Infinity" and "-Infinity", as zarr-python writes them in zarr.json (and as the
    server reads kerchunk's bare NaN tokens)."""
    value = json.loads(json.dumps(value, default=_json_default))

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    return clean(value)


# --------------------------------------------------------------------------
# control plane
# --------------------------------------------------------------------------

def register(base_url: str, store: str, doc_or_vds: Any, token: str | None = None,
             timeout: float = DEFAULT_TIMEOUT, *, verify: bool | None = None,
             missing_chunks: str | None = None, record_sources: bool = False,
             if_match: int | str | None = None) -> dict:
    """Register (or replace) ``store`` on the zarrgate at ``base_url``.

    ``doc_or_vds`` is a native document (a dict with ``nodes``, or kerchunk
    references, which the server detects) or anything
    :func:`manifeststore_to_native` accepts. ``verify=False`` skips asking
    every source for its ETag and size; ``missing_chunks`` is ``"404"`` or
    ``"fill"`` (default: the store's current setting). ``record_sources=True``
    records every source's ETag and size as they are now, in place of the
    document's ``sources`` (the recovery from ``502 source-modified`` after a
    file was rewritten in place with its bytes where the references say:
    register the store's export again with it). ``if_match`` (a
    version, or its ETag ``'"v12"'``) replaces the store only while that
    version is current, ``if_match="*"`` only if it exists; else the answer is
    412 and nothing changes. Returns the server's store summary; raises
    :class:`ZarrgateError` with the problem ``detail`` on a non-2xx answer.
    """
    doc = doc_or_vds if isinstance(doc_or_vds, dict) else manifeststore_to_native(doc_or_vds)
    query = {}
    if verify is not None:
        query["verify"] = "true" if verify else "false"
    if missing_chunks is not None:
        query["missing_chunks"] = missing_chunks
    if record_sources:
        query["record_sources"] = "true"
    url = f"{base_url.rstrip('/')}/api/v1/stores/{store}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    return _send("PUT", url, doc, token, timeout, _if_match(if_match))


def patch(base_url: str, store: str, update: Any, token: str | None = None,
          timeout: float = DEFAULT_TIMEOUT, *, verify: bool | None = None,
          if_match: int | str | None = None, attempts: int | None = None) -> dict:
    """Update ``store`` with a partial native document (``PATCH``): new or
    replaced nodes and chunks, a grown shape, deletions.

    ``update`` is that document, or a function that makes it from the
    store's current version number. With concurrent writers (appenders that
    each grow an array by one step), give a function: the store is read, the
    function makes the document from that version (read it pinned, at
    ``{base_url}/{store}@{version}/...``), and it is sent with ``If-Match``;
    when another write came first (412, nothing changed) this starts again,
    after a random pause of up to 50 ms (so that writers in step fall out of
    it), until ``timeout`` seconds have passed since the first try, or
    ``attempts`` times if given. A deadline, not a count: with many writers a
    count runs out for whichever is unlucky (4 appenders on a loaded 2-core
    machine: 2 runs in 10 lost an append after 20 tries), while every writer
    that keeps trying lands once the others are done. A document is sent once, with ``If-Match:
    if_match`` when given (a version or its ETag ``'"v12"'``). Returns the new
    version's summary; raises :class:`ZarrgateError` on a non-2xx answer.
    """
    url = f"{base_url.rstrip('/')}/api/v1/stores/{store}"
    if verify is not None:
        url += "?" + urllib.parse.urlencode({"verify": "true" if verify else "false"})
    if not callable(update):
        return _send("PATCH", url, update, token, timeout, _if_match(if_match))
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        attempt += 1
        current = _send("GET", f"{base_url.rstrip('/')}/api/v1/stores/{store}", None, token, timeout)
        version = int(current["version"])
        try:
            return _send("PATCH", url, update(version), token, timeout, _if_match(version))
        except ZarrgateError as e:
            if e.status != 412 or attempt == attempts or time.monotonic() >= deadline:
                raise
        time.sleep(random.uniform(0, 0.05))


def _if_match(version: int | str | None) -> dict:
    """The ``If-Match`` header naming a store's version (``12``, ``"v12"``, ``'"v12"'`` or ``*``)."""
    if version is None:
        return {}
    text = str(version).strip().strip('"')
    return {"If-Match": "*" if text == "*" else f'"v{int(text.removeprefix("v"))}"'}


def register_object_store(base_url: str, name: str, url: str, options: dict | None = None,
                          token: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> dict:
    """Declare an object store (``s3://bucket/prefix/``, ``file:///data/``...)
    that chunk paths under ``url`` are read from; ``options`` are passed to
    the server's object_store builder (region, endpoint, credentials...)."""
    body = {"url": url, "options": options or {}}
    return _put(f"{base_url.rstrip('/')}/api/v1/object-stores/{name}", body, token, timeout)


def register_icechunk(base_url: str, store: str, repository: str, *, branch: str | None = None,
                      tag: str | None = None, snapshot: str | None = None,
                      follow_seconds: int | None = None, token: str | None = None,
                      timeout: float = DEFAULT_TIMEOUT) -> dict:
    """Serve an Icechunk repository (its URL under a registered object store) as store
    ``store``: the head of ``branch`` (default ``main``), a ``tag`` or a ``snapshot`` id. A
    branch store moves on :func:`sync_icechunk`, or every ``follow_seconds``."""
    body: dict = {"repository": repository}
    for key, value in (("branch", branch), ("tag", tag), ("snapshot", snapshot),
                       ("follow_seconds", follow_seconds)):
        if value is not None:
            body[key] = value
    return _put(f"{base_url.rstrip('/')}/api/v1/stores/{store}?format=icechunk", body, token, timeout)


def sync_icechunk(base_url: str, store: str, token: str | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> dict:
    """Re-read an Icechunk branch store's branch; ``moved`` says whether a new version was made."""
    return _send("POST", f"{base_url.rstrip('/')}/api/v1/stores/{store}/sync", None, token, timeout)


def _put(url: str, body: dict, token: str | None, timeout: float) -> dict:
    return _send("PUT", url, body, token, timeout)


def _send(method: str, url: str, body: dict | None, token: str | None, timeout: float,
          extra: dict | None = None) -> dict:
    headers = {"Content-Type": "application/json", **(extra or {})}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
    resp = requests.request(method, url, data=data, headers=headers, timeout=timeout)
    if not 200 <= resp.status_code < 300:
        try:
            problem = resp.json()
        except ValueError:
            problem = None
        if isinstance(problem, dict):
            detail = problem.get("detail") or problem.get("title") or resp.text
            title = problem.get("title") or resp.reason or ""
        else:
            detail, title = resp.text.strip() or "(empty body)", resp.reason or ""
        raise ZarrgateError(resp.status_code, title, str(detail), problem)
    if not resp.content:
        return {}
    return resp.json()
