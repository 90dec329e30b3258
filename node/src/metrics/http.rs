//! A tiny, bounded HTTP/1.1 server for `GET /metrics`: one request per connection, then close.
//!
//! The parser takes the bytes received so far and says "need more", "here is the request" or
//! why it is refused; it never panics on any input (fuzz target `http_request`). Bounds are in
//! [`super::limits`]: request size, header count, target length, I/O timeouts, connections.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};

use super::limits::{
    HTTP_CONNECTIONS_MAX, HTTP_HEADERS_MAX, HTTP_IO_TIMEOUT, HTTP_READ_CHUNK_BYTES,
    HTTP_REQUEST_BYTES_MAX, HTTP_REQUEST_DEADLINE, HTTP_TARGET_BYTES_MAX,
};

/// The path the metrics are served on.
pub const METRICS_PATH: &str = "/metrics";

/// The Prometheus text exposition format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A request method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// HEAD (answered like GET, without a body).
    Head,
    /// Anything else (405).
    Other,
}

/// A complete, well-formed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// The method.
    pub method: Method,
    /// The path, without a query string.
    pub path: &'a str,
    /// Header lines read.
    pub headers: usize,
}

/// Why a request is refused, with its status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The head is longer than `HTTP_REQUEST_BYTES_MAX` (431).
    #[error("request head over {HTTP_REQUEST_BYTES_MAX} bytes")]
    TooLarge,
    /// More than `HTTP_HEADERS_MAX` header lines (431).
    #[error("more than {HTTP_HEADERS_MAX} header lines")]
    TooManyHeaders,
    /// The target is longer than `HTTP_TARGET_BYTES_MAX` (414).
    #[error("request target over {HTTP_TARGET_BYTES_MAX} bytes")]
    TargetTooLong,
    /// The request line is not `METHOD TARGET HTTP/1.x` (400).
    #[error("malformed request line")]
    RequestLine,
    /// A header line is not `name: value` (400).
    #[error("malformed header line")]
    Header,
    /// Not HTTP/1.0 or HTTP/1.1 (505).
    #[error("unsupported HTTP version")]
    Version,
    /// Bytes that are not ASCII text in the head (400).
    #[error("non-text bytes in the request head")]
    Bytes,
}

impl HttpError {
    /// The status line for this refusal.
    pub fn status(self) -> (u16, &'static str) {
        match self {
            HttpError::TooLarge | HttpError::TooManyHeaders => {
                (431, "Request Header Fields Too Large")
            }
            HttpError::TargetTooLong => (414, "URI Too Long"),
            HttpError::Version => (505, "HTTP Version Not Supported"),
            HttpError::RequestLine | HttpError::Header | HttpError::Bytes => (400, "Bad Request"),
        }
    }
}

/// Parses the request head in `buf` (the bytes received so far): `Ok(None)` when it is not
/// complete yet (no blank line), the request once it is, or why it is refused. A body, if
/// any, is ignored (GET has none; the connection closes after the answer).
pub fn parse_request(buf: &[u8]) -> Result<Option<Request<'_>>, HttpError> {
    let Some(end) = find_head_end(buf) else {
        return if buf.len() >= HTTP_REQUEST_BYTES_MAX {
            Err(HttpError::TooLarge)
        } else {
            Ok(None)
        };
    };
    if end > HTTP_REQUEST_BYTES_MAX {
        return Err(HttpError::TooLarge);
    }
    let head = buf.get(..end).ok_or(HttpError::TooLarge)?;
    if head.iter().any(|&b| !(b == b'\r' || b == b'\n' || b == b'\t' || (0x20..0x7f).contains(&b)))
    {
        return Err(HttpError::Bytes);
    }
    let head = std::str::from_utf8(head).map_err(|_| HttpError::Bytes)?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().ok_or(HttpError::RequestLine)?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::RequestLine);
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) || target.is_empty() {
        return Err(HttpError::RequestLine);
    }
    if target.len() > HTTP_TARGET_BYTES_MAX {
        return Err(HttpError::TargetTooLong);
    }
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(if version.starts_with("HTTP/") {
            HttpError::Version
        } else {
            HttpError::RequestLine
        });
    }
    let mut headers = 0;
    for line in lines {
        if line.is_empty() {
            continue;
        }
        headers += 1;
        if headers > HTTP_HEADERS_MAX {
            return Err(HttpError::TooManyHeaders);
        }
        let Some((name, _value)) = line.split_once(':') else {
            return Err(HttpError::Header);
        };
        if name.is_empty() || name.bytes().any(|b| b == b' ' || b == b'\t') {
            return Err(HttpError::Header);
        }
    }
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        _ => Method::Other,
    };
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    Ok(Some(Request { method, path, headers }))
}

