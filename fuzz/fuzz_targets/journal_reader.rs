//! Arbitrary bytes as a journal file: header, chunk and frame parsing and CRC checks must
//! return records or a typed damage, never panic or read out of bounds; whatever is read back
//! must re-encode to a file that reads the same records.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    storage::journal::fuzz_journal_reader(data);
});
