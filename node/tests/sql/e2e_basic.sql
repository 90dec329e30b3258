-- Run by e2e_psql.rs with: psql -X -q -A -t -v ON_ERROR_STOP=1 -f e2e_basic.sql
INSERT INTO books VALUES ('books/1', '{"title":"Dune","year":1965,"tags":["sf"]}'), ('books/2', '{"title":"Emma","year":1815}'), ('books/3', '{"title":"Ubik","year":1969}');
SELECT id(), title::text, year::int8 FROM books ORDER BY year;
SELECT count(*) FROM books WHERE year > 1900;
UPDATE books SET year = year + 1 WHERE id() = 'books/2' RETURNING id(), year::int8;
DELETE FROM books WHERE title = 'Ubik' RETURNING id();
SELECT * FROM books WHERE id() = 'books/1';
CREATE TABLE orders () WITH (sharding = '{"Fields":["Customer"],"Range":1000}');
INSERT INTO orders VALUES ('orders/1-A$', '{"Customer":"customers/1-A"}') RETURNING id();
SHOW SHARDING orders;
SELECT 1 + 2 AS three;
SELECT title || ' (' || year || ')' FROM books WHERE id() = 'books/1';
SELECT upper(title), length(title), coalesce(subtitle, 'none') FROM books WHERE id() = 'books/1';
SELECT DISTINCT year > 1900 FROM books ORDER BY 1;
SELECT title FROM books WHERE title ILIKE 'd%';
SELECT count(*), max(year)::int8 - min(year)::int8 AS span FROM books HAVING count(*) > 1;
