//! `query::FragmentSource` over a storage fragment, without copying documents.
//!
//! Query borrows each document for as long as it holds the source. A storage `DocRef` keeps
//! its segment's mapping alive (even through compaction), so the reader parks every `DocRef`
//! it hands out in an arena that lives as long as the reader: documents stay valid for the
//! whole statement, in safe code. The cost is one small handle per document visited; the
//! documents themselves are never copied or deserialized.

use std::ops::ControlFlow;

use query::plan::CollectionName;
use query::{DocVersion, FragmentSource, PagedSource, ScanPos, SourceDoc};
use router::ShardRange;
use storage::{ArchivedJsonValue, DocRef, Fragment, ScanCursor};
use typed_arena::Arena;

/// Reads one fragment for one statement.
pub struct FragmentReader<'f> {
    fragment: &'f Fragment,
    held: Arena<DocRef<'f>>,
}

impl<'f> FragmentReader<'f> {
    /// A reader over `fragment`.
    pub fn new(fragment: &'f Fragment) -> FragmentReader<'f> {
        FragmentReader { fragment, held: Arena::new() }
    }

    /// The fragment's shard range.
    pub fn range(&self) -> ShardRange {
        self.fragment.range()
    }

    fn source_doc<'a>(&'a self, doc: DocRef<'f>) -> SourceDoc<'a, &'a ArchivedJsonValue> {
        let doc: &'a DocRef<'f> = self.held.alloc(doc);
        SourceDoc {
            id: doc.id(),
            shard: doc.shard(),
            version: DocVersion::new(doc.version().get()),
            doc: doc.doc(),
        }
    }
}

impl<'f> FragmentSource for FragmentReader<'f> {
    type Doc<'a>
        = &'a ArchivedJsonValue
    where
        Self: 'a;

    fn get<'a>(
        &'a self,
        collection: &CollectionName,
        id: &str,
    ) -> Option<SourceDoc<'a, Self::Doc<'a>>> {
        let doc = self.fragment.get(collection.as_str(), id)?;
        Some(self.source_doc(doc))
    }

    fn scan<'a>(
        &'a self,
        collection: &CollectionName,
        ranges: &[ShardRange],
        visit: &mut dyn FnMut(SourceDoc<'a, Self::Doc<'a>>) -> ControlFlow<()>,
    ) {
        for range in ranges {
            let mut stopped = false;
            self.fragment.scan(collection.as_str(), *range, |doc| {
                let flow = visit(self.source_doc(doc));
                stopped = flow.is_break();
                flow
            });
            if stopped {
                return;
            }
        }
    }
}

impl<'f> PagedSource for FragmentReader<'f> {
    fn scan_after<'a>(
        &'a self,
        collection: &CollectionName,
        ranges: &[ShardRange],
        after: Option<&ScanPos>,
        visit: &mut dyn FnMut(SourceDoc<'a, Self::Doc<'a>>) -> ControlFlow<()>,
    ) {
        for range in ranges {
            // Ranges come sorted: those wholly before the position are done.
            let Some(resume) = query::resume_point(after, *range) else { continue };
            let cursor = resume.map(|p| ScanCursor { shard: p.shard, key: p.key.clone() });
            let mut stopped = false;
            self.fragment.scan_from(collection.as_str(), *range, cursor.as_ref(), |doc| {
                let flow = visit(self.source_doc(doc));
                stopped = flow.is_break();
                flow
            });
            if stopped {
                return;
            }
        }
    }
}
