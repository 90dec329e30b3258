"""psycopg 3 against tessera serve; run by node/tests/e2e_psycopg.rs as
`python3 e2e_psycopg.py <port>`. Exits non-zero with a traceback on the first failed check and
prints `psycopg e2e ok` at the end."""

import json
import sys

import psycopg
from psycopg.types.json import Json


def main(port: int) -> None:
    conn = psycopg.connect(
        host="127.0.0.1", port=port, user="py", dbname="tessera", sslmode="disable", autocommit=True
    )
    cur = conn.cursor()

    # Transaction blocks: psycopg follows the status byte of ReadyForQuery (I, T, E).
    with conn.transaction():
        cur.execute("INSERT INTO pytx VALUES ('a', '{\"v\": 1}')")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    try:
        with conn.transaction():
            cur.execute("INSERT INTO pytx VALUES ('b', '{\"v\": 2}')")
            try:
                cur.execute("INSERT INTO pytx VALUES ('a', '{\"v\": 3}')")
            except psycopg.errors.UniqueViolation:
                assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
                raise
        raise AssertionError("the duplicate must fail")
    except psycopg.errors.UniqueViolation:
        pass
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    cur.execute("SELECT count(*) FROM pytx")
    assert cur.fetchone() == (1,)
    cur.execute("SELECT 1")
    assert cur.fetchone() == (1,)

    # executemany inserts with typed parameters (psycopg sends int8/float8/bool/text/json).
    rows = [(f"py/{i}", i, i * 0.5, i % 2 == 0, f"name {i}", Json({"i": i, "list": [i, "x"]})) for i in range(20)]
    cur.executemany(
        "INSERT INTO py (id, n, f, b, s, j) VALUES (%s, %s::int8, %s::float8, %s::bool, %s::text, %s::json)",
        rows,
    )
    cur.execute("SELECT count(*) FROM py")
    assert cur.fetchone() == (20,)

    # Typed binary parameters and binary results.
    cur.execute(
        "SELECT n::int8, f::float8, b::bool, s::text, j FROM py WHERE id() = %s",
        ("py/7",),
        binary=True,
    )
    n, f, b, s, j = cur.fetchone()
    assert (n, f, b, s) == (7, 3.5, False, "name 7"), (n, f, b, s)
    assert j == {"i": 7, "list": [7, "x"]}, j
    assert cur.description[0].type_code == 20 and cur.description[4].type_code == 114

    # The same in text format.
    cur.execute("SELECT n::int8, f::float8, b::bool, s::text, j FROM py WHERE id() = %s", ("py/8",))
    assert cur.fetchone() == (8, 4.0, True, "name 8", {"i": 8, "list": [8, "x"]})

    # A whole document (`*`) as json, a parameter compared with a field, ORDER BY and LIMIT.
    cur.execute("SELECT * FROM py WHERE n >= %s ORDER BY n DESC LIMIT %s", (17, 2), binary=True)
    got = cur.fetchall()
    assert [r[0] for r in got] == ["py/19", "py/18"], got
    assert got[0][1]["s"] == "name 19" and got[0][1]["j"] == {"i": 19, "list": [19, "x"]}, got[0]

    # An upsert with a json parameter through executemany, then UPDATE ... RETURNING.
    cur.executemany(
        "INSERT INTO py VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET n = excluded.n",
        [("py/1", Json({"n": 100})), ("py/new", Json({"n": 5}))],
    )
    cur.execute("UPDATE py SET n = n + 1 WHERE id() IN (%s, %s) RETURNING id(), n::int8", ("py/1", "py/new"))
    assert sorted(cur.fetchall()) == [("py/1", 101), ("py/new", 6)]

    # Errors keep their SQLSTATE and the connection stays usable.
    for sql, params, code in [
        ("INSERT INTO py VALUES (%s, %s)", ("py/2", Json({})), "23505"),
        ("SELECT DISTINCT ON (n) n FROM py", None, "0A000"),
        ("SELEC 1", None, "42601"),
        ("INSERT INTO py VALUES (%s, %s)", ("x$@9999999", Json({})), "22023"),
    ]:
        try:
            cur.execute(sql, params)
            raise AssertionError(f"{sql} must fail")
        except psycopg.Error as e:
            assert e.sqlstate == code, (sql, e.sqlstate, str(e))
        cur.execute("SELECT count(*) FROM py")
        assert cur.fetchone() == (21,)

    # Server-side prepared statements (psycopg prepares after repeated use).
    for i in range(8):
        cur.execute("SELECT s::text FROM py WHERE id() = %s", (f"py/{i}",), prepare=True)
        assert cur.fetchone() == (f"name {i}",)

    conn.close()
    print("psycopg e2e ok")


if __name__ == "__main__":
    main(int(sys.argv[1]))
