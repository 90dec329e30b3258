//! The data set (ids and documents) and the operations each workload draws.
//! See `sql.rs` for the shape of the documents and why ids carry a `$customers/<c>` suffix.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::config::Workload;
use crate::layout::ExecutorGroups;
use crate::limits::{DOCS_PER_CUSTOMER, FILLER_BYTES, TAG_COUNT};
use crate::rng::Rng;
use crate::zipf::ScrambledZipfian;

/// The customer of loaded document `k`.
pub fn customer_of(k: u64) -> u64 {
    k / DOCS_PER_CUSTOMER
}

/// The customer field's value for customer `c`.
pub fn customer_name(c: u64) -> String {
    format!("customers/{c}")
}

/// The id of loaded document `k`.
pub fn doc_id(k: u64) -> String {
    format!("d/{k}${}", customer_name(customer_of(k)))
}

/// Number of customers that own loaded documents (at least 1, so inserts have one to use).
pub fn customers(docs: u64) -> u64 {
    docs.div_ceil(DOCS_PER_CUSTOMER).max(1)
}

fn filler(rng: &mut Rng) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    (0..FILLER_BYTES)
        .map(|_| {
            let i = usize::try_from(rng.below(ALPHABET.len() as u64)).unwrap_or(0);
            char::from(ALPHABET.get(i).copied().unwrap_or(b'x'))
        })
        .collect()
}

/// A document for customer `c` with tag `t<tag>`.
pub fn document(c: u64, tag: u64, rng: &mut Rng) -> String {
    let mut s = String::with_capacity(FILLER_BYTES + 96);
    // Writing to a String cannot fail.
    let _ = write!(
        s,
        r#"{{"customer":"{}","tag":"t{}","balance":1000,"field0":"{}"}}"#,
        customer_name(c),
        tag % TAG_COUNT,
        filler(rng)
    );
    s
}

/// The document the loader writes for key `k`.
pub fn loaded_document(k: u64, rng: &mut Rng) -> String {
    document(customer_of(k), k, rng)
}

/// One request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read a document by id.
    Read {
        /// Document id.
        id: String,
    },
    /// Insert a new document.
    Insert {
        /// New, unique id.
        id: String,
        /// JSON.
        doc: String,
    },
    /// Insert or update.
    Upsert {
        /// Existing id.
        id: String,
        /// JSON.
        doc: String,
    },
    /// Set `field0` of a document (YCSB update).
    Update {
        /// Existing id.
        id: String,
        /// New value.
        value: String,
    },
    /// Documents of one customer.
    Content {
        /// Customer field value.
        customer: String,
    },
    /// Ids with one tag, from everywhere.
    Scatter {
        /// Tag value.
        tag: String,
    },
    /// Take 10 from one document's balance, autocommit.
    Write {
        /// Existing id.
        id: String,
    },
    /// Move 10 from one balance to another in one transaction. `first` sorts before
    /// `second`, so concurrent transfers lock rows in one order and never deadlock.
    Transfer {
        /// Debited, and locked first.
        first: String,
        /// Credited.
        second: String,
        /// How the statements travel.
        send: TxnSend,
    },
    /// Take 10 from one document's balance in a transaction block of its own.
    WriteTxn {
        /// Existing id.
        id: String,
        /// How the statements travel.
        send: TxnSend,
    },
    /// The `Write` UPDATE as one simple Query message with the id inlined (parsed each time).
    QueryWrite {
        /// Existing id.
        id: String,
    },
    /// A transfer's two UPDATEs as two autocommit statements, one after the other.
    TwoWrites {
        /// Debited.
        first: String,
        /// Credited.
        second: String,
    },
}

/// How the statements of a transaction block travel to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnSend {
    /// One at a time, each answered before the next is sent (BEGIN and COMMIT as simple
    /// queries, the writes as prepared statements).
    OneByOne,
    /// The same messages sent together, answered together: one round trip.
    Pipelined,
    /// One simple Query message holding the whole block, ids as literals: one round trip.
    OneQuery,
}

/// Draws the operations of one workload for one connection.
#[derive(Debug)]
pub struct OpGen {
    workload: Workload,
    docs: u64,
    rng: Rng,
    zipf: Option<Arc<ScrambledZipfian>>,
    /// Makes inserted ids unique across runs, targets and connections.
    insert_prefix: String,
    inserted: u64,
    /// Customers by executor, for cross-executor transfers.
    groups: Option<Arc<ExecutorGroups>>,
}

