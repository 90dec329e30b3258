//! A minimal PostgreSQL simple-query client over a std `TcpStream`, for operator commands
//! (`tessera backup`) that talk to a running node: startup, trust / cleartext / SCRAM-SHA-256
//! authentication, `Query`, and the rows, command tag and error of the answer. Every backend
//! message is length-checked before it is read ([`CLIENT_MESSAGE_BYTES_MAX`]).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};

/// Largest backend message the client reads.
pub const CLIENT_MESSAGE_BYTES_MAX: usize = 64 << 20;

/// SCRAM iteration counts the client accepts (a server asking for more is refused).
pub const CLIENT_SCRAM_ITERATIONS_MAX: u32 = 1_000_000;

/// Why talking to the node failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The socket failed.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// The server sent something this client does not understand.
    #[error("protocol: {0}")]
    Protocol(String),
    /// Authentication failed or needs a method this client lacks.
    #[error("authentication: {0}")]
    Auth(String),
    /// The server answered with an error.
    #[error("{severity} {code}: {message}")]
    Server {
        /// Severity (ERROR, FATAL).
        severity: String,
        /// SQLSTATE.
        code: String,
        /// Message.
        message: String,
    },
}

/// The answer to one simple query.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct QueryResult {
    /// The command tag of the last statement.
    pub tag: String,
    /// Rows, text format, `None` for NULL.
    pub rows: Vec<Vec<Option<String>>>,
}

/// One connection.
#[derive(Debug)]
pub struct SimpleClient {
    stream: TcpStream,
}

fn protocol(what: &str) -> ClientError {
    ClientError::Protocol(what.to_owned())
}

fn hmac(key: &[u8], data: &[u8]) -> Result<[u8; 32], ClientError> {
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key)
        .map_err(|_| ClientError::Auth("bad HMAC key".to_owned()))?;
    mac.update(data);
    Ok(mac.finalize().into_bytes().into())
}

/// Reads a big-endian i32 at `at`.
fn be_i32(body: &[u8], at: usize) -> Result<i32, ClientError> {
    let b: [u8; 4] = body
        .get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| protocol("truncated message"))?;
    Ok(i32::from_be_bytes(b))
}

impl SimpleClient {
    /// Connects and authenticates as `user` (database `tessera`).
    pub fn connect(
        addr: &str,
        user: &str,
        password: Option<&str>,
        timeout: Duration,
    ) -> Result<SimpleClient, ClientError> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let mut client = SimpleClient { stream };
        let mut body = Vec::new();
        body.extend_from_slice(&196_608i32.to_be_bytes());
        for (k, v) in [("user", user), ("database", "tessera"), ("application_name", "tessera")] {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let len = i32::try_from(body.len() + 4).map_err(|_| protocol("startup too long"))?;
        client.stream.write_all(&len.to_be_bytes())?;
        client.stream.write_all(&body)?;
        client.authenticate(password)?;
        // ParameterStatus, BackendKeyData, … until ReadyForQuery.
        loop {
            let (kind, body) = client.read_message()?;
            match kind {
                b'Z' => return Ok(client),
                b'E' => return Err(server_error(&body)),
                _ => {}
            }
        }
    }

    fn send(&mut self, kind: u8, body: &[u8]) -> Result<(), ClientError> {
        let len = i32::try_from(body.len() + 4).map_err(|_| protocol("message too long"))?;
        let mut out = Vec::with_capacity(body.len() + 5);
        out.push(kind);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(body);
        self.stream.write_all(&out)?;
        Ok(())
    }

    fn read_message(&mut self) -> Result<(u8, Vec<u8>), ClientError> {
        let mut head = [0u8; 5];
        self.stream.read_exact(&mut head)?;
        let [kind, a, b, c, d] = head;
        let len = usize::try_from(i32::from_be_bytes([a, b, c, d]))
            .ok()
            .filter(|l| (4..=CLIENT_MESSAGE_BYTES_MAX).contains(l))
            .ok_or_else(|| protocol("bad message length"))?;
        let mut body = vec![0u8; len - 4];
        self.stream.read_exact(&mut body)?;
        Ok((kind, body))
    }

    fn auth_message(&mut self) -> Result<(i32, Vec<u8>), ClientError> {
        let (kind, body) = self.read_message()?;
        match kind {
            b'R' => Ok((be_i32(&body, 0)?, body.get(4..).unwrap_or_default().to_vec())),
            b'E' => Err(server_error(&body)),
            _ => Err(protocol("expected an authentication message")),
        }
    }

    fn authenticate(&mut self, password: Option<&str>) -> Result<(), ClientError> {
        let (code, data) = self.auth_message()?;
        let need = || ClientError::Auth("the node wants a password (--password)".to_owned());
        match code {
            0 => return Ok(()),
            3 => {
                let mut body = password.ok_or_else(need)?.as_bytes().to_vec();
                body.push(0);
                self.send(b'p', &body)?;
            }
            10 => {
                let mechanisms: Vec<&[u8]> = data.split(|&b| b == 0).collect();
                if !mechanisms.contains(&b"SCRAM-SHA-256".as_slice()) {
                    return Err(ClientError::Auth("no SCRAM-SHA-256 offered".to_owned()));
                }
                self.scram(password.ok_or_else(need)?)?;
            }
            other => return Err(ClientError::Auth(format!("unsupported method {other}"))),
        }
        match self.auth_message()? {
            (0, _) => Ok(()),
            (other, _) => Err(ClientError::Auth(format!("unexpected message {other}"))),
        }
    }

