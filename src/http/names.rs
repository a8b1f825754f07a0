//! Names of stores and object stores: `^[a-z0-9][a-z0-9._-]{0,127}$`, never a reserved word.

use crate::error::ApiError;

/// First path segments the server itself uses (`v2`: the Zarr v2 view, `/v2/{store}/`).
const RESERVED: &[&str] = &["api", "healthz", "readyz", "metrics", "v2"];

/// Checks a store or object store name; `what` names the kind in the error.
pub fn check(what: &str, name: &str) -> Result<(), ApiError> {
    let mut bytes = name.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'));
    if !first_ok || !rest_ok || name.len() > 128 {
        return Err(ApiError::BadRequest(format!(
            "{what} name {name:?} is invalid: use 1 to 128 characters from a-z, 0-9, '.', '_' and '-', starting with a letter or digit"
        )));
    }
    if RESERVED.contains(&name) {
        // 422, not 400: the request is well formed, the name is one the server's URLs use.
        return Err(ApiError::Invalid {
            title: format!("{what} name {name:?} is reserved; nothing was changed"),
            problems: vec![format!(
                "{name:?} is the first segment of the server's own URLs ({}): choose another name",
                RESERVED.join(", ")
            )],
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["era5", "a", "0x", "era5.v2_final-1", &"a".repeat(128)] {
            assert!(check("store", ok).is_ok(), "{ok}");
        }
        for bad in ["", "Era5", "-x", ".x", "a/b", "a@1", "api", "metrics", "v2", &"a".repeat(129), "é"] {
            assert!(check("store", bad).is_err(), "{bad}");
        }
        for reserved in ["api", "v2"] {
            let Err(e) = check("store", reserved) else { panic!("{reserved}") };
            assert_eq!(e.status(), axum::http::StatusCode::UNPROCESSABLE_ENTITY, "{reserved}");
        }
    }
}
