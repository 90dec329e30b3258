-- Durable single-document upsert of an existing id: replaces balance and field0.
\set k random(0, :docs - 1)
INSERT INTO pgb_docs VALUES (:k, '{"balance":1000,"field0":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}') ON CONFLICT (id) DO UPDATE SET balance = excluded.balance, field0 = excluded.field0;
