//! Every bound of the storage crate, with its unit and the reason for its value.

/// Bytes of one I/O block: every chunk starts at a multiple of it and is padded to it, so a block
/// that holds acknowledged data is never written again. 4 KiB matches the file system block and
/// the page size (the mmap base), and is a multiple of the 512-byte O_DIRECT alignment.
pub const BLOCK_BYTES: u64 = 4096;

/// Bytes of the segment header: one whole block, so the first chunk starts block-aligned.
pub const SEGMENT_HEADER_BYTES: u64 = BLOCK_BYTES;

/// Default preallocated size of a segment, in bytes. Large enough that rolling (which writes the
/// whole file once with zeros) is rare; small enough that compaction frees space in useful steps.
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;

/// Smallest allowed segment size in bytes (tests use it to force many segments).
pub const SEGMENT_BYTES_MIN: u64 = 64 << 10;

/// Largest allowed segment size in bytes: offsets inside a segment stay far from `u32::MAX`.
pub const SEGMENT_BYTES_MAX: u64 = 1 << 30;

/// Bytes of a chunk header (see FORMAT.md).
pub const CHUNK_HEADER_BYTES: usize = 32;

/// Bytes of a frame header: length and CRC, 4 bytes each.
pub const FRAME_HEADER_BYTES: usize = 8;

/// Alignment of every frame and so of every archived record, relative to the segment start
/// (which is page-aligned in the mapping): what rkyv needs for `u64` and `f64` fields.
pub const RECORD_ALIGN_BYTES: usize = 8;

/// Largest group-commit batch, in bytes, chunk header and padding included: bounds the DMA
/// buffer of one write and so the largest torn region recovery must clean.
pub const GROUP_COMMIT_BATCH_BYTES_MAX: usize = 4 << 20;

/// Chunks of one fragment written and synced at once: the next chunk's write starts while the
/// previous chunk's fdatasync runs. A crash can tear this many chunks at the end of the log,
/// which bounds the torn window recovery accepts (`TORN_WINDOW_BYTES`).
pub const CHUNKS_IN_FLIGHT_MAX: usize = 2;

/// How long lazy records alone (phase two's Commit records, whose decision is durable
/// elsewhere) wait in an idle log for a record that starts a chunk to carry them, before
/// they start one of their own: under load another transaction's record comes first and
/// the Commit records cost no fdatasync of their own. Only the journal's forgetting of the
/// decision and a fence's drain wait for them.
pub const LAZY_RECORD_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// A wave of runnable writers is split (a chunk started before the wave ends, see
/// `Fragment::hand_to_writer`) only while a chunk's write + fdatasync takes at most this long
/// on average: about the CPU time of a wave of 256 writers (~2 us each). On a slower disk the
/// split chunk would still be syncing when the wave ends, and every wave would pay two
/// fdatasyncs instead of one (measured on the shared machine, 3-4 ms per chunk: writes per
/// fdatasync fell from 256 to 110 without this bound).
pub const WAVE_SPLIT_CHUNK_MICROS_MAX: u64 = 500;

/// A wave is split only after a chunk of at least this many records: a sign that many writers
/// are runnable at once. Fewer writers form a wave shorter than a chunk's fdatasync, and a
/// split would leave them in two groups that take an fdatasync each.
pub const WAVE_SPLIT_RECORDS_MIN: usize = 32;

/// Shares of the group-commit writers' task queues (glommio's default queue has 1000).
pub const WRITER_QUEUE_SHARES: usize = 1000;

