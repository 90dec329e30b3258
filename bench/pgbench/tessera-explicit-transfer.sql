\set a random(0, 9999)
\set b random(0, 9999)
BEGIN \; UPDATE t SET v = v - 1 WHERE id() = 'k:a$@0' \; UPDATE t SET v = v + 1 WHERE id() = 'k:b$@0' \; COMMIT;
