//! The entry point of the `pg_frontend` fuzz target, here so the corpus replay test
//! (`node/tests/pg_fuzz_corpus.rs`) runs exactly the same code.
//!
//! Property: no input makes any of it panic (or allocate without bound: every allocation is
//! sized by bytes already present).

use bytes::BytesMut;

use crate::pg::frame::{
    FrontendMessage, StartupRequest, after_execute, decode_message, decode_sasl_initial,
    decode_startup, split_frame, split_startup,
};
use crate::pg::scram::{ScramCredentials, ScramExchange};

/// Feeds `data` through the decoders in the order a connection uses them: startup packets
/// (SSLRequest/GSSENCRequest may come first) until a StartupMessage, then regular frames until
/// the bytes run out or a fatal framing error. Password ('p') bodies also go through the
/// SASLInitialResponse decoder and the SCRAM server (client-first, then client-final); after
/// an Execute the look-ahead at the bytes behind it (`after_execute`) runs as a connection
/// runs it. Returns how many packets decoded successfully.
pub fn frontend_bytes(data: &[u8]) -> usize {
    let mut buf = BytesMut::from(data);
    let mut decoded = 0;
    loop {
        let Ok(Some(body)) = split_startup(&mut buf) else { return decoded };
        match decode_startup(body) {
            Ok(StartupRequest::Ssl | StartupRequest::GssEnc) => decoded += 1,
            Ok(StartupRequest::Cancel { .. } | StartupRequest::PeerData) => return decoded + 1,
            Ok(StartupRequest::Startup { .. }) => {
                decoded += 1;
                break;
            }
            Err(_) => return decoded,
        }
    }
    // One iteration: cheap to derive per input, same code path as the default 4096.
    let Ok(credentials) = ScramCredentials::from_password_with_salt("pencil", b"salt", 1) else {
        return decoded;
    };
    let mut exchange: Option<ScramExchange> = None;
    while let Ok(Some(frame)) = split_frame(&mut buf) {
        let Ok(message) = decode_message(frame) else { continue };
        decoded += 1;
        if let FrontendMessage::Execute { .. } = message {
            let _ = after_execute(&buf);
        }
        if let FrontendMessage::Password { body } = message {
            match exchange.take() {
                None => {
                    if let Ok(initial) = decode_sasl_initial(body) {
                        let first = initial.data.unwrap_or_default();
                        exchange = ScramExchange::start(&credentials, &first, "servernonce")
                            .ok()
                            .map(|(e, _)| e);
                    }
                }
                Some(e) => {
                    let _ = e.finish(&credentials, &body);
                }
            }
        }
    }
    decoded
}
