//! Frontend frame splitting and message decoding.
//!
//! Bytes from the socket accumulate in a `BytesMut`; [`split_startup`] and [`split_frame`] cut
//! exactly one length-prefixed packet off its front once it is complete, after checking the
//! length against [`PG_STARTUP_BYTES_MAX`] / [`PG_MESSAGE_BYTES_MAX`]. [`decode_startup`] and
//! [`decode_message`] then read that one packet with a bounds-checked cursor, so a lying count
//! inside a message can never read past its frame.
//!
//! Why not pgwire's `PgWireFrontendMessage::decode`: in pgwire 0.42 it reads counts and integers
//! with `bytes::Buf::get_*`, which panics on a truncated body (a Bind or Parse cut short), and a
//! length word below 4 makes it frame the following bytes wrongly. Frontend bytes are untrusted,
//! so we decode them here, and use pgwire's codec for every backend message we send.
//!
//! Errors split by what they do to the connection: [`FrameError::is_fatal`] ones (a length
//! that cannot be trusted) leave the stream unsynchronisable and close it; the rest concern one
//! well-framed message, which is skipped while the session goes on.

use bytes::{Buf, Bytes, BytesMut};

use crate::pg::limits::{
    PG_MESSAGE_BYTES_MAX, PG_STARTUP_BYTES_MAX, PG_STARTUP_BYTES_MIN, PG_STARTUP_PARAMETERS_MAX,
};

/// Protocol code of an SSLRequest.
pub const SSL_REQUEST_CODE: u32 = 80_877_103;
/// Protocol code of a GSSENCRequest.
pub const GSSENC_REQUEST_CODE: u32 = 80_877_104;

/// Protocol code of a cluster data connection (Tessera-internal, like SSLRequest's: a peer
/// node forwarding statement shares; see `cluster::forward`). Only cluster nodes accept it.
pub const PEER_DATA_CODE: u32 = 80_877_120;
/// Protocol code of a CancelRequest.
pub const CANCEL_REQUEST_CODE: u32 = 80_877_102;

/// Why a frontend packet could not be framed or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The length word is larger than the limit.
    #[error("message of {len} bytes is larger than the limit of {max} bytes")]
    TooLarge {
        /// Claimed length, in bytes.
        len: u64,
        /// The limit, in bytes.
        max: usize,
    },
    /// The length word is impossible (smaller than itself, or negative).
    #[error("invalid message length {len}")]
    BadLength {
        /// The length word as sent.
        len: i64,
    },
    /// A message type byte we do not know.
    #[error("invalid frontend message type {tag:#04x}")]
    UnknownType {
        /// The type byte.
        tag: u8,
    },
    /// The body of a message does not follow its format.
    #[error("invalid {message} message: {what}")]
    Malformed {
        /// Which message.
        message: &'static str,
        /// What is wrong.
        what: &'static str,
    },
    /// A string field is not valid UTF-8.
    #[error("invalid UTF-8 in the {what} of a {message} message")]
    NotUtf8 {
        /// Which message.
        message: &'static str,
        /// Which field.
        what: &'static str,
    },
}

impl FrameError {
    /// True when the stream can no longer be split into frames, so the connection must close.
    pub fn is_fatal(&self) -> bool {
        matches!(self, FrameError::TooLarge { .. } | FrameError::BadLength { .. })
    }
}

/// The first packet of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupRequest {
    /// SSLRequest: we answer 'N'.
    Ssl,
    /// GSSENCRequest: we answer 'N'.
    GssEnc,
    /// A cluster peer's data connection (`PEER_DATA_CODE`).
    PeerData,
    /// CancelRequest for the session with this key.
    Cancel {
        /// The session's process id from BackendKeyData.
        pid: i32,
        /// The session's secret key from BackendKeyData.
        secret: Bytes,
    },
    /// StartupMessage.
    Startup {
        /// Requested protocol major version.
        major: u16,
        /// Requested protocol minor version.
        minor: u16,
        /// Parameters in the order sent (user, database, application_name, options, ...).
        parameters: Vec<(String, String)>,
    },
}

