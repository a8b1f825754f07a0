//! Reading `file://` sources: canonicalised under the store's root (neither `..` nor a symlink
//! escapes it), ranged reads in pieces of at most 1 MiB per blocking call.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::Stream;

use crate::zarr::source::SourceCheck;

/// Bytes read per blocking call. A response holds about two pieces while its reader takes them
/// (one queued for the socket, one being read), so this sets the memory of every streaming
/// reader: 256 readers of one large chunk held 495 MiB with 1 MiB pieces, 2 per reader.
const PIECE: u64 = 256 << 10;

/// What went wrong reading a local file.
#[derive(Debug)]
pub(super) enum LocalError {
    NotFound,
    Escapes,
    Denied(io::Error),
    Modified,
    Truncated { size: u64 },
    Io(io::Error),
}

/// Size, ETag and modification time of a local file.
pub(super) struct LocalFacts {
    pub size: u64,
    pub etag: String,
    pub modified: std::time::SystemTime,
}

/// The path of `relative` under `root`, refused if it resolves outside `root`.
fn confined(root: &Path, relative: &str) -> Result<PathBuf, LocalError> {
    let full = root.join(relative);
    let canonical = std::fs::canonicalize(&full).map_err(map_open)?;
    if canonical.starts_with(root) { Ok(canonical) } else { Err(LocalError::Escapes) }
}

/// Opens `path` for reading without ever waiting: a FIFO under the root would otherwise block
/// the thread until a writer came (Linux ignores `O_NONBLOCK` for regular files). Anything but a
/// regular file is then refused by [`facts`].
fn open_file(path: &Path) -> Result<File, LocalError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(map_open)
}

fn map_open(e: io::Error) -> LocalError {
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => LocalError::NotFound,
        io::ErrorKind::PermissionDenied => LocalError::Denied(e),
        _ => LocalError::Io(e),
    }
}

fn facts(file: &File) -> Result<LocalFacts, LocalError> {
    let meta = file.metadata().map_err(LocalError::Io)?;
    if !meta.is_file() {
        return Err(LocalError::NotFound);
    }
    let modified = meta.modified().map_err(LocalError::Io)?;
    let micros = modified.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros());
    // Exactly object_store's LocalFileSystem ETag (inode, mtime in microseconds, size), so that
    // facts recorded with obstore's LocalStore match the ones this server reads.
    let etag = format!("\"{:x}-{:x}-{:x}\"", meta.ino(), micros, meta.len());
    Ok(LocalFacts { size: meta.len(), etag, modified })
}

/// The facts of `relative` under `root` (blocking).
pub(super) fn head(root: &Path, relative: &str) -> Result<LocalFacts, LocalError> {
    let path = confined(root, relative)?;
    let file = open_file(&path)?;
    facts(&file)
}

/// Opens `relative` under `root`, checks it against `check` and `range`, and reads the first
/// piece (blocking). The rest is read by [`rest`].
pub(super) fn open(
    root: &Path,
    relative: &str,
    range: std::ops::Range<u64>,
    check: &SourceCheck<'_>,
) -> Result<(File, Bytes), LocalError> {
    let path = confined(root, relative)?;
    let file = open_file(&path)?;
    let facts = facts(&file)?;
    let changed = match check {
        SourceCheck::ETag(expected) => *expected != facts.etag,
        SourceCheck::Size(size) => *size != facts.size,
        SourceCheck::Unchecked => false,
    };
    if changed {
        return Err(LocalError::Modified);
    }
    if range.end > facts.size {
        return Err(LocalError::Truncated { size: facts.size });
    }
    let first = read_piece(&file, range.start, range.end.min(range.start + PIECE))?;
    Ok((file, first))
}

/// Reads `start..end` of `file` (whose position only this request uses). `read_to_end` reads
/// into the buffer's spare capacity without zeroing it first: filling a megabyte with zeros
/// before overwriting it was a fifth of a large chunk's cost.
fn read_piece(mut file: &File, start: u64, end: u64) -> Result<Bytes, LocalError> {
    let len = end - start;
    let mut buf = Vec::with_capacity(usize::try_from(len).map_err(|e| LocalError::Io(io::Error::other(e)))?);
    file.seek(SeekFrom::Start(start)).map_err(LocalError::Io)?;
    file.take(len).read_to_end(&mut buf).map_err(LocalError::Io)?;
    if (buf.len() as u64) < len {
        return Err(LocalError::Truncated { size: start + buf.len() as u64 });
    }
    Ok(buf.into())
}

/// The pieces after the first, each read in its own blocking call. A file that shrinks under
/// the read ends the stream with an error, never with fewer bytes.
pub(super) fn rest(file: File, start: u64, end: u64) -> impl Stream<Item = Result<Bytes, io::Error>> + Send + 'static {
    let file = std::sync::Arc::new(file);
    futures::stream::try_unfold(start, move |at| {
        let file = file.clone();
        async move {
            if at >= end {
                return Ok(None);
            }
            let stop = end.min(at + PIECE);
            let piece = tokio::task::spawn_blocking(move || read_piece(&file, at, stop))
                .await
                .map_err(io::Error::other)?
                .map_err(|e| match e {
                    LocalError::Io(e) => e,
                    LocalError::Truncated { size } => io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("source shrank to {size} bytes while being read"),
                    ),
                    _ => io::Error::other("source became unreadable while being read"),
                })?;
            Ok(Some((piece, stop)))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_and_dotdot_cannot_escape() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"secret").unwrap();
        let root_dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(root_dir.path()).unwrap();
        std::fs::write(root.join("ok.bin"), b"0123456789").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("link")).unwrap();
        let none = SourceCheck::Unchecked;
        assert!(matches!(open(&root, "link", 0..3, &none), Err(LocalError::Escapes)));
        let rel = format!("../{}/secret", outside.path().file_name().unwrap().to_str().unwrap());
        assert!(matches!(open(&root, &rel, 0..3, &none), Err(LocalError::Escapes | LocalError::NotFound)));
        let (_, first) = open(&root, "ok.bin", 2..5, &none).unwrap();
        assert_eq!(&first[..], b"234");
        assert!(matches!(open(&root, "ok.bin", 5..11, &none), Err(LocalError::Truncated { size: 10 })));
        assert!(matches!(open(&root, "nope", 0..1, &none), Err(LocalError::NotFound)));
        let fifo = std::process::Command::new("mkfifo").arg(root.join("fifo")).status().unwrap();
        assert!(fifo.success());
        assert!(matches!(open(&root, "fifo", 0..1, &none), Err(LocalError::NotFound)), "never waits on a FIFO");
        assert!(matches!(head(&root, "fifo"), Err(LocalError::NotFound)));
        let etag = head(&root, "ok.bin").unwrap().etag;
        assert!(open(&root, "ok.bin", 0..1, &SourceCheck::ETag(etag.into())).is_ok());
        assert!(matches!(open(&root, "ok.bin", 0..1, &SourceCheck::ETag("other".into())), Err(LocalError::Modified)));
        assert!(open(&root, "ok.bin", 0..1, &SourceCheck::Size(10)).is_ok());
        assert!(matches!(open(&root, "ok.bin", 0..1, &SourceCheck::Size(11)), Err(LocalError::Modified)));
    }
}
