//! Plain reads answered on a connection before hyper sees it: the bytes of a full answer to
//! `GET /{store}/{key}` written straight to the socket, for a request that asks no range and
//! revalidates nothing, of a metadata document or an inline chunk at hand. Most of a Zarr
//! client's requests, and all of a CDN's that warm a cache.
//!
//! What this skips is hyper's work per request, which was two thirds of the CPU zarrgate spent
//! in user space on such a read: parsing the head into a `Uri` and a header map, the service's
//! future, the body's frames, writing the head from a header map (bench/README.md, "Stop 22").
//! The request head is parsed by httparse, hyper's own parser; the answer is
//! [`Reads::answer_wire`]'s, the same bytes hyper would send for the answer in front of the
//! router (`tests/data_plane.rs` compares them).
//!
//! The first request that is anything else (another method, HTTP/1.0, a `Range` or a
//! conditional header, a body, `Connection` other than `keep-alive`, `Expect`, `Upgrade`, a path
//! with anything to decode, a head that does not parse or is longer than the buffer, a key
//! that names anything but a metadata document or a chunk in memory) is handed to hyper, with
//! every byte after it and what was looked up of it ([`Handed`]): hyper serves the rest of the
//! connection, and goes on from that lookup instead of making it again. The watchdog's timeouts apply throughout: the socket is the same [`Watched`].

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Poll, Waker};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::watchdog::{VERDICT_CLOSED, VERDICT_NONE, closed, verdict};
use super::{Closed, Watched};
use crate::http::{Handed, Reads, accepts_gzip_in};

/// How the plain reads of a connection ended.
pub(super) enum Ended {
    /// The connection is over, for this reason.
    Closed(Closed),
    /// A request that is not a plain read arrived: these bytes, from its first on, are hyper's,
    /// with what was looked up of that request, if anything.
    HandedOver(Bytes, Option<Handed>),
}

/// The read buffer: a plain read's head is a few hundred bytes. A longer head is hyper's.
const BUFFER: usize = 8 << 10;

/// Answers waiting to be sent are sent once they are this long, before more are made: a client
/// that pipelines many reads holds at most this much of them here.
const SEND_AT: usize = 64 << 10;

/// Bodies up to this long are copied behind their head, so that pipelined small answers go out
/// in one write. A longer one (a large root `zarr.json`, an inline chunk) is sent from the bytes
/// the version or the cache already holds, shared, right after its head: a client that reads
/// none of it holds no copy of it (one of 12.6 MB per connection did, held for as long as the
/// client stalled: 100 such clients took 1.3 GB).
const COPIED: usize = 16 << 10;

/// Answers the plain reads that arrive on `io`, until its client closes it, the watchdog does,
/// or a request that is not a plain read arrives. `registered` is the waker last handed to the
/// watchdog (`watchdog::verdict`).
pub(super) async fn answer(io: &mut Watched, reads: &Reads, max_head: usize, registered: &mut Option<Waker>) -> Ended {
    let mut buf = vec![0u8; BUFFER.min(max_head)];
    let (mut start, mut filled) = (0, 0);
    let mut out = Vec::with_capacity(BUFFER);
    let mut handed = None;
    loop {
        let mut answered = 0;
        // The body of the last answer, when it is too long to copy behind its head in `out`.
        let mut shared = Bytes::new();
        let stopped = loop {
            if out.len() >= SEND_AT {
                break Stopped::Sending;
            }
            match parse(&buf[start..filled]) {
                Parsed::Partial => break Stopped::Partial,
                Parsed::Other => break Stopped::Other,
                Parsed::Read { len, path, gzip, id } => {
                    // Counted as being answered until its answer is sent, as hyper's are
                    // (`Answering`).
                    let activity = &io.watch.activity;
                    activity.answering.fetch_add(1, Ordering::Relaxed);
                    activity.head_since.store(0, Ordering::Relaxed);
                    let body = match reads.answer_wire(path, gzip, id, &mut out).await {
                        Ok(body) => body,
                        Err(looked_up) => {
                            // Hyper's: counted again when hyper has its head.
                            io.watch.activity.answering.fetch_sub(1, Ordering::Relaxed);
                            handed = looked_up;
                            break Stopped::Other;
                        }
                    };
                    answered += 1;
                    start += len;
                    if body.len() > COPIED {
                        shared = body;
                        break Stopped::Sending;
                    }
                    out.extend_from_slice(&body);
                }
            }
        };
        if answered > 0 {
            let sent = write_all(io, &out, &shared, registered).await;
            drop(shared);
            let activity = &io.watch.activity;
            activity.answering.fetch_sub(answered, Ordering::Relaxed);
            let now = activity.now();
            activity.idle_since.store(now, Ordering::Relaxed);
            if start < filled {
                // The next request's head has started to arrive.
                activity.head_since.store(now, Ordering::Relaxed);
            }
            if out.capacity() > 2 * SEND_AT {
                out = Vec::with_capacity(BUFFER);
            }
            out.clear();
            if let Err(why) = sent {
                return Ended::Closed(why);
            }
        }
        match stopped {
            Stopped::Sending => continue,
            Stopped::Other => return Ended::HandedOver(Bytes::copy_from_slice(&buf[start..filled]), handed),
            Stopped::Partial => {}
        }
        buf.copy_within(start..filled, 0);
        (start, filled) = (0, filled - start);
        if filled == buf.len() {
            // A head longer than the buffer: hyper's, under its own limit.
            return Ended::HandedOver(Bytes::copy_from_slice(&buf[..filled]), None);
        }
        match read(io, &mut buf[filled..], registered).await {
            Ok(0) => return Ended::Closed(Closed::Client),
            Ok(n) => filled += n,
            Err(why) => return Ended::Closed(why),
        }
    }
}

