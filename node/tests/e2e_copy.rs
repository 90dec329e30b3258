//! COPY against a real `tessera serve`: `COPY … FROM STDIN` through tokio-postgres (the
//! extended protocol) and psql's `\copy` (the simple protocol), in text and CSV, across the
//! batch boundary; `COPY … TO STDOUT` of a collection and of a query; the errors (where in
//! the input, what was written), CopyFail, and COPY inside a transaction block.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::process::Command;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt, pin_mut};
use query::copy::{CopyFormat, Decoder};
use support::{Node, run_client, simple_rows, sqlstate};

/// Sends `data` as the input of `sql` in uneven messages, so rows straddle CopyData
/// boundaries.
async fn copy_in(
    client: &tokio_postgres::Client,
    sql: &str,
    data: &[u8],
) -> Result<u64, tokio_postgres::Error> {
    let sink = client.copy_in::<_, Bytes>(sql).await?;
    pin_mut!(sink);
    for chunk in data.chunks(777) {
        sink.send(Bytes::copy_from_slice(chunk)).await?;
    }
    sink.finish().await
}

async fn copy_out(client: &tokio_postgres::Client, sql: &str) -> Vec<u8> {
    let stream = client.copy_out(sql).await.unwrap();
    pin_mut!(stream);
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

async fn count(client: &tokio_postgres::Client, collection: &str) -> i64 {
    let row = client.query_one(&format!("SELECT count(*) FROM {collection}"), &[]).await.unwrap();
    row.get(0)
}

/// COPY's text-format escaping of one field.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\t', "\\t").replace('\n', "\\n").replace('\r', "\\r")
}

/// `n` documents with awkward strings every seventh row, as text-format COPY input.
fn documents(n: usize) -> (Vec<u8>, BTreeMap<String, serde_json::Value>) {
    let mut input = Vec::new();
    let mut docs = BTreeMap::new();
    for i in 0..n {
        let s = if i % 7 == 0 {
            format!("tab\there\nnew \\ back \"q\" ü {i}")
        } else {
            "plain".into()
        };
        let doc = serde_json::json!({"n": i, "s": s});
        let id = format!("acct/{i}");
        input.extend_from_slice(
            format!("{}\t{}\n", escape(&id), escape(&doc.to_string())).as_bytes(),
        );
        docs.insert(id, doc);
    }
    (input, docs)
}

/// The rows of text-format COPY output as id → parsed document.
fn parse_output(bytes: &[u8]) -> BTreeMap<String, serde_json::Value> {
    let mut decoder = Decoder::new(CopyFormat::text(), vec!["id".into(), "doc".into()]);
    decoder.push(bytes);
    let mut out = BTreeMap::new();
    while let Some(row) = decoder.next_row().unwrap() {
        let doc = serde_json::from_str(&row.fields[1]).unwrap();
        assert!(out.insert(row.fields[0].clone(), doc).is_none(), "{} twice", row.fields[0]);
    }
    assert_eq!(decoder.finish().unwrap(), None, "output ends with a newline");
    out
}

// Checks a collection larger than a page in every fragment (40,000 documents over the 8
// fragments of two executors: five pages each, of 1,024 rows and the rest) comes out whole,
// each document once, through COPY TO STDOUT and a plain SELECT, both sent page by page
// (this executor's fragments and the other executor's).
#[tokio::test]
async fn copy_to_and_select_send_large_fragments_page_by_page() {
    let node = Node::start();
    let client = node.connect().await;
    let (input, docs) = documents(40_000);
    assert_eq!(copy_in(&client, "COPY big FROM STDIN", &input).await.unwrap(), 40_000);
    let out = parse_output(&copy_out(&client, "COPY big TO STDOUT").await);
    assert_eq!(out.len(), docs.len());
    assert!(out == docs, "COPY TO gave other documents");
    let rows = simple_rows(&client.simple_query("SELECT id() FROM big").await.unwrap());
    let ids: std::collections::BTreeSet<String> =
        rows.iter().map(|r| r[0].clone().unwrap()).collect();
    assert_eq!((rows.len(), ids.len()), (40_000, 40_000));
    let plan = simple_rows(&client.simple_query("EXPLAIN SELECT id() FROM big").await.unwrap());
    assert!(plan.iter().any(|r| r[0].as_deref().is_some_and(|l| l.contains("page by page"))));
}

