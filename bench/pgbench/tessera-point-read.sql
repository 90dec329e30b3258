-- Point read by id (one shard). Ids of the loaded documents are "0".."docs-1".
\set k random(0, :docs - 1)
SELECT * FROM pgb_docs WHERE id() = :k;