/// Why the answering of buffered requests stopped.
enum Stopped {
    /// The next head is not all there.
    Partial,
    /// The next request is hyper's.
    Other,
    /// The answers made are to be sent first.
    Sending,
}

/// A request head at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
enum Parsed<'a> {
    /// Not all there yet.
    Partial,
    /// Anything but a plain read (or not HTTP at all): hyper's.
    Other,
    /// A plain read of `path`, `len` bytes long, that accepts gzip or not, with the client's
    /// request id (if any).
    Read { len: usize, path: &'a str, gzip: bool, id: Option<&'a [u8]> },
}

/// How many header lines a plain read may have: clients send a handful. More is hyper's.
const HEADERS: usize = 32;

fn parse(bytes: &[u8]) -> Parsed<'_> {
    if bytes.is_empty() {
        return Parsed::Partial;
    }
    let mut headers = [httparse::EMPTY_HEADER; HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    if request.method != Some("GET") || request.version != Some(1) {
        return Parsed::Other;
    }
    let Some(path) = request.path.filter(|p| p.starts_with('/') && p.bytes().all(plain_in_path)) else {
        return Parsed::Other;
    };
    let mut id = None;
    for h in request.headers.iter() {
        let refused = match h.name.len() {
            // Cheap first: most names are told apart by their length.
            5..=8 | 10 | 13 | 14 | 17 | 19 => REFUSED.iter().any(|r| h.name.eq_ignore_ascii_case(r)),
            _ => false,
        };
        let kept_alive = || h.name.eq_ignore_ascii_case("connection") && h.value.eq_ignore_ascii_case(b"keep-alive");
        if refused && !kept_alive() {
            return Parsed::Other;
        }
        if id.is_none() && h.name.eq_ignore_ascii_case("x-request-id") {
            id = Some(h.value);
        }
    }
    let encodings = request.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("accept-encoding"));
    let gzip = accepts_gzip_in(encodings.map(|h| h.value));
    Parsed::Read { len, path, gzip, id }
}

/// Request headers that make a read hyper's: what asks for less than a full answer or for one
/// under conditions, what frames a body, and what changes the connection.
const REFUSED: [&str; 11] = [
    "range",
    "if-range",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "content-length",
    "transfer-encoding",
    "expect",
    "upgrade",
    "connection",
];

/// Whether `b` may stand in a plain read's path as it is: unreserved and sub-delimiters, `:`, `@`
/// and `/`, all of which `http`'s `Uri` takes too. A `%` (to decode), a query or anything else
/// makes the request hyper's, which answers it as before.
fn plain_in_path(b: u8) -> bool {
    // A match, not `b"...".contains(&b)`: that is a `memchr` call per punctuation byte, and
    // callgrind counted 70 to 200 instructions per request for it, as the build inlined it or not.
    matches!(
        b,
        b'a'..=b'z'
            | b'A'..=b'Z'
            | b'0'..=b'9'
            | b'-'
            | b'.'
            | b'_'
            | b'~'
            | b'!'
            | b'$'
            | b'&'
            | b'\''
            | b'('
            | b')'
            | b'*'
            | b'+'
            | b','
            | b';'
            | b'='
            | b':'
            | b'@'
            | b'/'
    )
}

