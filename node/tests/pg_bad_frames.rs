//! Bad input over a raw socket: impossible and oversized lengths, unknown message types,
//! malformed bodies, invalid UTF-8, truncated and odd startup packets. Each gets the error
//! PostgreSQL would give (FATAL and close where the stream cannot be resynchronised, ERROR and
//! carry on where it can), and the server keeps serving other connections.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod pg_support;

use std::io::Write;
use std::sync::OnceLock;

use node::pg::PgConfig;
use pg_support::Server;
use pg_support::raw::{
    connect, error_codes, error_field, frame, query, read_to_eof, read_until_ready, session,
    startup_packet, tags,
};

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| pg_support::start(PgConfig::default(), 64))
}

/// Asserts the server still answers a fresh client.
fn assert_server_alive() {
    let mut stream = session(server().addr);
    stream.write_all(&query("select 1")).unwrap();
    assert_eq!(tags(&read_until_ready(&mut stream)), "TDCZ");
}

// Checks that a length word below 4 (here 0) is FATAL 08P01 and closes the connection.
#[test]
fn bad_frame_zero_length_is_fatal() {
    let mut stream = session(server().addr);
    stream.write_all(&[b'Q', 0, 0, 0, 0]).unwrap();
    let messages = read_to_eof(&mut stream);
    assert_eq!(error_codes(&messages), vec!["08P01"]);
    assert_eq!(error_field(&messages[0].1, b'S').as_deref(), Some("FATAL"));
    assert_server_alive();
    pg_support::assert_no_warnings();
}

// Checks that a length past PG_MESSAGE_BYTES_MAX is FATAL 54000 without reading the body.
#[test]
fn bad_frame_huge_length_is_fatal() {
    let mut stream = session(server().addr);
    stream.write_all(&[b'Q', 0x7f, 0xff, 0xff, 0xff]).unwrap();
    let messages = read_to_eof(&mut stream);
    assert_eq!(error_codes(&messages), vec!["54000"]);
    assert_server_alive();
    pg_support::assert_no_warnings();
}

// Checks that an unknown message type with a valid length is an ERROR and the session goes
// on: the next query on the same socket is answered.
#[test]
fn bad_frame_unknown_type_keeps_session() {
    let mut stream = session(server().addr);
    stream.write_all(&frame(b'?', b"whatever")).unwrap();
    let messages = read_until_ready(&mut stream);
    assert_eq!(tags(&messages), "EZ");
    assert_eq!(error_codes(&messages), vec!["08P01"]);
    stream.write_all(&query("select 3")).unwrap();
    assert_eq!(tags(&read_until_ready(&mut stream)), "TDCZ");
    pg_support::assert_no_warnings();
}

// Checks that a malformed Bind makes the server skip the rest of the batch until Sync (one
// ErrorResponse, then ReadyForQuery), after which the session works.
#[test]
fn bad_frame_malformed_bind_skips_until_sync() {
    let mut stream = session(server().addr);
    let mut batch = frame(b'P', b"\0select 1\0\0\0");
    batch.extend_from_slice(&frame(b'B', b"\0\0\0\x01\0\x05"));
    batch.extend_from_slice(&frame(b'E', b"\0\0\0\0\0"));
    batch.extend_from_slice(&frame(b'S', b""));
    stream.write_all(&batch).unwrap();
    let messages = read_until_ready(&mut stream);
    assert_eq!(tags(&messages), "1EZ");
    assert_eq!(error_codes(&messages), vec!["08P01"]);
    stream.write_all(&query("select 4")).unwrap();
    assert_eq!(tags(&read_until_ready(&mut stream)), "TDCZ");
    pg_support::assert_no_warnings();
}

// Checks a full pipelined extended batch written in one go: Parse, Bind, Describe portal,
// Execute with a row limit twice, Close, Sync — all answered after one read.
#[test]
fn extended_pipeline_in_one_write() {
    let mut stream = session(server().addr);
    let mut batch = frame(b'P', b"s1\0series 5\0\0\0");
    batch.extend_from_slice(&frame(b'B', b"p1\0s1\0\0\0\0\0\0\0"));
    batch.extend_from_slice(&frame(b'D', b"Pp1\0"));
    batch.extend_from_slice(&frame(b'E', b"p1\0\0\0\0\x03"));
    batch.extend_from_slice(&frame(b'E', b"p1\0\0\0\0\x03"));
    batch.extend_from_slice(&frame(b'C', b"Pp1\0"));
    batch.extend_from_slice(&frame(b'E', b"p1\0\0\0\0\0"));
    batch.extend_from_slice(&frame(b'S', b""));
    stream.write_all(&batch).unwrap();
    let messages = read_until_ready(&mut stream);
    // ParseComplete, BindComplete, RowDescription, 3 rows + PortalSuspended, 2 rows +
    // CommandComplete, CloseComplete, then Execute of the closed portal fails (34000).
    assert_eq!(tags(&messages), "12TDDDsDDC3EZ");
    assert_eq!(error_codes(&messages), vec!["34000"]);
    pg_support::assert_no_warnings();
}

