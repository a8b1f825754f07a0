//! The answer to a connection beyond `http.max_connections`: a 503 the client can read, then
//! the connection closes, instead of a socket that hangs until someone else leaves.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Refusals under way at once; past this, a connection is closed without an answer, so that a
/// flood of connections costs the server no more than this.
pub(super) const AT_ONCE: usize = 64;

/// What a refusal reads of the request (its head, in practice) and how long it waits for it.
const READ_BYTES: usize = 16 << 10;
const READ_FOR: Duration = Duration::from_secs(1);

const BODY: &str = r#"{"type":"urn:zarrgate:problem:too-many-connections","title":"Service Unavailable","status":503,"detail":"the server has as many connections open as http.max_connections allows; retry in a moment"}"#;

/// Reads what the client has sent of its request, answers 503 and closes. Reading first matters:
/// a socket closed with unread bytes is reset, and the client would see the reset instead of
/// the answer.
pub(super) async fn refuse(mut stream: TcpStream) {
    tracing::debug!("connection refused: http.max_connections reached");
    let mut head = vec![0u8; READ_BYTES];
    let mut read = 0;
    let _ = tokio::time::timeout(READ_FOR, async {
        while read < head.len() {
            match stream.read(&mut head[read..]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
            if head[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                return;
            }
        }
    })
    .await;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n\
         cache-control: no-store\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = tokio::time::timeout(READ_FOR, async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        // Until the client closes too, so that bytes it sends meanwhile do not reset the answer.
        while stream.read(&mut head).await? > 0 {}
        std::io::Result::Ok(())
    })
    .await;
}
