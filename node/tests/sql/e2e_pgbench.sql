\set id random(1, 100)
\set n random(1, 1000)
INSERT INTO bench VALUES ('bench/:id', '{"n": :n, "hits": 1}') ON CONFLICT (id) DO UPDATE SET n = excluded.n, hits = hits + 1;
SELECT doc FROM bench WHERE id() = 'bench/:id';
