-- Run by e2e_psql.rs with ON_ERROR_STOP=1: the error on line 3 stops the script.
INSERT INTO s VALUES ('a', '{}');
INSERT INTO s VALUES ('a', '{}');
INSERT INTO s VALUES ('never', '{}');
