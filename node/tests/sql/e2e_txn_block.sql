INSERT INTO tb VALUES ('b', '{"v":2}');
BEGIN;
BEGIN;
INSERT INTO tb VALUES ('a', '{"v":1}');
INSERT INTO tb VALUES ('b', '{"v":9}');
SELECT 1;
COMMIT;
COMMIT;
SELECT count(*) FROM tb;