/// Cuts one startup-phase packet (no type byte) off `buf` if complete. `Ok(None)` means more
/// bytes are needed.
pub fn split_startup(buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
    let Some(len_bytes) = buf.first_chunk::<4>() else { return Ok(None) };
    let len = i32::from_be_bytes(*len_bytes);
    let len_usize = usize::try_from(len).map_err(|_| FrameError::BadLength { len: len.into() })?;
    if len_usize < PG_STARTUP_BYTES_MIN {
        return Err(FrameError::BadLength { len: len.into() });
    }
    if len_usize > PG_STARTUP_BYTES_MAX {
        return Err(FrameError::TooLarge { len: len_usize as u64, max: PG_STARTUP_BYTES_MAX });
    }
    if buf.len() < len_usize {
        return Ok(None);
    }
    let mut packet = buf.split_to(len_usize);
    packet.advance(4);
    Ok(Some(packet.freeze()))
}

/// Decodes a startup-phase packet body (after the length word) cut by [`split_startup`].
pub fn decode_startup(body: Bytes) -> Result<StartupRequest, FrameError> {
    const M: &str = "startup";
    let mut r = Reader::new(body, M);
    let code = r.u32()?;
    match code {
        SSL_REQUEST_CODE => {
            r.finish()?;
            Ok(StartupRequest::Ssl)
        }
        GSSENC_REQUEST_CODE => {
            r.finish()?;
            Ok(StartupRequest::GssEnc)
        }
        PEER_DATA_CODE => {
            r.finish()?;
            Ok(StartupRequest::PeerData)
        }
        CANCEL_REQUEST_CODE => {
            let pid = r.i32()?;
            // Protocol 3.0 keys are 4 bytes; 3.2 allows up to 256.
            let secret = r.rest();
            if secret.len() < 4 || secret.len() > 256 {
                return Err(FrameError::Malformed { message: M, what: "cancel key length" });
            }
            Ok(StartupRequest::Cancel { pid, secret })
        }
        _ => {
            let major = u16::try_from(code >> 16).unwrap_or(u16::MAX);
            let minor = u16::try_from(code & 0xffff).unwrap_or(u16::MAX);
            let mut parameters = Vec::new();
            loop {
                let name = r.cstr("parameter name")?;
                if name.is_empty() {
                    break;
                }
                let value = r.cstr("parameter value")?;
                if parameters.len() >= PG_STARTUP_PARAMETERS_MAX {
                    cov_mark::hit!(pg_startup_too_many_parameters);
                    return Err(FrameError::Malformed { message: M, what: "too many parameters" });
                }
                parameters.push((name, value));
            }
            r.finish()?;
            Ok(StartupRequest::Startup { major, minor, parameters })
        }
    }
}

/// One frame of the regular phase: a type byte and its body (the length word stripped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Message type byte.
    pub tag: u8,
    /// Message body.
    pub body: Bytes,
}

/// Cuts one regular frame off `buf` if complete. `Ok(None)` means more bytes are needed.
pub fn split_frame(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
    let Some(&[tag, l0, l1, l2, l3]) = buf.first_chunk::<5>() else { return Ok(None) };
    let len = i32::from_be_bytes([l0, l1, l2, l3]);
    let len_usize = usize::try_from(len).map_err(|_| FrameError::BadLength { len: len.into() })?;
    let Some(body_len) = len_usize.checked_sub(4) else {
        return Err(FrameError::BadLength { len: len.into() });
    };
    if body_len > PG_MESSAGE_BYTES_MAX {
        return Err(FrameError::TooLarge { len: len_usize as u64, max: PG_MESSAGE_BYTES_MAX });
    }
    // `len_usize + 1 <= PG_MESSAGE_BYTES_MAX + 5`, no overflow.
    if buf.len() < len_usize + 1 {
        return Ok(None);
    }
    let mut frame = buf.split_to(len_usize + 1);
    frame.advance(5);
    Ok(Some(Frame { tag, body: frame.freeze() }))
}

