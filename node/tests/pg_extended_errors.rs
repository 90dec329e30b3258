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
use pg_support::raw::{
    bind, error_codes, error_field, execute, frame, parse, read_until_ready, session, sync, tags,
};

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| pg_support::start(PgConfig::default(), 64))
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

/// The session's `implicit_ends` (how its implicit transactions ended), by simple query.
fn implicit_ends(stream: &mut TcpStream) -> String {
    stream.write_all(&pg_support::raw::query("implicit_ends")).unwrap();
    let reply = read_until_ready(stream);
    let row = &reply.iter().find(|(tag, _)| *tag == b'D').expect("a row").1;
    // DataRow: column count (2 bytes), then the one value's length (4) and bytes.
    String::from_utf8(row[6..].to_vec()).unwrap()
}

// Checks the Executes before one Sync form one implicit transaction, as in PostgreSQL: two
// Executes (or one whose Sync has not arrived yet) are bracketed by the engine's
// begin_implicit / end_implicit, ended at Sync with `failed` after an error in the batch and
// its commit error sent before ReadyForQuery; an Execute followed by its Sync alone (what
// drivers send for one statement) is not.
#[test]
fn extended_batch_is_one_implicit_transaction() {
    let mut s = session(server().addr);
    let insert = || [bind("", "ins", &[], &[]), execute("")];
    let reply = round(&mut s, &[vec![parse("ins", "insert")], insert().to_vec()].concat());
    assert_eq!(tags(&reply), "12CZ");
    assert_eq!(implicit_ends(&mut s), "", "one Execute before its Sync stands alone");

    let reply = round(&mut s, &[insert(), insert()].concat());
    assert_eq!(tags(&reply), "2C2CZ");
    assert_eq!(implicit_ends(&mut s), "ok");

    let fail = [parse("", "fail"), bind("", "", &[], &[]), execute("")];
    let reply = round(&mut s, &[insert().to_vec(), fail.to_vec(), insert().to_vec()].concat());
    assert_eq!(tags(&reply), "2C12EZ");
    assert_eq!(error_codes(&reply), vec!["22012"]);
    assert_eq!(implicit_ends(&mut s), "ok,failed");

    let doomed = [parse("", "doomed"), bind("", "", &[], &[]), execute("")];
    let reply = round(&mut s, &[doomed.to_vec(), insert().to_vec()].concat());
    assert_eq!(tags(&reply), "12C2CEZ", "the commit's error comes before ReadyForQuery");
    assert_eq!(error_codes(&reply), vec!["40001"]);
    assert_eq!(implicit_ends(&mut s), "ok,failed,ok");

    // A Flush and no Sync yet: the client wants the Execute's answer first, so it runs in a
    // transaction its Sync ends.
    s.write_all(&[insert().concat(), frame(b'H', b"")].concat()).unwrap();
    let first = pg_support::raw::read_message(&mut s).map(|m| m.0);
    let second = pg_support::raw::read_message(&mut s).map(|m| m.0);
    assert_eq!((first, second), (Some(b'2'), Some(b'C')));
    s.write_all(&sync()).unwrap();
    assert_eq!(tags(&read_until_ready(&mut s)), "Z");
    assert_eq!(implicit_ends(&mut s), "ok,failed,ok,ok");

    // The Sync split from its Execute (here inside its header, in two writes): the server
    // reads on until it knows, and the Execute stands alone.
    let sync = sync();
    s.write_all(&[insert().concat(), sync[..3].to_vec()].concat()).unwrap();
    s.write_all(&sync[3..]).unwrap();
    assert_eq!(tags(&read_until_ready(&mut s)), "2CZ");
    assert_eq!(implicit_ends(&mut s), "ok,failed,ok,ok", "no transaction around a lone Execute");
    pg_support::assert_no_warnings();
}