impl OpGen {
    /// `zipf` must be given for the YCSB workloads (shared: computing it is O(docs)).
    pub fn new(
        workload: Workload,
        docs: u64,
        rng: Rng,
        zipf: Option<Arc<ScrambledZipfian>>,
        insert_prefix: String,
    ) -> Self {
        OpGen { workload, docs, rng, zipf, insert_prefix, inserted: 0, groups: None }
    }

    /// Cross-fragment transfers then pair documents of customers on two different executors
    /// (when `groups` has at least two); without it they pair any two documents.
    pub fn with_groups(mut self, groups: Option<Arc<ExecutorGroups>>) -> Self {
        self.groups = groups;
        self
    }

    /// A document of a random customer among `members`, or `None` when there are none.
    fn doc_of_group(&mut self, members: &[(u64, usize)]) -> Option<u64> {
        let i = usize::try_from(self.rng.below(members.len() as u64)).ok()?;
        let &(c, _) = members.get(i)?;
        Some(c * DOCS_PER_CUSTOMER + self.rng.below(DOCS_PER_CUSTOMER))
    }

    fn uniform_key(&mut self) -> u64 {
        self.rng.below(self.docs.max(1))
    }

    fn zipf_key(&mut self) -> u64 {
        match &self.zipf {
            Some(z) => z.next(&mut self.rng),
            None => self.uniform_key(),
        }
    }

    /// The ids of `a` and `b`, the smaller first (the order transfers lock them in).
    fn ordered(a: u64, b: u64) -> (String, String) {
        let (x, y) = (doc_id(a), doc_id(b));
        if x <= y { (x, y) } else { (y, x) }
    }

    fn transfer(a: u64, b: u64) -> Op {
        let (first, second) = Self::ordered(a, b);
        Op::Transfer { first, second, send: TxnSend::OneByOne }
    }

    /// Two distinct documents of one customer with a full group of documents (one shard).
    fn same_customer_pair(&mut self) -> (u64, u64) {
        let full = (self.docs / DOCS_PER_CUSTOMER).max(1);
        let c = self.rng.below(full);
        let a = self.rng.below(DOCS_PER_CUSTOMER);
        let b = (a + 1 + self.rng.below(DOCS_PER_CUSTOMER - 1)) % DOCS_PER_CUSTOMER;
        let base = c * DOCS_PER_CUSTOMER;
        (base + a, base + b)
    }