/// What the frames already received after an Execute say about its batch
/// ([`after_execute`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterExecute {
    /// A Sync comes before any other Execute: the Execute is alone in its batch.
    SyncAlone,
    /// Another Execute (or a Query, Terminate or other message that is not Parse, Bind,
    /// Describe, Close or Flush) comes first, or a Flush ends what was received: the client
    /// goes on, or wants the answer, before its Sync.
    More,
    /// Neither yet: the bytes end (between frames or inside one) before anything decides.
    Unknown,
}

/// Looks at the frames received after an Execute, by their headers only: Parse, Bind,
/// Describe, Close and Flush are skipped by their length until a Sync, an Execute or another
/// message decides; a bad length decides `More` (splitting the frame will fail).
pub fn after_execute(buf: &[u8]) -> AfterExecute {
    let mut rest = buf;
    let mut flush = false;
    while let Some(&[tag, l0, l1, l2, l3]) = rest.first_chunk::<5>() {
        match tag {
            b'S' => return AfterExecute::SyncAlone,
            b'H' => flush = true,
            b'P' | b'B' | b'D' | b'C' => {}
            _ => return AfterExecute::More,
        }
        let Ok(len) = usize::try_from(i32::from_be_bytes([l0, l1, l2, l3])) else {
            return AfterExecute::More;
        };
        let Some(next) = len.checked_add(1).and_then(|n| rest.get(n..)) else { break };
        rest = next;
    }
    if flush { AfterExecute::More } else { AfterExecute::Unknown }
}

/// What Describe and Close refer to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// 'S': a prepared statement.
    Statement,
    /// 'P': a portal.
    Portal,
}

/// A decoded frontend message of the regular phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontendMessage {
    /// 'Q' simple query.
    Query {
        /// The SQL text, possibly several statements.
        sql: String,
    },
    /// 'P' Parse.
    Parse {
        /// Statement name; empty is the unnamed statement.
        name: String,
        /// The SQL text.
        sql: String,
        /// Parameter type OIDs given by the client (0 = unspecified).
        param_types: Vec<u32>,
    },
    /// 'B' Bind.
    Bind {
        /// Portal name; empty is the unnamed portal.
        portal: String,
        /// Statement name.
        statement: String,
        /// Parameter format codes (0 text, 1 binary), 0, 1 or one per parameter.
        param_formats: Vec<i16>,
        /// Parameter values; `None` is SQL NULL.
        params: Vec<Option<Bytes>>,
        /// Result column format codes, 0, 1 or one per column.
        result_formats: Vec<i16>,
    },
    /// 'D' Describe.
    Describe {
        /// Statement or portal.
        target: Target,
        /// Its name.
        name: String,
    },
    /// 'E' Execute.
    Execute {
        /// Portal name.
        portal: String,
        /// Row limit; 0 means no limit.
        max_rows: i32,
    },
    /// 'C' Close.
    Close {
        /// Statement or portal.
        target: Target,
        /// Its name.
        name: String,
    },
    /// 'S' Sync.
    Sync,
    /// 'H' Flush.
    Flush,
    /// 'X' Terminate.
    Terminate,
    /// 'p' password / SASL response; its meaning depends on the authentication step.
    Password {
        /// The raw body.
        body: Bytes,
    },
    /// 'd', 'c', 'f' COPY sub-protocol messages; we never start COPY, so these are ignored as
    /// PostgreSQL does outside COPY mode.
    Copy,
}

