//! Operator log lines: with `--slow-statement-ms 0` every statement is logged with its text,
//! kind and routing (opcode, fragments); long text is cut at the named limit; a restart logs
//! each fragment's recovery (records replayed, torn bytes, time) and the shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

mod support;

use support::cluster::wait_for_log;
use support::{Node, NodeOptions};

// Checks the slow-statement lines (single-fragment and scatter routing, an INSERT, the text
// limit), then the recovery lines after a restart.
#[tokio::test]
async fn slow_statement_and_recovery_lines() {
    let mut node = Node::start_with(NodeOptions {
        extra_args: vec!["--slow-statement-ms".into(), "0".into()],
        ..NodeOptions::default()
    });
    {
        let client = node.connect().await;
        client.simple_query(r#"INSERT INTO c VALUES ('k1', '{"v": 1}')"#).await.unwrap();
        client.simple_query("SELECT * FROM c WHERE id() = 'k1'").await.unwrap();
        client.simple_query("SELECT count(*) FROM c WHERE v > 0").await.unwrap();
        let long = format!("SELECT * FROM c WHERE id() = '{}'", "z".repeat(2000));
        client.simple_query(&long).await.unwrap();
    }
    wait_for_log(&node, "slow statement", 4).await;
    let lines = node.log_lines();
    let slow: Vec<&String> = lines.iter().filter(|l| l.contains("slow statement")).collect();
    assert!(slow.len() >= 4, "every statement is logged at threshold 0:\n{}", node.log_text());
    let point = slow
        .iter()
        .find(|l| l.contains("statement=SELECT * FROM c WHERE id() = 'k1'"))
        .expect("the point read is logged");
    assert!(point.contains("opcode=Single") && point.contains("fragments=1 ["), "{point}");
    assert!(point.contains("kind=select") && point.contains("elapsed_ms="), "{point}");
    let scatter = slow.iter().find(|l| l.contains("count(*)")).expect("the scan is logged");
    assert!(scatter.contains("opcode=Scatter") && scatter.contains("fragments=8 ["), "{scatter}");
    let insert = slow.iter().find(|l| l.contains("INSERT INTO c")).expect("the insert");
    assert!(insert.contains("kind=insert") && insert.contains("opcode=Single"), "{insert}");
    let long = slow.iter().find(|l| l.contains("zzzz")).expect("the long statement");
    assert!(long.len() < 1000, "statement text is cut: {} bytes", long.len());

    node.restart();
    let lines = node.log_lines();
    let recovered: Vec<&String> =
        lines.iter().filter(|l| l.contains("fragment recovered")).collect();
    assert_eq!(recovered.len(), 16, "8 fragments, two starts");
    assert!(recovered.iter().all(|l| l.contains("records=")
        && l.contains("torn_bytes=0")
        && l.contains("elapsed_ms=")));
    assert!(
        recovered.iter().skip(8).any(|l| l.contains("records=1 ")),
        "the second start replays the insert:\n{}",
        recovered.iter().map(|l| l.as_str()).collect::<Vec<_>>().join("\n")
    );
    node.stop();
    assert!(node.log_lines().iter().any(|l| l.contains("tessera stopped")));
}