/// Latency glommio is told the latency-sensitive writers' task queue needs (with
/// `FragmentOptions::split_waves`). What matters is that the queue is latency-sensitive at
/// all: a chunk's completion on the blocking thread then writes glommio's eventfd, which can
/// end the running round early. The value must not shorten glommio's preempt timer
/// (the shorter of this and the executor's is armed while the writer is runnable): glommio
/// 0.9.0 can park with runnable tasks when that timer fires just before it looks for tasks
/// (a 1 ms timer hung it in session 3; the tests run with 60 s for that reason).
pub const WRITER_QUEUE_LATENCY: std::time::Duration = std::time::Duration::from_secs(60);
/// Largest limit of an executor's `SyncGate` (group commits in flight across its fragments).
/// Past a few the gate no longer merges anything; the bound keeps a typo from meaning
/// "unbounded" silently.
pub const SYNC_GATE_LIMIT_MAX: usize = 64;

/// Bytes after the last valid chunk in which recovery accepts damage as a torn tail: the
/// chunks that can be in flight at a crash, each at most one maximal chunk.
pub const TORN_WINDOW_BYTES: usize = CHUNKS_IN_FLIGHT_MAX * GROUP_COMMIT_BATCH_BYTES_MAX;

/// Largest archived record in bytes; one record always fits into one group-commit batch.
pub const RECORD_BYTES_MAX: usize = 2 << 20;

/// Capacity of a fragment's staging buffer (frames serialized by writers, waiting for the
/// group commit) kept once it is empty; a larger one, left by a burst, is freed.
pub const STAGED_KEEP_BYTES: usize = GROUP_COMMIT_BATCH_BYTES_MAX;

/// Bytes waiting in the group-commit queue above which new writers wait (backpressure).
pub const QUEUE_BYTES_MAX: usize = 16 << 20;

/// Largest archived document in bytes.
pub const DOC_BYTES_MAX: usize = 1 << 20;

/// Deepest nesting of arrays and objects in a document (the root counts as 1). Checked while
/// converting from serde_json, before anything recursive runs on the value.
pub const DOC_DEPTH_MAX: usize = 64;

/// Longest document id in bytes.
pub const ID_BYTES_MAX: usize = 512;

/// Longest collection name in bytes.
pub const COLLECTION_BYTES_MAX: usize = 128;

/// Most operations in one write batch (one transaction's writes and checks on a fragment).
/// A batch past [`RECORD_OPS_MAX`] operations or one record's bytes is logged as several
/// Prepare records and a Commit record (the batch's parts), still all or nothing.
pub const BATCH_OPS_MAX: usize = 1 << 16;

/// Documents a batch may write, in archived bytes (estimated as documents are converted):
/// bounds the memory one batch stages for the log, with [`BATCH_OPS_MAX`].
pub const BATCH_BYTES_MAX: usize = 256 << 20;

/// Most operations in one log record; a larger batch is split into parts of at most this many.
pub const RECORD_OPS_MAX: usize = 4096;

/// Transaction ids with these top bits set belong to storage: a batch logged in parts
/// ([`BATCH_OPS_MAX`]) is prepared under `LOCAL_TXID_TAG | <its first record's LSN>` and
/// committed by a Commit record right behind its parts. Recovery drops one whose Commit record
/// did not survive (nothing was acknowledged). Callers' ids must not carry the tag
/// (`TxId::is_local`).
pub const LOCAL_TXID_TAG: u64 = 0xFFF << 52;

/// Long loops (replay, compaction, export) yield to other tasks after this many items.
pub const YIELD_EVERY_ITEMS: usize = 256;

/// Bytes of one export chunk: the unit a migration stream carries.
pub const EXPORT_CHUNK_BYTES: usize = 1 << 20;

/// Default dead bytes above which a write triggers compaction.
pub const COMPACT_DEAD_BYTES_DEFAULT: u64 = 256 << 20;

