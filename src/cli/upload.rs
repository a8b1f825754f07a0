//! A manifest file sent to the server as it is read from disk (never whole in memory), with a
//! progress bar on stderr: bytes, rate and time left. indicatif draws nothing when stderr is not
//! a terminal, so a redirected or piped run stays clean.

use std::path::Path;

use futures::TryStreamExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio_util::io::ReaderStream;

use super::client::Failure;

/// A file being sent.
pub struct Upload {
    /// Its length, for `Content-Length` (the server refuses one over its limit before a byte).
    pub length: u64,
    /// The bar; [`Upload::done`] clears it.
    progress: ProgressBar,
}

/// Opens `path` for sending, with a progress bar named after it: the request body (the file's
/// bytes as they are read) and the upload.
pub async fn open(path: &Path) -> Result<(reqwest::Body, Upload), Failure> {
    let cannot = |e: std::io::Error| Failure::File(format!("cannot read {}: {e}", path.display()));
    let file = tokio::fs::File::open(path).await.map_err(cannot)?;
    let meta = file.metadata().await.map_err(cannot)?;
    if meta.is_dir() {
        return Err(Failure::File(format!(
            "{} is a directory: send kerchunk parquet references as a tar, e.g. `tar -C {} -cf refs.tar .` \
             then `zarrgate stores put NAME refs.tar`",
            path.display(),
            path.display()
        )));
    }
    let length = meta.len();
    let progress = ProgressBar::with_draw_target(Some(length), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{prefix} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec}, {eta} left {msg}",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    progress.set_style(style);
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    progress.set_prefix(name);
    let bar = progress.clone();
    let stream = ReaderStream::with_capacity(file, 1 << 16).inspect_ok(move |chunk| {
        bar.inc(chunk.len() as u64);
        if bar.position() >= length {
            bar.set_message("sent; the server is checking it");
        }
    });
    Ok((reqwest::Body::wrap_stream(stream), Upload { length, progress }))
}

impl Upload {
    /// Leaves the bar as it ended (on a terminal), before the server's answer is printed.
    pub fn done(&self) {
        self.progress.abandon();
    }
}
