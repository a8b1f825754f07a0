//! The Zarr v2 view over HTTP, at `/v2/{store}[@{version}]/` (the v3 URL has none of it: see
//! `data::Flavor`): a version's `.zgroup`, `.zattrs`, `.zarray` and `.zmetadata` (built once per
//! version and cached by `versions::v2`, with strong ETags that include the version, as
//! `zarr.json`'s do), and its v2 chunk keys, answered exactly as the v3 keys of the same chunks
//! (same bytes, same ETags, same Range and 304 rules). The lookup names both
//! (`versions::lookup`, [`crate::versions::Keys::V2`]); here is what the 404s of either view
//! say about the other.

/// The first path segment of the Zarr v2 view, a name no store may have.
pub(super) const V2_SEGMENT: &str = "v2";

/// Why `key` is not a key of the Zarr v2 view of `segment`.
pub(super) fn unknown(segment: &str, key: &str) -> String {
    format!(
        "no key {key:?} in the Zarr v2 view of {segment}: it has .zgroup, .zattrs, .zarray, .zmetadata and v2 chunk \
         keys (the Zarr v3 keys are at /{segment}/{key})"
    )
}

/// Why a v3 key was not found, and for a Zarr v2 document (a v3 store answers 404 to the
/// probes of zarr-python 3 and xarray), where the store's Zarr v2 view is.
pub(super) fn hint(why: String, segment: &str, key: &str) -> String {
    let name = key.rsplit_once('/').map_or(key, |(_, name)| name);
    if !crate::zarr::v2view::V2_NAMES.contains(&name) {
        return why;
    }
    format!("{key} is a Zarr v2 key and this is a Zarr v3 store: its Zarr v2 view is at /{V2_SEGMENT}/{segment}/{key}")
}
