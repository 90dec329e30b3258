-- Not timed: run once per client before the cases, to prove the statements the timed scripts
-- send find what they should (a query that matched nothing would be fast and meaningless).
-- A mismatch divides by zero, which fails the transaction and so the whole check.
\set k random(0, :docs - 1)
\set c random(0, :docs / 8 - 1)
SELECT count(*) AS n FROM pgb_docs WHERE id() = :k \gset
\if :n != 1
SELECT 1 / 0;
\endif
SELECT count(*) AS n FROM pgb_content WHERE customer = :c \gset
\if :n != 8
SELECT 1 / 0;
\endif