// Checks 2,500 rows (three batches, escapes, non-ASCII) go in through COPY FROM STDIN and come
// back identical through COPY TO STDOUT; a query's rows in CSV with a header; the columns in
// the other order.
#[tokio::test]
async fn copy_from_stdin_then_to_stdout_round_trips() {
    let node = Node::start();
    let client = node.connect().await;
    let (input, docs) = documents(2_500);
    assert_eq!(copy_in(&client, "COPY acct FROM STDIN", &input).await.unwrap(), 2_500);
    assert_eq!(count(&client, "acct").await, 2_500);
    let rows = simple_rows(
        &client.simple_query("SELECT * FROM acct WHERE id() = 'ACCT/7'").await.unwrap(),
    );
    let doc: serde_json::Value = serde_json::from_str(rows[0][1].as_deref().unwrap()).unwrap();
    assert_eq!(doc, docs["acct/7"]);

    let out = copy_out(&client, "COPY acct TO STDOUT").await;
    assert_eq!(parse_output(&out), docs);

    let csv = copy_out(
        &client,
        "COPY (SELECT id(), n, s::text AS s FROM acct WHERE n < 3 ORDER BY n) TO STDOUT WITH (FORMAT csv, HEADER)",
    )
    .await;
    assert_eq!(
        String::from_utf8(csv).unwrap(),
        "id,n,s\nacct/0,0,\"tab\there\nnew \\ back \"\"q\"\" ü 0\"\nacct/1,1,plain\nacct/2,2,plain\n"
    );
    let fields = copy_out(&client, "COPY acct (id, n) TO STDOUT (DELIMITER '|')").await;
    assert_eq!(fields.split(|&b| b == b'\n').filter(|l| l == b"acct/9|9").count(), 1);

    let reversed = b"\"{\"\"k\"\": 1}\",pair/1\n\"{\"\"k\"\": 2}\",pair/2\n";
    let n = copy_in(&client, "COPY pairs (doc, id) FROM STDIN WITH (FORMAT csv)", reversed).await;
    assert_eq!(n.unwrap(), 2);
    let rows =
        simple_rows(&client.simple_query("SELECT id(), k FROM pairs ORDER BY 1").await.unwrap());
    assert_eq!(
        rows,
        vec![
            vec![Some("pair/1".into()), Some("1".into())],
            vec![Some("pair/2".into()), Some("2".into())]
        ]
    );
}

// Checks each kind of bad input is refused with its SQLSTATE, the line, and what was written
// (outside a block the batches before the bad line stay), and that the connection goes on.
#[tokio::test]
async fn copy_errors_say_where_and_what_was_written() {
    let node = Node::start();
    let client = node.connect().await;
    let (mut input, _) = documents(1_500);
    input.extend_from_slice(b"acct/x\n");
    let err = copy_in(&client, "COPY acct FROM STDIN", &input).await.unwrap_err();
    assert_eq!(sqlstate(&err), "22P04", "{err:?}");
    let db = err.as_db_error().unwrap();
    assert_eq!(db.message(), "missing data for column \"doc\"");
    assert_eq!(db.where_(), Some("COPY acct, line 1501"));
    assert!(db.detail().unwrap().contains("The 1000 rows before it were written"), "{db:?}");
    assert_eq!(count(&client, "acct").await, 1_000);

    client.batch_execute("INSERT INTO dup VALUES ('d/5', '{}')").await.unwrap();
    let (input, _) = documents(10);
    let input = String::from_utf8(input).unwrap().replace("acct/5\t", "D/5\t");
    let err = copy_in(&client, "COPY dup FROM STDIN", input.as_bytes()).await.unwrap_err();
    assert_eq!(sqlstate(&err), "23505", "{err:?}");
    assert_eq!(err.as_db_error().unwrap().where_(), Some("COPY dup, lines 1-10 (one batch)"));
    assert_eq!(err.as_db_error().unwrap().detail(), Some("Nothing was written."));
    assert_eq!(count(&client, "dup").await, 1);

    let null_id = copy_in(&client, "COPY n FROM STDIN", b"\\N\t{}\n").await.unwrap_err();
    assert_eq!(sqlstate(&null_id), "23502", "{null_id:?}");
    let not_json = copy_in(&client, "COPY n FROM STDIN", b"a\tnot json\n").await.unwrap_err();
    assert!(sqlstate(&not_json).starts_with("22"), "{not_json:?}");
    let not_utf8 = copy_in(&client, "COPY n FROM STDIN", b"a\t\"\\xff\"\n").await.unwrap_err();
    assert_eq!(sqlstate(&not_utf8), "22021", "{not_utf8:?}");
    let open_quote = copy_in(&client, "COPY n FROM STDIN CSV", b"a,\"{}\n").await.unwrap_err();
    assert_eq!(sqlstate(&open_quote), "22P04", "{open_quote:?}");
    assert_eq!(count(&client, "n").await, 0);

    // CopyFail (the sink dropped unfinished): nothing of it is written, the session goes on.
    {
        let sink = client.copy_in::<_, Bytes>("COPY cf FROM STDIN").await.unwrap();
        pin_mut!(sink);
        sink.send(Bytes::from_static(b"c/1\t{}\n")).await.unwrap();
    }
    assert_eq!(count(&client, "cf").await, 0);

    for (sql, code) in [
        ("COPY acct FROM '/etc/passwd'", "0A000"),
        ("COPY acct TO '/tmp/x'", "0A000"),
        ("COPY acct TO STDOUT (FORMAT binary)", "0A000"),
        ("COPY acct (name) FROM STDIN", "0A000"),
        ("COPY acct (id, id) FROM STDIN", "22023"),
        ("COPY acct FROM STDIN (QUOTE '''')", "22023"),
        ("COPY acct FROM STDIN (FORMAT csv, DELIMITER '\"')", "22023"),
        ("COPY acct FROM STDIN (FORMAT json)", "22023"),
        ("EXPLAIN COPY acct TO STDOUT", "0A000"),
        ("SELECT 1; COPY acct FROM STDIN", "0A000"),
    ] {
        let err = client.batch_execute(sql).await.unwrap_err();
        assert_eq!(sqlstate(&err), code, "{sql}: {err:?}");
    }
    assert_eq!(count(&client, "acct").await, 1_000);
}

