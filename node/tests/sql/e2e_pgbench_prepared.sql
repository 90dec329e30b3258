\set id random(1, 100)
INSERT INTO bench VALUES (:id, '{"hits": 1}') ON CONFLICT (id) DO UPDATE SET hits = hits + 1;
SELECT doc FROM bench WHERE id() = :id;
