-- Not timed: see tessera-check.sql.
\set k random(0, :docs - 1)
\set c random(0, :docs / 8 - 1)
SELECT count(*) AS n FROM pgb_docs WHERE id = :k \gset
\if :n != 1
SELECT 1 / 0;
\endif
SELECT count(*) AS n FROM pgb_content WHERE doc->>'customer' = :c \gset
\if :n != 8
SELECT 1 / 0;
\endif