// Checks COPY inside BEGIN … COMMIT: the rows are the block's (seen inside, gone after
// ROLLBACK, there after COMMIT), and a bad row fails the block (25P02 until ROLLBACK).
#[tokio::test]
async fn copy_inside_a_block_is_part_of_it() {
    let node = Node::start();
    let client = node.connect().await;
    let (input, _) = documents(20);
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(copy_in(&client, "COPY blk FROM STDIN", &input).await.unwrap(), 20);
    assert_eq!(count(&client, "blk").await, 20);
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(count(&client, "blk").await, 0);

    client.batch_execute("BEGIN").await.unwrap();
    let err = copy_in(&client, "COPY blk FROM STDIN", b"a\t{}\nb\n").await.unwrap_err();
    assert_eq!(sqlstate(&err), "22P04");
    assert_eq!(err.as_db_error().unwrap().detail(), None, "a block writes nothing until COMMIT");
    let failed = client.batch_execute("SELECT 1").await.unwrap_err();
    assert_eq!(sqlstate(&failed), "25P02");
    client.batch_execute("ROLLBACK").await.unwrap();

    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(copy_in(&client, "COPY blk FROM STDIN", &input).await.unwrap(), 20);
    let out = copy_out(&client, "COPY blk TO STDOUT").await;
    assert_eq!(parse_output(&out).len(), 20, "COPY TO inside the block reads the block");
    client.batch_execute("COMMIT").await.unwrap();
    assert_eq!(count(&client, "blk").await, 20);
}

// Checks psql's `\copy` (a simple-protocol COPY reading and writing files on the client):
// 1,200 rows in and out, CSV with a header in, and a bad file's error naming the line.
#[test]
fn psql_copy_reads_and_writes_files() {
    let node = Node::start();
    let dir = tempfile::tempdir().unwrap();
    let (input, docs) = documents(1_200);
    let in_path = dir.path().join("in.txt");
    std::fs::write(&in_path, &input).unwrap();
    let out_path = dir.path().join("out.txt");
    let csv_path = dir.path().join("in.csv");
    std::fs::write(&csv_path, "id,doc\nc/1,\"{\"\"a\"\": 1}\"\nc/2,{}\n").unwrap();
    let bad_path = dir.path().join("bad.txt");
    std::fs::write(&bad_path, "b/1\t{}\nb/2\t{}\textra\n").unwrap();
    let psql = |command: String| {
        let mut c = Command::new("psql");
        c.arg(node.conn_str()).args(["-X", "-q", "-A", "-t", "-c"]).arg(command);
        run_client(c)
    };
    let load = psql(format!("\\copy acct from '{}'", in_path.display()));
    assert!(load.status.success(), "{load:?}");
    let dump = psql(format!("\\copy acct to '{}'", out_path.display()));
    assert!(dump.status.success(), "{dump:?}");
    assert_eq!(parse_output(&std::fs::read(&out_path).unwrap()), docs);
    let csv = psql(format!("\\copy csvc from '{}' with (format csv, header)", csv_path.display()));
    assert!(csv.status.success(), "{csv:?}");
    let bad = psql(format!("\\copy badc from '{}'", bad_path.display()));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(stderr.contains("extra data after last expected column"), "{stderr}");
    assert!(stderr.contains("CONTEXT:  COPY badc, line 2"), "{stderr}");
    let counts = psql(
        "SELECT count(*) FROM acct; SELECT a FROM csvc WHERE id() = 'c/1'; \
         SELECT count(*) FROM badc"
            .to_owned(),
    );
    assert_eq!(String::from_utf8_lossy(&counts.stdout), "1200\n1\n0\n", "{counts:?}");
}
