//! Extended-protocol misuse over a raw socket, each answered with PostgreSQL's SQLSTATE and
//! followed by a working session: unknown statement (26000) and portal (34000), duplicate
//! statement name (42P05), wrong parameter count and bad format codes (08P01), several
//! statements in one Parse (42601); plus Describe of a statement, the empty query and Close.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod pg_support;

use std::io::Write;
use std::net::TcpStream;
use std::sync::OnceLock;

use node::pg::PgConfig;
use pg_support::Server;
use pg_support::raw::{error_codes, error_field, frame, read_until_ready, session, tags};

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| pg_support::start(PgConfig::default(), 64))
}

fn parse(name: &str, sql: &str) -> Vec<u8> {
    let mut body = format!("{name}\0{sql}\0").into_bytes();
    body.extend_from_slice(&0u16.to_be_bytes());
    frame(b'P', &body)
}

fn bind(portal: &str, statement: &str, formats: &[i16], params: &[&[u8]]) -> Vec<u8> {
    let mut body = format!("{portal}\0{statement}\0").into_bytes();
    body.extend_from_slice(&u16::try_from(formats.len()).unwrap().to_be_bytes());
    for f in formats {
        body.extend_from_slice(&f.to_be_bytes());
    }
    body.extend_from_slice(&u16::try_from(params.len()).unwrap().to_be_bytes());
    for p in params {
        body.extend_from_slice(&i32::try_from(p.len()).unwrap().to_be_bytes());
        body.extend_from_slice(p);
    }
    body.extend_from_slice(&0u16.to_be_bytes());
    frame(b'B', &body)
}

fn execute(portal: &str) -> Vec<u8> {
    let mut body = format!("{portal}\0").into_bytes();
    body.extend_from_slice(&0i32.to_be_bytes());
    frame(b'E', &body)
}

fn sync() -> Vec<u8> {
    frame(b'S', b"")
}

/// Sends `batch` followed by Sync and returns the reply up to ReadyForQuery.
fn round(stream: &mut TcpStream, batch: &[Vec<u8>]) -> Vec<(u8, Vec<u8>)> {
    let mut bytes: Vec<u8> = batch.concat();
    bytes.extend_from_slice(&sync());
    stream.write_all(&bytes).unwrap();
    read_until_ready(stream)
}

// Checks each misuse gets its SQLSTATE and a hint, one error per batch, and the session keeps
// working.
#[test]
fn extended_misuse_gets_sqlstates() {
    let mut s = session(server().addr);
    let cases: Vec<(Vec<Vec<u8>>, &str, &str)> = vec![
        (vec![bind("", "nope", &[], &[])], "EZ", "26000"),
        (vec![execute("nope")], "EZ", "34000"),
        (vec![parse("s1", "select 1"), parse("s1", "select 2")], "1EZ", "42P05"),
        (vec![bind("", "s1", &[], &[b"1"])], "EZ", "08P01"),
        (vec![parse("s2", "select $1::int4"), bind("", "s2", &[7], &[b"1"])], "1EZ", "08P01"),
        (vec![bind("", "s2", &[0, 0], &[b"1"])], "EZ", "08P01"),
        (vec![parse("", "select 1; select 2")], "EZ", "42601"),
    ];
    for (batch, expected_tags, code) in cases {
        let reply = round(&mut s, &batch);
        assert_eq!(tags(&reply), expected_tags, "{code}");
        assert_eq!(error_codes(&reply), vec![code]);
        // Every one of them says what to do about it.
        let error = reply.iter().find(|(tag, _)| *tag == b'E').unwrap();
        assert!(error_field(&error.1, b'H').is_some(), "{code} has no hint");
    }
    // The statements that were created survive the errors: s2 runs with a text parameter.
    let reply = round(&mut s, &[bind("", "s2", &[0], &[b"12"]), execute("")]);
    assert_eq!(tags(&reply), "2DCZ");
    pg_support::assert_no_warnings();
}

// Checks Describe of a statement (ParameterDescription, then RowDescription or NoData), the
// empty query (EmptyQueryResponse), and Close followed by a use of the closed statement.
#[test]
fn extended_describe_empty_and_close() {
    let mut s = session(server().addr);
    let reply = round(&mut s, &[parse("d1", "select $1::int8, $2::text"), frame(b'D', b"Sd1\0")]);
    assert_eq!(tags(&reply), "1tTZ");
    let params = &reply[1].1;
    assert_eq!(&params[..2], &2u16.to_be_bytes());
    assert_eq!(&params[2..6], &20u32.to_be_bytes());
    assert_eq!(&params[6..10], &25u32.to_be_bytes());

    let reply = round(&mut s, &[parse("d2", "insert"), frame(b'D', b"Sd2\0")]);
    assert_eq!(tags(&reply), "1tnZ");

    let reply = round(&mut s, &[parse("", ""), bind("", "", &[], &[]), execute("")]);
    assert_eq!(tags(&reply), "12IZ");

    let reply = round(&mut s, &[frame(b'C', b"Sd1\0"), bind("", "d1", &[], &[])]);
    assert_eq!(tags(&reply), "3EZ");
    assert_eq!(error_codes(&reply), vec!["26000"]);
    pg_support::assert_no_warnings();
}

// Checks Flush: after Parse + Flush (no Sync) the ParseComplete arrives, and the batch goes on
// with Bind/Execute/Sync on the same socket.
#[test]
fn extended_flush_sends_without_sync() {
    use pg_support::raw::read_message;
    let mut s = session(server().addr);
    let mut bytes = parse("f1", "select 6");
    bytes.extend_from_slice(&frame(b'H', b""));
    s.write_all(&bytes).unwrap();
    assert_eq!(read_message(&mut s).map(|m| m.0), Some(b'1'));
    let reply = round(&mut s, &[bind("", "f1", &[], &[]), execute("")]);
    assert_eq!(tags(&reply), "2DCZ");
    pg_support::assert_no_warnings();
}
