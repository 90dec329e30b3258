//! `bench`: runs one workload against Tessera and PostgreSQL, with latency histograms.

fn main() {}
