-- Durable single-document upsert of an existing id: merges the new fields into the document.
\set k random(0, :docs - 1)
INSERT INTO pgb_docs (id, doc) VALUES (:k, '{"balance":1000,"field0":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}') ON CONFLICT (id) DO UPDATE SET doc = pgb_docs.doc || EXCLUDED.doc;
