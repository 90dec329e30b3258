-- Durable single-document insert with a fresh id. Ids are random in [10^12, 9*10^18]:
-- pgbench has no string expressions or per-run counter; a collision (probability about
-- n^2 / 1.8e19 for n inserts) would show up as a failed transaction, never silently.
\set id random(1000000000000, 9000000000000000000)
INSERT INTO pgb_docs VALUES (:id, '{"balance":1000,"field0":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}');
