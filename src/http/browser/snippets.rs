//! Copy-paste snippets that read a node of a store: xarray, zarr-python, zarrita.js, GDAL.
//! `base` is the store's URL as the page knows it (the page's script replaces the origin with
//! the one the browser sees, behind a CDN too); with read tokens, each shows where the token goes.

use crate::zarr::hierarchy::Node;
use crate::zarr::metadata::NodeKind;

/// One snippet: its id (the element holding it), its label and its text.
pub(super) struct Snippet {
    pub(super) id: &'static str,
    pub(super) label: &'static str,
    pub(super) text: String,
}

/// The snippets reading `node` of the store at `base` (no final `/`).
pub(super) fn snippets(base: &str, node: &Node, token: bool) -> Vec<Snippet> {
    let path = node.path.as_str();
    let url = if path.is_empty() { base.to_owned() } else { format!("{base}/{path}") };
    let array = matches!(node.kind, NodeKind::Array(_));
    let py_auth = if token { r#", storage_options={"headers": {"Authorization": "Bearer <read token>"}}"# } else { "" };
    let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
    let parent_url = if parent.is_empty() { base.to_owned() } else { format!("{base}/{parent}") };
    let xarray = if array && !path.is_empty() {
        format!(
            "import xarray as xr\nds = xr.open_zarr(\"{parent_url}\", zarr_format=3{py_auth})\nda = ds[\"{name}\"]\n\
             print(da)\nvalues = da.values  # reads every chunk: slice first for large arrays\n"
        )
    } else {
        format!("import xarray as xr\nds = xr.open_zarr(\"{url}\", zarr_format=3{py_auth})\nprint(ds)\n")
    };
    let zarr = if array {
        format!(
            "import zarr\na = zarr.open_array(\"{url}\", mode=\"r\", zarr_format=3{py_auth})\nprint(a.shape, a.dtype)\n\
             values = a[...]  # reads every chunk: slice first for large arrays\n"
        )
    } else {
        format!(
            "import zarr\ng = zarr.open_group(\"{url}\", mode=\"r\", zarr_format=3{py_auth})\nprint(sorted(g.array_keys()))\n"
        )
    };
    let js_auth = if token { r#", { overrides: { headers: { Authorization: "Bearer <read token>" } } }"# } else { "" };
    let kind = if array { "array" } else { "group" };
    let mut zarrita = format!(
        "import * as zarr from \"zarrita\";\nconst store = new zarr.FetchStore(\"{base}\"{js_auth});\n\
         const node = await zarr.open(zarr.root(store).resolve(\"{path}\"), {{ kind: \"{kind}\" }});\n"
    );
    if array {
        zarrita.push_str("const { data, shape } = await zarr.get(node);\n");
    }
    let gdal_env = if token { "GDAL_HTTP_HEADERS=\"Authorization: Bearer <read token>\" " } else { "" };
    // GDAL (3.10, as in rasterio's wheels) reads the Zarr v2 view, at `/v2/{store}`: it has no
    // v3 `bytes` codec. A group lists its arrays as subdatasets (or is its one array with two
    // dimensions or more).
    let v2_base =
        base.rsplit_once('/').map_or_else(|| base.to_owned(), |(origin, store)| format!("{origin}/v2/{store}"));
    let gdal = if array {
        format!("{gdal_env}gdalinfo 'ZARR:\"/vsicurl/{v2_base}\":/{path}'\n")
    } else if path.is_empty() {
        format!("{gdal_env}gdalinfo 'ZARR:\"/vsicurl/{v2_base}\"'\n")
    } else {
        format!("{gdal_env}gdalinfo 'ZARR:\"/vsicurl/{v2_base}/{path}\"'\n")
    };
    vec![
        Snippet { id: "snippet-xarray", label: "xarray", text: xarray },
        Snippet { id: "snippet-zarr", label: "zarr-python", text: zarr },
        Snippet { id: "snippet-zarrita", label: "zarrita.js", text: zarrita },
        Snippet { id: "snippet-gdal", label: "GDAL", text: gdal },
    ]
}