/// Decodes one frame cut by [`split_frame`].
pub fn decode_message(frame: Frame) -> Result<FrontendMessage, FrameError> {
    let Frame { tag, body } = frame;
    let msg = match tag {
        b'Q' => {
            let mut r = Reader::new(body, "Query");
            let sql = r.cstr("query")?;
            r.finish()?;
            FrontendMessage::Query { sql }
        }
        b'P' => {
            let mut r = Reader::new(body, "Parse");
            let name = r.cstr("statement name")?;
            let sql = r.cstr("query")?;
            let count = r.u16()?;
            r.need(usize::from(count) * 4)?;
            let mut param_types = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                param_types.push(r.u32()?);
            }
            r.finish()?;
            FrontendMessage::Parse { name, sql, param_types }
        }
        b'B' => {
            let mut r = Reader::new(body, "Bind");
            let portal = r.cstr("portal name")?;
            let statement = r.cstr("statement name")?;
            let count = r.u16()?;
            r.need(usize::from(count) * 2)?;
            let mut param_formats = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                param_formats.push(r.i16()?);
            }
            let count = r.u16()?;
            r.need(usize::from(count) * 4)?;
            let mut params = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                let len = r.i32()?;
                if len == -1 {
                    params.push(None);
                } else {
                    let len = usize::try_from(len).map_err(|_| {
                        cov_mark::hit!(pg_bind_negative_length);
                        FrameError::Malformed { message: "Bind", what: "negative parameter length" }
                    })?;
                    params.push(Some(r.bytes(len)?));
                }
            }
            let count = r.u16()?;
            r.need(usize::from(count) * 2)?;
            let mut result_formats = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                result_formats.push(r.i16()?);
            }
            r.finish()?;
            FrontendMessage::Bind { portal, statement, param_formats, params, result_formats }
        }
        b'D' | b'C' => {
            let message = if tag == b'D' { "Describe" } else { "Close" };
            let mut r = Reader::new(body, message);
            let target = match r.u8()? {
                b'S' => Target::Statement,
                b'P' => Target::Portal,
                _ => return Err(FrameError::Malformed { message, what: "target is not S or P" }),
            };
            let name = r.cstr("name")?;
            r.finish()?;
            if tag == b'D' {
                FrontendMessage::Describe { target, name }
            } else {
                FrontendMessage::Close { target, name }
            }
        }
        b'E' => {
            let mut r = Reader::new(body, "Execute");
            let portal = r.cstr("portal name")?;
            let max_rows = r.i32()?;
            r.finish()?;
            FrontendMessage::Execute { portal, max_rows }
        }
        b'S' | b'H' | b'X' => {
            let message = match tag {
                b'S' => "Sync",
                b'H' => "Flush",
                _ => "Terminate",
            };
            Reader::new(body, message).finish()?;
            match tag {
                b'S' => FrontendMessage::Sync,
                b'H' => FrontendMessage::Flush,
                _ => FrontendMessage::Terminate,
            }
        }
        b'p' => FrontendMessage::Password { body },
        b'd' | b'c' | b'f' => FrontendMessage::Copy,
        _ => return Err(FrameError::UnknownType { tag }),
    };
    Ok(msg)
}

/// The body of a SASLInitialResponse: mechanism name and initial client data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslInitial {
    /// The mechanism the client chose.
    pub mechanism: String,
    /// The client-first message; `None` when the client sent length -1.
    pub data: Option<Bytes>,
}

/// Decodes a 'p' body as SASLInitialResponse.
pub fn decode_sasl_initial(body: Bytes) -> Result<SaslInitial, FrameError> {
    let mut r = Reader::new(body, "SASLInitialResponse");
    let mechanism = r.cstr("mechanism")?;
    let len = r.i32()?;
    let data = if len == -1 {
        None
    } else {
        let len = usize::try_from(len).map_err(|_| FrameError::Malformed {
            message: "SASLInitialResponse",
            what: "negative data length",
        })?;
        Some(r.bytes(len)?)
    };
    r.finish()?;
    Ok(SaslInitial { mechanism, data })
}

/// A bounds-checked reader over one message body.
struct Reader {
    body: Bytes,
    message: &'static str,
}

