-- Durable single-document insert with a fresh id (see tessera-insert.sql for the ids).
\set id random(1000000000000, 9000000000000000000)
INSERT INTO pgb_docs (id, doc) VALUES (:id, '{"balance":1000,"field0":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}');