// Checks that a Query that is not UTF-8 is ERROR 22021 followed by ReadyForQuery.
#[test]
fn bad_frame_invalid_utf8_query() {
    let mut stream = session(server().addr);
    stream.write_all(&frame(b'Q', b"select \xff\0")).unwrap();
    let messages = read_until_ready(&mut stream);
    assert_eq!(tags(&messages), "EZ");
    assert_eq!(error_codes(&messages), vec!["22021"]);
    pg_support::assert_no_warnings();
}

// Checks that a client that sends half a startup packet and hangs up does not hurt the server.
#[test]
fn bad_startup_truncated_then_closed() {
    let mut stream = connect(server().addr);
    let packet = startup_packet(3, 0, &[("user", "x")]);
    stream.write_all(&packet[..6]).unwrap();
    drop(stream);
    assert_server_alive();
    pg_support::assert_no_warnings();
}

// Checks startup packets with a bad length, an old protocol version and no user name: each
// is FATAL with its SQLSTATE, then closed.
#[test]
fn bad_startup_packets_are_fatal() {
    let cases: [(Vec<u8>, &str); 3] = [
        (vec![0, 0, 0, 4], "08P01"),
        (startup_packet(2, 0, &[("user", "x")]), "0A000"),
        (startup_packet(3, 0, &[("database", "x")]), "28000"),
    ];
    for (packet, code) in cases {
        let mut stream = connect(server().addr);
        stream.write_all(&packet).unwrap();
        let messages = read_to_eof(&mut stream);
        assert_eq!(error_codes(&messages), vec![code]);
    }
    assert_server_alive();
    pg_support::assert_no_warnings();
}

// Checks SSLRequest and GSSENCRequest are answered 'N' and the startup continues in plain text.
#[test]
fn ssl_and_gss_requests_answered_n() {
    use std::io::Read;
    for code in [80_877_103u32, 80_877_104] {
        let mut stream = connect(server().addr);
        let mut request = 8u32.to_be_bytes().to_vec();
        request.extend_from_slice(&code.to_be_bytes());
        stream.write_all(&request).unwrap();
        let mut answer = [0u8; 1];
        stream.read_exact(&mut answer).unwrap();
        assert_eq!(answer[0], b'N');
        stream.write_all(&startup_packet(3, 0, &[("user", "x")])).unwrap();
        let messages = read_until_ready(&mut stream);
        assert_eq!(messages.first().map(|m| m.0), Some(b'R'));
        assert_eq!(messages.last().map(|m| m.0), Some(b'Z'));
    }
    pg_support::assert_no_warnings();
}

// Checks that a 3.2 startup with a `_pq_` option gets NegotiateProtocolVersion (3.0, option
// listed) and then a normal session.
#[test]
fn protocol_3_2_is_negotiated_down() {
    let mut stream = connect(server().addr);
    stream.write_all(&startup_packet(3, 2, &[("user", "x"), ("_pq_.future", "1")])).unwrap();
    let messages = read_until_ready(&mut stream);
    assert_eq!(messages[0].0, b'v');
    assert_eq!(&messages[0].1[..4], &0i32.to_be_bytes());
    assert!(messages[0].1.ends_with(b"_pq_.future\0"));
    assert_eq!(messages.last().map(|m| m.0), Some(b'Z'));
    pg_support::assert_no_warnings();
}

// Checks the ParameterStatus values drivers rely on are sent at startup.
#[test]
fn startup_reports_parameter_status() {
    let mut stream = connect(server().addr);
    stream.write_all(&startup_packet(3, 0, &[("user", "x"), ("application_name", "app")])).unwrap();
    let messages = read_until_ready(&mut stream);
    let statuses: Vec<String> = messages
        .iter()
        .filter(|(tag, _)| *tag == b'S')
        .map(|(_, body)| String::from_utf8_lossy(body).replace('\0', "="))
        .collect();
    for expected in [
        "server_version=15.0=",
        "server_encoding=UTF8=",
        "client_encoding=UTF8=",
        "DateStyle=ISO, MDY=",
        "integer_datetimes=on=",
        "standard_conforming_strings=on=",
        "TimeZone=UTC=",
        "application_name=app=",
    ] {
        assert!(statuses.iter().any(|s| s == expected), "{expected} missing in {statuses:?}");
    }
    assert!(messages.iter().any(|(tag, body)| *tag == b'K' && body.len() == 8));
    pg_support::assert_no_warnings();
}

// Checks that a Sync with a malformed body is reported (08P01) and still ends the batch with
// ReadyForQuery, so the client is not left waiting.
#[test]
fn bad_frame_malformed_sync_still_syncs() {
    let mut stream = session(server().addr);
    let mut batch = frame(b'P', b"\0select 1\0\0\0");
    batch.extend_from_slice(&frame(b'S', b"junk"));
    stream.write_all(&batch).unwrap();
    let messages = read_until_ready(&mut stream);
    assert_eq!(tags(&messages), "1EZ");
    assert_eq!(error_codes(&messages), vec!["08P01"]);
    stream.write_all(&query("select 2")).unwrap();
    assert_eq!(tags(&read_until_ready(&mut stream)), "TDCZ");
    pg_support::assert_no_warnings();
}