impl Reader {
    fn new(body: Bytes, message: &'static str) -> Reader {
        Reader { body, message }
    }

    fn short(&self) -> FrameError {
        FrameError::Malformed { message: self.message, what: "message is shorter than its fields" }
    }

    /// Checks that at least `n` bytes remain, before allocating for `n` bytes of elements.
    fn need(&self, n: usize) -> Result<(), FrameError> {
        if self.body.remaining() < n { Err(self.short()) } else { Ok(()) }
    }

    fn u8(&mut self) -> Result<u8, FrameError> {
        self.need(1)?;
        Ok(self.body.get_u8())
    }

    fn u16(&mut self) -> Result<u16, FrameError> {
        self.need(2)?;
        Ok(self.body.get_u16())
    }

    fn i16(&mut self) -> Result<i16, FrameError> {
        self.need(2)?;
        Ok(self.body.get_i16())
    }

    fn u32(&mut self) -> Result<u32, FrameError> {
        self.need(4)?;
        Ok(self.body.get_u32())
    }

    fn i32(&mut self) -> Result<i32, FrameError> {
        self.need(4)?;
        Ok(self.body.get_i32())
    }

    fn bytes(&mut self, n: usize) -> Result<Bytes, FrameError> {
        self.need(n)?;
        Ok(self.body.split_to(n))
    }

    fn rest(&mut self) -> Bytes {
        std::mem::take(&mut self.body)
    }

    /// A NUL-terminated UTF-8 string.
    fn cstr(&mut self, what: &'static str) -> Result<String, FrameError> {
        let Some(nul) = self.body.iter().position(|&b| b == 0) else {
            return Err(FrameError::Malformed {
                message: self.message,
                what: "string is not NUL-terminated",
            });
        };
        let raw = self.body.split_to(nul);
        self.body.advance(1);
        String::from_utf8(raw.to_vec())
            .map_err(|_| FrameError::NotUtf8 { message: self.message, what })
    }

    fn finish(self) -> Result<(), FrameError> {
        if self.body.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Malformed { message: self.message, what: "trailing bytes" })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    // Checks the look-ahead after an Execute: a Sync before any other Execute means alone
    // (other frames between, a Flush included, are skipped by their length); another Execute
    // or a Query first, a Flush ending the bytes, or a bad length mean more; no Sync yet, a
    // partial header or a partial frame mean unknown.
    #[test]
    fn unit_after_execute() {
        use AfterExecute::{More, SyncAlone, Unknown};
        let sync = frame(b'S', b"");
        let execute = frame(b'E', b"\0\0\0\0\0");
        let close = frame(b'C', b"P\0");
        let flush = frame(b'H', b"");
        let query = frame(b'Q', b"select 1\0");
        assert_eq!(after_execute(&sync), SyncAlone);
        assert_eq!(after_execute(&[close.clone(), sync.clone()].concat()), SyncAlone);
        assert_eq!(after_execute(&[flush.clone(), sync.clone()].concat()), SyncAlone);
        assert_eq!(after_execute(&[execute.clone(), sync.clone()].concat()), More);
        assert_eq!(after_execute(&[close.clone(), execute, sync.clone()].concat()), More);
        assert_eq!(after_execute(&[query, sync.clone()].concat()), More);
        assert_eq!(after_execute(&[close.clone(), flush].concat()), More);
        assert_eq!(after_execute(&[b'C', 0xff, 0xff, 0xff, 0xff, b'S', 0, 0, 0, 4]), More);
        assert_eq!(after_execute(b""), Unknown);
        assert_eq!(after_execute(&close), Unknown);
        assert_eq!(after_execute(&sync[..3]), Unknown);
        assert_eq!(after_execute(&[b'C', 0, 0, 0, 40, b'S', 0, 0, 0, 4]), Unknown);
    }