    /// The next operation.
    pub fn next_op(&mut self) -> Op {
        match self.workload {
            Workload::PointRead => Op::Read { id: doc_id(self.uniform_key()) },
            Workload::Insert => {
                let c = self.rng.below(customers(self.docs));
                let id = format!("{}-{}${}", self.insert_prefix, self.inserted, customer_name(c));
                self.inserted += 1;
                let tag = self.rng.below(TAG_COUNT);
                let doc = document(c, tag, &mut self.rng);
                Op::Insert { id, doc }
            }
            Workload::Upsert => {
                let k = self.uniform_key();
                let doc = loaded_document(k, &mut self.rng);
                Op::Upsert { id: doc_id(k), doc }
            }
            Workload::ContentQuery => {
                Op::Content { customer: customer_name(self.rng.below(customers(self.docs))) }
            }
            Workload::ScatterQuery => {
                Op::Scatter { tag: format!("t{}", self.rng.below(TAG_COUNT)) }
            }
            Workload::SingleFragmentTxn
            | Workload::PipelinedTxn
            | Workload::QueryTxn
            | Workload::TwoWriteAutocommit => {
                let (a, b) = self.same_customer_pair();
                let (first, second) = Self::ordered(a, b);
                let send = match self.workload {
                    Workload::TwoWriteAutocommit => return Op::TwoWrites { first, second },
                    Workload::PipelinedTxn => TxnSend::Pipelined,
                    Workload::QueryTxn => TxnSend::OneQuery,
                    _ => TxnSend::OneByOne,
                };
                Op::Transfer { first, second, send }
            }
            Workload::AutocommitWrite => Op::Write { id: doc_id(self.uniform_key()) },
            Workload::QueryWrite => Op::QueryWrite { id: doc_id(self.uniform_key()) },
            Workload::SingleWriteTxn => {
                Op::WriteTxn { id: doc_id(self.uniform_key()), send: TxnSend::OneByOne }
            }
            Workload::QueryWriteTxn => {
                Op::WriteTxn { id: doc_id(self.uniform_key()), send: TxnSend::OneQuery }
            }
            Workload::CrossFragmentTransfer => {
                if let Some(groups) = self.groups.clone()
                    && groups.executors() >= 2
                {
                    // Two distinct executors, then a customer on each.
                    let n = groups.executors() as u64;
                    let e1 = self.rng.below(n);
                    let e2 = (e1 + 1 + self.rng.below(n - 1)) % n;
                    let pick = |g: &mut Self, e: u64| {
                        g.doc_of_group(groups.members(usize::try_from(e).unwrap_or(0)))
                    };
                    if let (Some(a), Some(b)) = (pick(self, e1), pick(self, e2)) {
                        return Self::transfer(a, b);
                    }
                }
                let a = self.uniform_key();
                let mut b = self.rng.below(self.docs.saturating_sub(1).max(1));
                if b >= a {
                    b += 1;
                }
                Self::transfer(a, b)
            }
            Workload::YcsbA | Workload::YcsbB | Workload::YcsbC => {
                let read_percent = match self.workload {
                    Workload::YcsbA => 50,
                    Workload::YcsbB => 95,
                    _ => 100,
                };
                let k = self.zipf_key();
                if self.rng.below(100) < read_percent {
                    Op::Read { id: doc_id(k) }
                } else {
                    Op::Update { id: doc_id(k), value: filler(&mut self.rng) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generator(w: Workload, docs: u64) -> OpGen {
        let zipf = Some(Arc::new(ScrambledZipfian::new(docs.max(1))));
        OpGen::new(w, docs, Rng::new(9), zipf, "n/1".into())
    }

    fn key_of(id: &str) -> u64 {
        id.strip_prefix("d/").unwrap().split('$').next().unwrap().parse().unwrap()
    }

    #[test]
    fn unit_ids_carry_their_customer() {
        // Every document of a customer has the customer's `$` suffix and the customer field.
        assert_eq!(doc_id(0), "d/0$customers/0");
        assert_eq!(doc_id(DOCS_PER_CUSTOMER), "d/8$customers/1");
        let mut rng = Rng::new(1);
        let doc = loaded_document(17, &mut rng);
        let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        assert_eq!(v["customer"], "customers/2");
        assert_eq!(v["tag"], "t17");
        assert_eq!(v["balance"], 1000);
        assert_eq!(v["field0"].as_str().unwrap().len(), FILLER_BYTES);
        assert_eq!(customers(0), 1);
        assert_eq!(customers(17), 3);
    }

    #[test]
    fn unit_single_fragment_txn_stays_within_one_customer() {
        // Both documents share a customer (one shard in Tessera), differ, exist, and are ordered.
        let mut g = generator(Workload::SingleFragmentTxn, 1003);
        for _ in 0..2000 {
            let Op::Transfer { first, second, .. } = g.next_op() else { panic!("not a transfer") };
            assert!(first < second);
            let (a, b) = (key_of(&first), key_of(&second));
            assert_ne!(a, b);
            assert_eq!(customer_of(a), customer_of(b));
            assert!(a < 1000 && b < 1000, "only full customer groups are used");
        }
    }

    #[test]
    fn unit_cross_fragment_transfer_picks_two_accounts() {
        // Two distinct existing documents, ordered to avoid deadlocks, even with few docs.
        let mut g = generator(Workload::CrossFragmentTransfer, 8);
        for _ in 0..500 {
            let Op::Transfer { first, second, .. } = g.next_op() else { panic!("not a transfer") };
            assert!(first < second);
            assert!(key_of(&first) < 8 && key_of(&second) < 8);
        }
    }

    #[test]
    fn unit_cross_fragment_transfer_crosses_executors_with_a_layout() {
        // With customer groups from the default layout, every pair's two documents live on
        // shards of fragments owned by different executors, and each exists.
        use crate::layout::{ExecutorGroups, Layout, shard_of_customer};
        let layout = Layout::even(8, 2);
        let groups = Arc::new(ExecutorGroups::new(&layout, 8_000));
        let mut g = generator(Workload::CrossFragmentTransfer, 8_000).with_groups(Some(groups));
        let mut firsts_on = [0; 2];
        for _ in 0..2000 {
            let Op::Transfer { first, second, .. } = g.next_op() else { panic!("not a transfer") };
            assert!(first < second);
            let (a, b) = (key_of(&first), key_of(&second));
            assert!(a < 8_000 && b < 8_000);
            let exec = |k: u64| {
                layout.span_of(shard_of_customer(customer_of(k))).unwrap().1.executor.clone()
            };
            assert_ne!(exec(a), exec(b), "{first} and {second}");
            firsts_on[usize::from(exec(a) == "1")] += 1;
        }
        assert!(firsts_on[0] > 0 && firsts_on[1] > 0, "both executors debited: {firsts_on:?}");
    }

    #[test]
    fn unit_autocommit_write_updates_existing_documents() {
        // One existing document per operation.
        let mut g = generator(Workload::AutocommitWrite, 100);
        for _ in 0..100 {
            let Op::Write { id } = g.next_op() else { panic!("not a write") };
            assert!(key_of(&id) < 100);
        }
    }

    #[test]
    fn unit_like_for_like_workloads_send_what_they_compare() {
        // The single-write transaction updates one existing document, one at a time or in one
        // Query; the two autocommit writes and the one-Query transfer use single-fragment pairs.
        let mut g = generator(Workload::SingleWriteTxn, 100);
        let Op::WriteTxn { id, send: TxnSend::OneByOne } = g.next_op() else {
            panic!("not one by one")
        };
        assert!(key_of(&id) < 100);
        let mut g = generator(Workload::QueryWriteTxn, 100);
        assert!(matches!(g.next_op(), Op::WriteTxn { send: TxnSend::OneQuery, .. }));
        let mut g = generator(Workload::QueryWrite, 100);
        let Op::QueryWrite { id } = g.next_op() else { panic!("not a write in one Query") };
        assert!(key_of(&id) < 100);
        for w in [Workload::TwoWriteAutocommit, Workload::QueryTxn] {
            let mut g = generator(w, 1003);
            for _ in 0..500 {
                let (first, second) = match g.next_op() {
                    Op::TwoWrites { first, second } if w == Workload::TwoWriteAutocommit => {
                        (first, second)
                    }
                    Op::Transfer { first, second, send: TxnSend::OneQuery }
                        if w == Workload::QueryTxn =>
                    {
                        (first, second)
                    }
                    other => panic!("{w}: unexpected {other:?}"),
                };
                assert!(first < second);
                assert_eq!(customer_of(key_of(&first)), customer_of(key_of(&second)));
            }
        }
    }

    #[test]
    fn unit_ycsb_mixes_have_their_read_share() {
        // A is about half reads, B about 95 %, C only reads; keys stay in range.
        // Bounds are 6 sigma of a binomial over 10,000 draws.
        for (w, p) in [(Workload::YcsbA, 0.5), (Workload::YcsbB, 0.95), (Workload::YcsbC, 1.0)] {
            let mut g = generator(w, 500);
            let n = 10_000;
            let mut reads = 0;
            for _ in 0..n {
                match g.next_op() {
                    Op::Read { id } => {
                        reads += 1;
                        assert!(key_of(&id) < 500);
                    }
                    Op::Update { id, value } => {
                        assert!(key_of(&id) < 500);
                        assert_eq!(value.len(), FILLER_BYTES);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            let sigma6 = 6.0 * (n as f64 * p * (1.0 - p)).sqrt();
            assert!((reads as f64 - n as f64 * p).abs() <= sigma6, "{w}: {reads}");
        }
    }

    #[test]
    fn unit_inserts_are_unique_and_content_matches_id() {
        // Inserted ids never repeat, and each document's customer is its id's suffix.
        let mut g = generator(Workload::Insert, 0);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let Op::Insert { id, doc } = g.next_op() else { panic!("not an insert") };
            let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
            let suffix = id.rsplit('$').next().unwrap();
            assert_eq!(v["customer"], suffix);
            assert!(seen.insert(id));
        }
    }

    #[test]
    fn unit_same_seed_same_operations() {
        // Runs are reproducible from the seed.
        let mut a = generator(Workload::YcsbA, 100);
        let mut b = generator(Workload::YcsbA, 100);
        for _ in 0..100 {
            assert_eq!(a.next_op(), b.next_op());
        }
    }
}