/// Offset just past the blank line ending the head, if received.
fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// What to answer: status, reason and whether to send the metrics (`None` body means use
/// the metrics text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Reason phrase.
    pub reason: &'static str,
    /// Whether the metrics text is the body (200 to GET).
    pub metrics: bool,
    /// Whether to send a body at all (not for HEAD).
    pub body: bool,
}

/// The answer to a parse result.
pub fn answer(parsed: Result<Request<'_>, HttpError>) -> Answer {
    let plain = |(status, reason): (u16, &'static str)| Answer {
        status,
        reason,
        metrics: false,
        body: true,
    };
    match parsed {
        Err(e) => plain(e.status()),
        Ok(r) if r.method == Method::Other => plain((405, "Method Not Allowed")),
        Ok(r) if r.path != METRICS_PATH => {
            Answer { body: r.method == Method::Get, ..plain((404, "Not Found")) }
        }
        Ok(r) => Answer { status: 200, reason: "OK", metrics: true, body: r.method == Method::Get },
    }
}

/// Serves `listener` until `stop` resolves: each connection gets one answer, the metrics text
/// from `scrape` for `GET /metrics`.
pub async fn serve<S, Fut>(listener: TcpListener, scrape: S, stop: impl Future<Output = ()>)
where
    S: Fn() -> Fut + Clone + 'static,
    Fut: Future<Output = String> + 'static,
{
    let open = Rc::new(Cell::new(0usize));
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            stop.as_mut().await;
            None
        })
        .await;
        let stream = match accepted {
            None => return,
            Some(Ok(stream)) => stream,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                glommio::timer::sleep(HTTP_IO_TIMEOUT / 50).await;
                continue;
            }
        };
        if open.get() >= HTTP_CONNECTIONS_MAX {
            tracing::debug!("metrics endpoint: too many connections; closing one");
            continue;
        }
        open.set(open.get() + 1);
        let (open, scrape) = (Rc::clone(&open), scrape.clone());
        glommio::spawn_local(async move {
            if let Err(e) = handle(stream, scrape).await {
                tracing::debug!(error = %e, "metrics connection ended");
            }
            open.set(open.get() - 1);
        })
        .detach();
    }
}

async fn handle<S, Fut>(mut stream: TcpStream, scrape: S) -> std::io::Result<()>
where
    S: Fn() -> Fut,
    Fut: Future<Output = String>,
{
    stream.set_read_timeout(Some(HTTP_IO_TIMEOUT))?;
    stream.set_write_timeout(Some(HTTP_IO_TIMEOUT))?;
    let mut buf = Vec::with_capacity(HTTP_READ_CHUNK_BYTES);
    let mut chunk = [0u8; HTTP_READ_CHUNK_BYTES];
    let started = std::time::Instant::now();
    let answer = loop {
        match parse_request(&buf) {
            Ok(None) => {}
            Ok(Some(request)) => break answer(Ok(request)),
            Err(e) => break answer(Err(e)),
        }
        if started.elapsed() > HTTP_REQUEST_DEADLINE {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "request head not complete within the deadline",
            ));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    };
    let (content_type, body) = if answer.metrics {
        (CONTENT_TYPE, scrape().await)
    } else {
        ("text/plain; charset=utf-8", format!("{} {}\n", answer.status, answer.reason))
    };
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        answer.status,
        answer.reason,
        body.len()
    );
    if answer.body {
        out.push_str(&body);
    }
    stream.write_all(out.as_bytes()).await?;
    stream.flush().await?;
    stream.close().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(raw: &[u8]) -> u16 {
        match parse_request(raw) {
            Ok(Some(r)) => answer(Ok(r)).status,
            Ok(None) => 0,
            Err(e) => answer(Err(e)).status,
        }
    }

    // Checks the status chosen for good, partial and bad requests.
    #[test]
    fn statuses() {
        assert_eq!(status(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), 200);
        assert_eq!(status(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), 200);
        assert_eq!(status(b"HEAD /metrics HTTP/1.1\r\n\r\n"), 200);
        assert_eq!(status(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"), 0, "incomplete");
        assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), 404);
        assert_eq!(status(b"POST /metrics HTTP/1.1\r\n\r\n"), 405);
        assert_eq!(status(b"GET /metrics HTTP/2.0\r\n\r\n"), 505);
        assert_eq!(status(b"GET /metrics\r\n\r\n"), 400);
        assert_eq!(status(b"get /metrics HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status(b"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n"), 400);
        assert_eq!(status(b"GET /m\xff HTTP/1.1\r\n\r\n"), 400);
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(HTTP_TARGET_BYTES_MAX));
        assert_eq!(status(long.as_bytes()), 414);
        let many =
            format!("GET /metrics HTTP/1.1\r\n{}\r\n", "a: b\r\n".repeat(HTTP_HEADERS_MAX + 1));
        assert_eq!(status(many.as_bytes()), 431);
        assert_eq!(status(&vec![b'a'; HTTP_REQUEST_BYTES_MAX]), 431, "no end in sight");
    }
}