    fn frame(tag: u8, body: &[u8]) -> BytesMut {
        let mut b = BytesMut::new();
        b.put_u8(tag);
        b.put_i32(i32::try_from(body.len() + 4).unwrap());
        b.put_slice(body);
        b
    }

    // Checks that frames are cut only when complete, one at a time, and decode.
    #[test]
    fn unit_split_and_decode_pipeline() {
        let mut buf = frame(b'Q', b"SELECT 1\0");
        buf.extend_from_slice(&frame(b'S', b""));
        let whole = buf.clone();
        let mut partial = BytesMut::from(&whole[..7]);
        assert_eq!(split_frame(&mut partial), Ok(None));
        let f = split_frame(&mut buf).unwrap().unwrap();
        assert_eq!(decode_message(f), Ok(FrontendMessage::Query { sql: "SELECT 1".into() }));
        let f = split_frame(&mut buf).unwrap().unwrap();
        assert_eq!(decode_message(f), Ok(FrontendMessage::Sync));
        assert!(buf.is_empty());
        assert_eq!(split_frame(&mut buf), Ok(None));
    }

    // Checks that impossible and oversized lengths are fatal, and nothing is consumed.
    #[test]
    fn unit_bad_lengths_are_fatal() {
        for len in [0i32, 3, -1, i32::MIN] {
            let mut b = BytesMut::new();
            b.put_u8(b'Q');
            b.put_i32(len);
            let err = split_frame(&mut b).unwrap_err();
            assert!(err.is_fatal(), "{err:?}");
        }
        let mut b = BytesMut::new();
        b.put_u8(b'Q');
        b.put_i32(i32::try_from(PG_MESSAGE_BYTES_MAX + 5).unwrap());
        assert!(matches!(split_frame(&mut b), Err(FrameError::TooLarge { .. })));
    }

    // Checks that a Bind whose counts lie about its size is refused without reading past it.
    #[test]
    fn unit_truncated_bind_is_malformed() {
        let mut body = Vec::new();
        body.extend_from_slice(b"\0\0");
        body.extend_from_slice(&0u16.to_be_bytes());
        body.extend_from_slice(&1u16.to_be_bytes());
        body.extend_from_slice(&100i32.to_be_bytes());
        body.extend_from_slice(b"abc");
        let f = split_frame(&mut frame(b'B', &body)).unwrap().unwrap();
        assert!(matches!(decode_message(f), Err(FrameError::Malformed { .. })));
        let f = split_frame(&mut frame(b'P', b"\0SELECT 1\0")).unwrap().unwrap();
        assert!(matches!(decode_message(f), Err(FrameError::Malformed { .. })));
        let f = split_frame(&mut frame(b'S', b"x")).unwrap().unwrap();
        assert!(matches!(decode_message(f), Err(FrameError::Malformed { .. })));
    }

    // Checks the two hard-to-reach refusals: a startup packet with more parameters than
    // PG_STARTUP_PARAMETERS_MAX, and a Bind parameter length below -1.
    #[test]
    fn unit_startup_parameter_limit_and_negative_bind_length() {
        let mut body = 196_608u32.to_be_bytes().to_vec();
        for i in 0..=PG_STARTUP_PARAMETERS_MAX {
            body.extend_from_slice(format!("k{i}\0v\0").as_bytes());
        }
        body.push(0);
        {
            cov_mark::check!(pg_startup_too_many_parameters);
            assert!(matches!(
                decode_startup(Bytes::from(body)),
                Err(FrameError::Malformed { what: "too many parameters", .. })
            ));
        }
        let mut bind = b"\0\0".to_vec();
        bind.extend_from_slice(&0u16.to_be_bytes());
        bind.extend_from_slice(&1u16.to_be_bytes());
        bind.extend_from_slice(&(-2i32).to_be_bytes());
        bind.extend_from_slice(&0u16.to_be_bytes());
        let f = split_frame(&mut frame(b'B', &bind)).unwrap().unwrap();
        cov_mark::check!(pg_bind_negative_length);
        assert!(decode_message(f).is_err());
    }

