-- Content-routed query: the documents of one customer (8 of them). pgb_content is sharded on
-- "customer", so Tessera sends it to the one fragment that holds that customer.
\set c random(0, :docs / 8 - 1)
SELECT * FROM pgb_content WHERE customer = :c;