    fn scram(&mut self, password: &str) -> Result<(), ClientError> {
        let mut raw = [0u8; 18];
        getrandom::fill(&mut raw).map_err(|e| ClientError::Auth(e.to_string()))?;
        let nonce = BASE64.encode(raw);
        let first_bare = format!("n=,r={nonce}");
        let first = format!("n,,{first_bare}");
        let mut body = b"SCRAM-SHA-256\0".to_vec();
        let len = i32::try_from(first.len()).map_err(|_| protocol("SASL message too long"))?;
        body.extend_from_slice(&len.to_be_bytes());
        body.extend_from_slice(first.as_bytes());
        self.send(b'p', &body)?;
        let (code, server_first) = self.auth_message()?;
        if code != 11 {
            return Err(ClientError::Auth(format!("expected SASLContinue, got {code}")));
        }
        let server_first =
            String::from_utf8(server_first).map_err(|_| protocol("server-first not UTF-8"))?;
        let field = |name: &str| {
            server_first
                .split(',')
                .find_map(|f| f.strip_prefix(name))
                .ok_or_else(|| ClientError::Auth(format!("server-first lacks {name}")))
        };
        let server_nonce = field("r=")?;
        if !server_nonce.starts_with(&nonce) {
            return Err(ClientError::Auth("server nonce does not extend ours".to_owned()));
        }
        let salt = BASE64.decode(field("s=")?).map_err(|_| protocol("bad salt"))?;
        let iterations: u32 = field("i=")?.parse().map_err(|_| protocol("bad iterations"))?;
        if iterations == 0 || iterations > CLIENT_SCRAM_ITERATIONS_MAX {
            return Err(ClientError::Auth(format!("iteration count {iterations} refused")));
        }
        let salted =
            pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password.as_bytes(), &salt, iterations);
        let client_key = hmac(&salted, b"Client Key")?;
        let stored_key: [u8; 32] = Sha256::digest(client_key).into();
        let final_bare = format!("c=biws,r={server_nonce}");
        let auth_message = format!("{first_bare},{server_first},{final_bare}");
        let signature = hmac(&stored_key, auth_message.as_bytes())?;
        let proof: Vec<u8> = client_key.iter().zip(signature).map(|(k, s)| k ^ s).collect();
        let client_final = format!("{final_bare},p={}", BASE64.encode(proof));
        self.send(b'p', client_final.as_bytes())?;
        let (code, server_final) = self.auth_message()?;
        if code != 12 {
            return Err(ClientError::Auth(format!("expected SASLFinal, got {code}")));
        }
        let server_key = hmac(&salted, b"Server Key")?;
        let expected = format!("v={}", BASE64.encode(hmac(&server_key, auth_message.as_bytes())?));
        if server_final != expected.as_bytes() {
            return Err(ClientError::Auth("the server's signature does not match".to_owned()));
        }
        Ok(())
    }

    /// Runs `sql` (simple query protocol) and returns the last command tag and every row.
    pub fn simple_query(&mut self, sql: &str) -> Result<QueryResult, ClientError> {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        self.send(b'Q', &body)?;
        let mut result = QueryResult::default();
        let mut error = None;
        loop {
            let (kind, body) = self.read_message()?;
            match kind {
                b'D' => result.rows.push(data_row(&body)?),
                b'C' => {
                    let end = body.iter().position(|&b| b == 0).unwrap_or(body.len());
                    result.tag =
                        String::from_utf8_lossy(body.get(..end).unwrap_or_default()).into_owned();
                }
                b'E' => error = error.or(Some(server_error(&body))),
                b'Z' => break,
                _ => {}
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok(result),
        }
    }

    /// Sends Terminate and closes.
    pub fn close(mut self) {
        let _ = self.send(b'X', &[]);
    }
}

fn data_row(body: &[u8]) -> Result<Vec<Option<String>>, ClientError> {
    let count = body
        .get(..2)
        .and_then(|b| <[u8; 2]>::try_from(b).ok())
        .map(u16::from_be_bytes)
        .ok_or_else(|| protocol("truncated DataRow"))?;
    let mut at = 2;
    let mut row = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let len = be_i32(body, at)?;
        at += 4;
        if len < 0 {
            row.push(None);
            continue;
        }
        let len = usize::try_from(len).map_err(|_| protocol("bad field length"))?;
        let value = body.get(at..at + len).ok_or_else(|| protocol("truncated field"))?;
        row.push(Some(String::from_utf8_lossy(value).into_owned()));
        at += len;
    }
    Ok(row)
}

fn server_error(body: &[u8]) -> ClientError {
    let (mut severity, mut code, mut message) = (String::new(), String::new(), String::new());
    for field in body.split(|&b| b == 0) {
        let Some((&tag, value)) = field.split_first() else { continue };
        let value = String::from_utf8_lossy(value).into_owned();
        match tag {
            b'S' => severity = value,
            b'C' => code = value,
            b'M' => message = value,
            _ => {}
        }
    }
    ClientError::Server { severity, code, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks DataRow decoding (values and NULL) and that truncated rows are errors.
    #[test]
    fn decodes_data_rows() {
        let mut body = 2u16.to_be_bytes().to_vec();
        body.extend_from_slice(&3i32.to_be_bytes());
        body.extend_from_slice(b"abc");
        body.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(data_row(&body).unwrap(), vec![Some("abc".to_owned()), None]);
        for cut in 0..body.len() - 4 {
            assert!(data_row(&body[..cut]).is_err(), "cut at {cut}");
        }
    }

    // Checks the fields of an ErrorResponse.
    #[test]
    fn decodes_errors() {
        let body = b"SERROR\0C22023\0Mbad target\0\0";
        match server_error(body) {
            ClientError::Server { severity, code, message } => {
                assert_eq!((severity.as_str(), code.as_str()), ("ERROR", "22023"));
                assert_eq!(message, "bad target");
            }
            other => panic!("{other:?}"),
        }
    }
}
