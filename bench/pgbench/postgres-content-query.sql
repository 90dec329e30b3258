-- Content-routed query: the documents of one customer (8 of them), via an expression index.
\set c random(0, :docs / 8 - 1)
SELECT id, doc FROM pgb_content WHERE doc->>'customer' = :c;
