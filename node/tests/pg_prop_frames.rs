//! Property test of the frontend decoder against pgwire's encoder: random sequences of Query,
//! Parse, Bind, Describe, Execute, Close, Sync and Flush are encoded with
//! `PgWireFrontendMessage::encode`, cut into random chunks (as TCP may deliver them), fed to
//! `split_frame` / `decode_message` chunk by chunk, and must decode to exactly the messages
//! sent. Startup packets likewise. Seeded: PROPTEST_RNG_SEED (default fixed), case count from
//! PROPTEST_CASES.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use node::pg::frame::{
    FrontendMessage, StartupRequest, Target, decode_message, decode_startup, split_frame,
    split_startup,
};
use pgwire::messages::Message as _;
use pgwire::messages::PgWireFrontendMessage as F;
use pgwire::messages::extendedquery::{Bind, Close, Describe, Execute, Flush, Parse, Sync};
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::Startup;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

fn config() -> Config {
    let mut config = Config { failure_persistence: None, ..Config::default() };
    if config.rng_seed == RngSeed::Random {
        config.rng_seed = RngSeed::Fixed(0x7e55_e7a0);
    }
    println!("proptest seed {} (set PROPTEST_RNG_SEED to change)", config.rng_seed);
    config
}

fn name() -> impl Strategy<Value = String> {
    "[a-z0-9_]{0,8}"
}

fn sql() -> impl Strategy<Value = String> {
    // Any text without NUL, including multi-byte characters.
    "[^\u{0}]{0,48}"
}

fn message() -> impl Strategy<Value = FrontendMessage> {
    prop_oneof![
        sql().prop_map(|sql| FrontendMessage::Query { sql }),
        (name(), sql(), prop::collection::vec(any::<u32>(), 0..5))
            .prop_map(|(name, sql, param_types)| FrontendMessage::Parse { name, sql, param_types }),
        (
            name(),
            name(),
            prop::collection::vec(any::<i16>(), 0..4),
            prop::collection::vec(
                prop::option::of(prop::collection::vec(any::<u8>(), 0..24)),
                0..5
            ),
            prop::collection::vec(any::<i16>(), 0..4),
        )
            .prop_map(|(portal, statement, param_formats, params, result_formats)| {
                FrontendMessage::Bind {
                    portal,
                    statement,
                    param_formats,
                    params: params.into_iter().map(|p| p.map(Bytes::from)).collect(),
                    result_formats,
                }
            }),
        (any::<bool>(), name()).prop_map(|(statement, name)| FrontendMessage::Describe {
            target: if statement { Target::Statement } else { Target::Portal },
            name
        }),
        (any::<bool>(), name()).prop_map(|(statement, name)| FrontendMessage::Close {
            target: if statement { Target::Statement } else { Target::Portal },
            name
        }),
        (name(), any::<i32>())
            .prop_map(|(portal, max_rows)| FrontendMessage::Execute { portal, max_rows }),
        Just(FrontendMessage::Sync),
        Just(FrontendMessage::Flush),
    ]
}

fn target_byte(target: Target) -> u8 {
    match target {
        Target::Statement => b'S',
        Target::Portal => b'P',
    }
}

/// Encodes one message with pgwire.
fn encode(message: &FrontendMessage, out: &mut BytesMut) {
    let m = match message.clone() {
        FrontendMessage::Query { sql } => F::Query(Query::new(sql)),
        FrontendMessage::Parse { name, sql, param_types } => {
            F::Parse(Parse::new(Some(name), sql, param_types))
        }
        FrontendMessage::Bind { portal, statement, param_formats, params, result_formats } => {
            F::Bind(Bind::new(Some(portal), Some(statement), param_formats, params, result_formats))
        }
        FrontendMessage::Describe { target, name } => {
            F::Describe(Describe::new(target_byte(target), Some(name)))
        }
        FrontendMessage::Close { target, name } => {
            F::Close(Close::new(target_byte(target), Some(name)))
        }
        FrontendMessage::Execute { portal, max_rows } => {
            F::Execute(Execute::new(Some(portal), max_rows))
        }
        FrontendMessage::Sync => F::Sync(Sync::new()),
        FrontendMessage::Flush => F::Flush(Flush::new()),
        other => panic!("not generated: {other:?}"),
    };
    m.encode(out).unwrap();
}

proptest! {
    #![proptest_config(config())]

    // Checks decode(encode(messages)) == messages however the bytes are chunked.
    #[test]
    fn prop_frames_round_trip_in_any_chunking(
        messages in prop::collection::vec(message(), 1..12),
        cuts in prop::collection::vec(1usize..64, 0..40),
    ) {
        let mut wire = BytesMut::new();
        for m in &messages {
            encode(m, &mut wire);
        }
        let mut buf = BytesMut::new();
        let mut decoded = Vec::new();
        let mut rest = &wire[..];
        let mut cuts = cuts.into_iter();
        while !rest.is_empty() {
            let n = cuts.next().unwrap_or(rest.len()).min(rest.len());
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            while let Some(frame) = split_frame(&mut buf).unwrap() {
                decoded.push(decode_message(frame).unwrap());
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(decoded, messages);
    }

    // Checks startup packets encoded by pgwire decode to the same parameters.
    #[test]
    fn prop_startup_round_trip(
        params in prop::collection::btree_map("[a-z_]{1,12}", "[^\u{0}]{0,24}", 0..8),
    ) {
        let mut startup = Startup::new();
        startup.parameters = params.clone();
        let mut wire = BytesMut::new();
        startup.encode(&mut wire).unwrap();
        let body = split_startup(&mut wire).unwrap().unwrap();
        let StartupRequest::Startup { major, minor, parameters } = decode_startup(body).unwrap()
        else {
            panic!("not a startup message");
        };
        prop_assert_eq!((major, minor), (3, 0));
        let parameters: BTreeMap<String, String> = parameters.into_iter().collect();
        prop_assert_eq!(parameters, params);
    }
}