const _: () = assert!(SEGMENT_HEADER_BYTES.is_multiple_of(BLOCK_BYTES));
const _: () = assert!(BLOCK_BYTES.is_multiple_of(512));
const _: () = assert!(SEGMENT_BYTES_MIN.is_multiple_of(BLOCK_BYTES));
const _: () = assert!(SEGMENT_BYTES_DEFAULT.is_multiple_of(BLOCK_BYTES));
const _: () = assert!(SEGMENT_BYTES_MAX.is_multiple_of(BLOCK_BYTES));
const _: () = assert!(CHUNK_HEADER_BYTES.is_multiple_of(RECORD_ALIGN_BYTES));
const _: () = assert!(FRAME_HEADER_BYTES.is_multiple_of(RECORD_ALIGN_BYTES));
const _: () = assert!(
    RECORD_BYTES_MAX + CHUNK_HEADER_BYTES + FRAME_HEADER_BYTES + 8 <= GROUP_COMMIT_BATCH_BYTES_MAX
);
const _: () = assert!(DOC_BYTES_MAX < RECORD_BYTES_MAX);
const _: () = assert!(RECORD_OPS_MAX <= BATCH_OPS_MAX);
const _: () = assert!((GROUP_COMMIT_BATCH_BYTES_MAX as u64).is_multiple_of(BLOCK_BYTES));

/// Largest journal record, in bytes. A coordinator decision names its transaction and its
/// participants: far below this.
pub const JOURNAL_RECORD_BYTES_MAX: usize = 64 << 10;

/// Largest journal chunk (one group-commit write), header and padding included.
pub const JOURNAL_CHUNK_BYTES_MAX: usize = 1 << 20;

/// Journal appends waiting for the disk at once; past this an append fails (backpressure is
/// the caller's bound on transactions in flight).
pub const JOURNAL_QUEUE_RECORDS_MAX: usize = 1 << 16;

/// Zeroed bytes a journal file is given past its last chunk when it is created, and each time
/// it is extended: appends then overwrite blocks already in the file, so a decision's
/// fdatasync need not write the inode (the size does not change) and its O_DIRECT write is
/// not an extending one (which the kernel punts to a worker thread). 256 one-block chunks.
pub const JOURNAL_PREALLOC_BYTES: usize = 1 << 20;

/// When fewer zeroed bytes than this remain past the tail after a group commit, the journal
/// writes another [`JOURNAL_PREALLOC_BYTES`] of zeros past the end before the next one.
pub const JOURNAL_PREALLOC_LOW_BYTES: usize = 256 << 10;

const _: () = assert!((JOURNAL_CHUNK_BYTES_MAX as u64).is_multiple_of(BLOCK_BYTES));
const _: () = assert!((JOURNAL_PREALLOC_BYTES as u64).is_multiple_of(BLOCK_BYTES));
const _: () = assert!(JOURNAL_PREALLOC_LOW_BYTES < JOURNAL_PREALLOC_BYTES);
const _: () = assert!(
    JOURNAL_RECORD_BYTES_MAX + CHUNK_HEADER_BYTES + FRAME_HEADER_BYTES + RECORD_ALIGN_BYTES
        <= JOURNAL_CHUNK_BYTES_MAX
);

/// Buckets of the id index's earlier table moved per insert while it grows
/// (`growmap`): bounds the work one write adds, and ends the move after about a seventh of
/// the earlier table's entries in inserts.
pub const GROW_MOVE_BUCKETS: usize = 8;

/// Bytes of one piece of a spare segment's paced zero-fill (`segment::FillPace`): small enough
/// that a chunk's write and fdatasync queued behind one piece wait little.
pub const SPARE_FILL_PIECE_BYTES: usize = 256 << 10;

/// The spare segment starts once the active segment is this fraction (1/N) full.
pub const SPARE_START_FRACTION: u64 = 4;

/// Zero-fill bytes a spare segment may write per byte the log made durable. The spare starts
/// when the active segment is a quarter full, so at 2 it is ready when the active one is three
/// quarters full, before the roll that needs it; the fill's extra disk writes are spread over
/// half of the segment's life (at 4 from half full, session 5, they came as a burst of twice
/// that rate, and with one 256 KiB piece per wave of writers the fill fell behind).
pub const SPARE_FILL_BYTES_PER_LOG_BYTE: u64 = 2;
