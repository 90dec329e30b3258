//! Moving a shard range between fragments: [`Export`] streams the live documents of a range
//! as chunks of framed records; `Fragment::import` writes such chunks into another fragment.
//!
//! Stream format (FORMAT.md): a chunk is a sequence of frames exactly like the log's
//! (`len u32 | crc32(len ++ payload) u32 | payload | zero pad to 8`), each payload an archived
//! `Record` whose body is a `Put` (the record's LSN is the document's version at the source).
//! The export visits the documents present when it started, reading each one's current version
//! when its chunk is built; the node buffers writes to a range while it hands the range off, so
//! the stream is consistent then.

use std::collections::VecDeque;
use std::rc::Rc;

use rkyv::rancor::Error as RkyvError;
use rkyv::util::AlignedVec;
use router::{ShardId, ShardRange};

use crate::archive;
use crate::error::ImportError;
use crate::format::{Damage, decode_frame, encode_frame, frame_bytes};
use crate::fragment::{Fragment, ImportStats, Inner, WriteBatch, WriteOp};
use crate::limits::{EXPORT_CHUNK_BYTES, RECORD_BYTES_MAX};
use crate::record::{ArchivedRecordBody, PutOp, Record, RecordBody};
use crate::value::JsonValue;

/// Documents per import batch at most (one record, one fdatasync each).
const IMPORT_BATCH_DOCS_MAX: usize = 256;

/// A stream of the documents of a shard range. Call [`Export::next_chunk`] until `None`.
pub struct Export {
    inner: Rc<Inner>,
    keys: VecDeque<(Box<str>, Box<str>)>,
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export").field("remaining", &self.keys.len()).finish()
    }
}

impl Export {
    pub(crate) fn new(inner: Rc<Inner>, range: ShardRange) -> Export {
        let keys = {
            let st = inner.st.borrow();
            let collections: Vec<Box<str>> = st.index.collections().map(Into::into).collect();
            collections
                .iter()
                .flat_map(|c| st.index.scan(c, range).map(move |(k, _)| (c.clone(), k.into())))
                .collect()
        };
        Export { inner, keys }
    }

    /// Documents not yet exported.
    pub fn remaining(&self) -> usize {
        self.keys.len()
    }

    /// The next chunk of at most about `EXPORT_CHUNK_BYTES` (one document more if a single one
    /// is larger), or `None` when every document was sent. Documents deleted since the export
    /// started are skipped.
    pub fn next_chunk(&mut self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let st = self.inner.st.borrow();
        while out.len() < EXPORT_CHUNK_BYTES {
            let Some((collection, key)) = self.keys.pop_front() else { break };
            let Some(entry) = st.index.get(&collection, &key) else { continue };
            let loc = &entry.loc;
            let Some(put) =
                loc.seg.record(loc.span).and_then(|r| r.body.put_at(usize::try_from(loc.op).ok()?))
            else {
                continue;
            };
            let Ok(doc) = rkyv::deserialize::<JsonValue, RkyvError>(&put.doc) else { continue };
            let record = Record {
                lsn: entry.version.get(),
                body: RecordBody::Put(PutOp {
                    collection: put.collection.as_str().to_owned(),
                    id: put.id.as_str().to_owned(),
                    shard: put.shard.to_native(),
                    version: entry.version.get(),
                    doc,
                }),
            };
            let Ok(payload) = rkyv::to_bytes::<RkyvError>(&record) else { continue };
            let start = out.len();
            out.resize(start + frame_bytes(payload.len()), 0);
            if let Some(frame) = out.get_mut(start..) {
                encode_frame(&payload, frame);
            }
        }
        if out.is_empty() { None } else { Some(out) }
    }
}

/// Imports one export chunk into `fragment` (see the module docs).
pub(crate) async fn import(fragment: &Fragment, chunk: &[u8]) -> Result<ImportStats, ImportError> {
    // Copy into an 8-aligned buffer: archived records need it, and the chunk may come from a
    // network buffer with any alignment.
    let mut bytes = AlignedVec::<16>::with_capacity(chunk.len());
    bytes.extend_from_slice(chunk);
    let mut at = 0usize;
    let mut stats = ImportStats::default();
    let mut batch = WriteBatch::new();
    let mut batch_bytes = 0usize;
    while at < bytes.len() {
        let frame = decode_frame(&bytes, at, bytes.len())
            .map_err(|what| ImportError::Corruption { offset: at as u64, what })?;
        let (_, record) = archive::check(&bytes, frame.offset, frame.len)
            .map_err(|what| ImportError::Corruption { offset: at as u64, what })?;
        let ArchivedRecordBody::Put(put) = &record.body else {
            return Err(ImportError::NotAPut { offset: at as u64 });
        };
        let shard = ShardId::new(put.shard.to_native())
            .ok_or(ImportError::Corruption { offset: at as u64, what: Damage::Record })?;
        batch.push(WriteOp::Put {
            collection: put.collection.as_str().to_owned(),
            id: put.id.as_str().to_owned(),
            shard,
            expected_version: None,
            doc: put.doc.to_serde(),
        });
        batch_bytes += frame.len;
        at = frame.end;
        if batch.len() >= IMPORT_BATCH_DOCS_MAX || batch_bytes >= RECORD_BYTES_MAX / 2 {
            stats.docs += batch.len() as u64;
            fragment.apply(std::mem::take(&mut batch)).await?;
            batch_bytes = 0;
        }
    }
    if !batch.is_empty() {
        stats.docs += batch.len() as u64;
        fragment.apply(batch).await?;
    }
    Ok(stats)
}
