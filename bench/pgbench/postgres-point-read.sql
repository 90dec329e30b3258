-- Point read by id (primary key). Ids of the loaded documents are "0".."docs-1".
\set k random(0, :docs - 1)
SELECT id, doc FROM pgb_docs WHERE id = :k;