/// Reads into `buf` what the client has sent: how much (0 when it has closed), or why the
/// connection is to close (the watchdog's verdict; shutdown closes a connection between two
/// requests).
async fn read(io: &mut Watched, buf: &mut [u8], registered: &mut Option<Waker>) -> Result<usize, Closed> {
    std::future::poll_fn(|cx| {
        match verdict(&io.watch, registered, cx.waker()) {
            VERDICT_NONE => {}
            v if v >= VERDICT_CLOSED => return Poll::Ready(Err(closed(v))),
            _ => return Poll::Ready(Err(Closed::Client)),
        }
        let mut read = ReadBuf::new(buf);
        match Pin::new(&mut *io).poll_read(cx, &mut read) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(read.filled().len())),
            Poll::Ready(Err(_)) => Poll::Ready(Err(Closed::Client)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Sends all of `head`, then all of `body` (in one write while both fit), unless the watchdog
/// closes the connection first (shutdown lets it finish).
async fn write_all(
    io: &mut Watched,
    mut head: &[u8],
    mut body: &[u8],
    registered: &mut Option<Waker>,
) -> Result<(), Closed> {
    std::future::poll_fn(|cx| {
        loop {
            let v = verdict(&io.watch, registered, cx.waker());
            if v >= VERDICT_CLOSED {
                return Poll::Ready(Err(closed(v)));
            }
            let polled = if body.is_empty() {
                Pin::new(&mut *io).poll_write(cx, head)
            } else {
                Pin::new(&mut *io).poll_write_vectored(cx, &[IoSlice::new(head), IoSlice::new(body)])
            };
            match polled {
                Poll::Ready(Ok(n)) if n > 0 => {
                    let of_head = n.min(head.len());
                    head = &head[of_head..];
                    body = &body[n - of_head..];
                    if head.is_empty() && body.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                }
                Poll::Ready(_) => return Poll::Ready(Err(Closed::Client)),
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_bytes_of_a_plain_path_are_the_unreserved_the_sub_delims_and_the_separators() {
        for b in 0..=u8::MAX {
            let expected = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b);
            assert_eq!(super::plain_in_path(b), expected, "byte {b:#04x}");
        }
    }
    use super::{Parsed, parse};

    fn read(bytes: &[u8]) -> Option<(usize, &str, bool, Option<&[u8]>)> {
        match parse(bytes) {
            Parsed::Read { len, path, gzip, id } => Some((len, path, gzip, id)),
            _ => None,
        }
    }

    #[test]
    fn plain_reads_are_told_from_the_rest() {
        let wrk = b"GET /inline1k/zarr.json HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";
        assert_eq!(read(wrk), Some((wrk.len(), "/inline1k/zarr.json", false, None)));
        let fsspec = b"GET /s/a/c/0 HTTP/1.1\r\nHost: h\r\nAccept-Encoding: gzip, deflate\r\nConnection: Keep-Alive\r\nX-Request-Id: mine\r\n\r\nGET /next";
        assert_eq!(read(fsspec), Some((fsspec.len() - 9, "/s/a/c/0", true, Some(&b"mine"[..]))));
        assert_eq!(read(b"GET /s/a HTTP/1.1\r\naccept-encoding: gzip;q=0\r\n\r\n").map(|r| r.2), Some(false));
        assert_eq!(parse(b"GET /s/zarr.json HTTP/1.1\r\nHost: h\r\n"), Parsed::Partial);
        assert_eq!(parse(b""), Parsed::Partial);
        for other in [
            &b"HEAD /s/zarr.json HTTP/1.1\r\n\r\n"[..],
            b"GET /s/zarr.json HTTP/1.0\r\n\r\n",
            b"GET /s/zarr.json?x=1 HTTP/1.1\r\n\r\n",
            b"GET /s/zarr%2Ejson HTTP/1.1\r\n\r\n",
            b"GET /s/\"x\" HTTP/1.1\r\n\r\n",
            b"GET http://h/s/zarr.json HTTP/1.1\r\n\r\n",
            b"GET /s/c/0 HTTP/1.1\r\nRange: bytes=0-3\r\n\r\n",
            b"GET /s/c/0 HTTP/1.1\r\nif-none-match: \"x\"\r\n\r\n",
            b"GET /s/c/0 HTTP/1.1\r\nIf-Modified-Since: Thu, 26 Nov 2026 20:13:06 GMT\r\n\r\n",
            b"GET /s/c/0 HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd",
            b"GET /s/c/0 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"GET /s/c/0 HTTP/1.1\r\nConnection: close\r\n\r\n",
            b"GET /s/c/0 HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
            b"GET /s/c/0 HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
            b"GET /s/c/0 HTTP/1.1\r\nbad header\r\n\r\n",
        ] {
            assert_eq!(parse(other), Parsed::Other, "{}", String::from_utf8_lossy(other));
        }
        let many: Vec<u8> = [&b"GET /s/c/0 HTTP/1.1\r\n"[..], &b"x-a: 1\r\n".repeat(40), b"\r\n"].concat();
        assert_eq!(parse(&many), Parsed::Other, "more header lines than a plain read has");
    }

    proptest::proptest! {
        /// Whatever arrives: no panic, and a plain read is a whole head of the bytes, its path
        /// one to answer as it is.
        #[test]
        fn any_bytes_are_told_apart(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
                                    head in "GET /[a-z@/._-]{1,20} HTTP/1.1\r\n([A-Za-z-]{1,12}: [ -~]{0,20}\r\n){0,4}\r\n") {
            match parse(&bytes) {
                Parsed::Read { len, path, .. } => {
                    proptest::prop_assert!(len <= bytes.len());
                    proptest::prop_assert!(path.starts_with('/') && path.bytes().all(super::plain_in_path));
                }
                Parsed::Partial | Parsed::Other => {}
            }
            let mut both = head.clone().into_bytes();
            both.extend_from_slice(&bytes);
            if let Parsed::Read { len, .. } = parse(&both) {
                proptest::prop_assert_eq!(len, head.len());
            }
        }
    }
}