    // Checks that a full Bind with NULL, text and binary values decodes.
    #[test]
    fn unit_bind_decodes() {
        let mut body = Vec::new();
        body.extend_from_slice(b"p1\0s1\0");
        body.extend_from_slice(&2u16.to_be_bytes());
        body.extend_from_slice(&0i16.to_be_bytes());
        body.extend_from_slice(&1i16.to_be_bytes());
        body.extend_from_slice(&2u16.to_be_bytes());
        body.extend_from_slice(&(-1i32).to_be_bytes());
        body.extend_from_slice(&2i32.to_be_bytes());
        body.extend_from_slice(b"hi");
        body.extend_from_slice(&1u16.to_be_bytes());
        body.extend_from_slice(&1i16.to_be_bytes());
        let f = split_frame(&mut frame(b'B', &body)).unwrap().unwrap();
        assert_eq!(
            decode_message(f),
            Ok(FrontendMessage::Bind {
                portal: "p1".into(),
                statement: "s1".into(),
                param_formats: vec![0, 1],
                params: vec![None, Some(Bytes::from_static(b"hi"))],
                result_formats: vec![1],
            })
        );
    }

    // Checks unknown types and invalid UTF-8 are per-message (non-fatal) errors.
    #[test]
    fn unit_unknown_type_and_bad_utf8_are_not_fatal() {
        let f = split_frame(&mut frame(b'?', b"xyz")).unwrap().unwrap();
        let err = decode_message(f).unwrap_err();
        assert_eq!(err, FrameError::UnknownType { tag: b'?' });
        assert!(!err.is_fatal());
        let f = split_frame(&mut frame(b'Q', b"\xff\xfe\0")).unwrap().unwrap();
        assert!(matches!(decode_message(f), Err(FrameError::NotUtf8 { .. })));
    }

    // Checks the startup packet family: SSL, cancel, startup with parameters, and bad lengths.
    #[test]
    fn unit_startup_packets() {
        let packet = |body: &[u8]| {
            let mut b = BytesMut::new();
            b.put_i32(i32::try_from(body.len() + 4).unwrap());
            b.put_slice(body);
            b
        };
        let mut b = packet(&SSL_REQUEST_CODE.to_be_bytes());
        let body = split_startup(&mut b).unwrap().unwrap();
        assert_eq!(decode_startup(body), Ok(StartupRequest::Ssl));

        let mut cancel = CANCEL_REQUEST_CODE.to_be_bytes().to_vec();
        cancel.extend_from_slice(&7i32.to_be_bytes());
        cancel.extend_from_slice(&[1, 2, 3, 4]);
        let body = split_startup(&mut packet(&cancel)).unwrap().unwrap();
        assert_eq!(
            decode_startup(body),
            Ok(StartupRequest::Cancel { pid: 7, secret: Bytes::from_static(&[1, 2, 3, 4]) })
        );

        let mut startup = 196_608u32.to_be_bytes().to_vec();
        startup.extend_from_slice(b"user\0alice\0database\0db\0\0");
        let body = split_startup(&mut packet(&startup)).unwrap().unwrap();
        assert_eq!(
            decode_startup(body),
            Ok(StartupRequest::Startup {
                major: 3,
                minor: 0,
                parameters: vec![("user".into(), "alice".into()), ("database".into(), "db".into())],
            })
        );

        let mut truncated = 196_608u32.to_be_bytes().to_vec();
        truncated.extend_from_slice(b"user\0alice");
        let body = split_startup(&mut packet(&truncated)).unwrap().unwrap();
        assert!(decode_startup(body).is_err());

        let mut short = BytesMut::new();
        short.put_i32(4);
        assert!(split_startup(&mut short).unwrap_err().is_fatal());
        let mut huge = BytesMut::new();
        huge.put_i32(1 << 30);
        assert!(split_startup(&mut huge).unwrap_err().is_fatal());
    }
}
