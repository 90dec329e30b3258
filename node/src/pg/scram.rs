//! SCRAM-SHA-256 authentication, server side (RFC 5802, RFC 7677), as PostgreSQL speaks it.
//!
//! Our own small module on RustCrypto (sha2, hmac, pbkdf2) rather than pgwire's `server-api`
//! helpers, which pull in tokio; the server runs on glommio and keeps tokio out.
//!
//! The exchange: the client sends `client-first` (`n,,n=<user>,r=<client nonce>`), we answer
//! `server-first` (`r=<client nonce><server nonce>,s=<salt>,i=<iterations>`), the client sends
//! `client-final` (`c=<gs2 header>,r=<nonce>,p=<proof>`), we verify the proof against the stored
//! key and answer `server-final` (`v=<server signature>`), which proves we know the password too.
//!
//! Channel binding (`p=` in the gs2 header, mechanism SCRAM-SHA-256-PLUS) is refused: we answer
//! SSLRequest with 'N', so there is no TLS channel to bind to. Passwords are used as given (no
//! SASLprep); ASCII passwords, the common case, are unaffected.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::pg::limits::{
    SCRAM_ITERATIONS_DEFAULT, SCRAM_ITERATIONS_MAX, SCRAM_NONCE_BYTES, SCRAM_SALT_BYTES,
};

/// The SASL mechanism name we offer.
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";

type HmacSha256 = hmac::Hmac<Sha256>;

/// Why a SCRAM exchange failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScramError {
    /// A client message does not follow the SCRAM grammar.
    #[error("malformed SCRAM message: {what}")]
    Malformed {
        /// Which part was wrong.
        what: &'static str,
    },
    /// The client asked for channel binding, which needs TLS.
    #[error("SCRAM channel binding is not supported: this server does not offer SSL")]
    ChannelBindingUnsupported,
    /// The client sent an authorization identity (`a=`).
    #[error("SCRAM authorization identity (a=) is not supported")]
    AuthzidUnsupported,
    /// The nonce in client-final is not the one we agreed on.
    #[error("SCRAM nonce does not match")]
    NonceMismatch,
    /// The channel-binding echo in client-final does not match client-first.
    #[error("SCRAM channel binding data does not match the gs2 header")]
    ChannelBindingMismatch,
    /// The proof is wrong: the client does not know the password.
    #[error("SCRAM proof is invalid")]
    InvalidProof,
    /// Stored credentials are unusable.
    #[error("invalid SCRAM credentials: {what}")]
    InvalidCredentials {
        /// What is wrong with them.
        what: &'static str,
    },
    /// The OS random source failed.
    #[error("random number source failed: {0}")]
    Random(String),
}

/// What the server stores for a password: salt, iteration count, StoredKey and ServerKey. The
/// password itself is not kept.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredentials {
    salt: Vec<u8>,
    iterations: u32,
    stored_key: [u8; 32],
    server_key: [u8; 32],
}

impl std::fmt::Debug for ScramCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Keys stay out of logs.
        f.debug_struct("ScramCredentials").field("iterations", &self.iterations).finish()
    }
}

impl ScramCredentials {
    /// Derives credentials from a password with a fresh random salt and the default iteration
    /// count.
    pub fn from_password(password: &str) -> Result<ScramCredentials, ScramError> {
        let mut salt = [0u8; SCRAM_SALT_BYTES];
        fill_random(&mut salt)?;
        ScramCredentials::from_password_with_salt(password, &salt, SCRAM_ITERATIONS_DEFAULT)
    }

    /// Derives credentials from a password, salt and iteration count (deterministic; tests and
    /// migrations use it).
    pub fn from_password_with_salt(
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<ScramCredentials, ScramError> {
        check_iterations(iterations)?;
        if salt.is_empty() {
            return Err(ScramError::InvalidCredentials { what: "empty salt" });
        }
        let salted: [u8; 32] =
            pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password.as_bytes(), salt, iterations);
        let client_key = hmac(&salted, b"Client Key");
        let stored_key: [u8; 32] = Sha256::digest(client_key).into();
        let server_key = hmac(&salted, b"Server Key");
        Ok(ScramCredentials { salt: salt.to_vec(), iterations, stored_key, server_key })
    }

    /// Parses PostgreSQL's stored verifier format,
    /// `SCRAM-SHA-256$<iterations>:<salt base64>$<StoredKey base64>:<ServerKey base64>`, so an
    /// operator can configure a verifier instead of a clear-text password.
    pub fn parse_verifier(text: &str) -> Result<ScramCredentials, ScramError> {
        let bad = |what| ScramError::InvalidCredentials { what };
        let rest = text.strip_prefix("SCRAM-SHA-256$").ok_or(bad("missing SCRAM-SHA-256$"))?;
        let (iter_salt, keys) = rest.split_once('$').ok_or(bad("missing $ before keys"))?;
        let (iterations, salt) = iter_salt.split_once(':').ok_or(bad("missing iterations"))?;
        let (stored, server) = keys.split_once(':').ok_or(bad("missing server key"))?;
        let iterations: u32 = iterations.parse().map_err(|_| bad("iterations not a number"))?;
        check_iterations(iterations)?;
        let salt = BASE64.decode(salt).map_err(|_| bad("salt not base64"))?;
        if salt.is_empty() {
            return Err(bad("empty salt"));
        }
        let key = |b64: &str| -> Result<[u8; 32], ScramError> {
            let bytes = BASE64.decode(b64).map_err(|_| bad("key not base64"))?;
            <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| bad("key not 32 bytes"))
        };
        Ok(ScramCredentials {
            salt,
            iterations,
            stored_key: key(stored)?,
            server_key: key(server)?,
        })
    }

    /// The verifier in PostgreSQL's format (see [`ScramCredentials::parse_verifier`]).
    pub fn to_verifier(&self) -> String {
        format!(
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            BASE64.encode(&self.salt),
            BASE64.encode(self.stored_key),
            BASE64.encode(self.server_key)
        )
    }
}

fn check_iterations(iterations: u32) -> Result<(), ScramError> {
    if iterations == 0 || iterations > SCRAM_ITERATIONS_MAX {
        return Err(ScramError::InvalidCredentials { what: "iteration count out of range" });
    }
    Ok(())
}

fn fill_random(buf: &mut [u8]) -> Result<(), ScramError> {
    getrandom::fill(buf).map_err(|e| ScramError::Random(e.to_string()))
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length, so `new_from_slice` cannot fail; the fallback (an
    // all-zero MAC that matches nothing) keeps this input path free of panics anyway.
    match HmacSha256::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(data);
            mac.finalize().into_bytes().into()
        }
        Err(_) => [0u8; 32],
    }
}

/// Compares two byte strings in time independent of where they differ (secrets: SCRAM keys,
/// cancel keys).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A fresh server nonce: printable, no commas (base64 of random bytes).
pub fn random_nonce() -> Result<String, ScramError> {
    let mut raw = [0u8; SCRAM_NONCE_BYTES];
    fill_random(&mut raw)?;
    Ok(BASE64.encode(raw))
}

/// The server's state between server-first and client-final.
#[derive(Debug)]
pub struct ScramExchange {
    client_first_bare: String,
    server_first: String,
    nonce: String,
    gs2_header: String,
}

impl ScramExchange {
    /// Handles client-first and returns the exchange state and the server-first message.
    /// `server_nonce` must be printable ASCII without commas ([`random_nonce`] gives one).
    pub fn start(
        credentials: &ScramCredentials,
        client_first: &[u8],
        server_nonce: &str,
    ) -> Result<(ScramExchange, String), ScramError> {
        let text = std::str::from_utf8(client_first)
            .map_err(|_| ScramError::Malformed { what: "client-first is not UTF-8" })?;
        // gs2-header = cbind-flag "," [authzid] ","
        let (cbind, rest) =
            text.split_once(',').ok_or(ScramError::Malformed { what: "missing gs2 header" })?;
        match cbind {
            // 'n': client does not support channel binding; 'y': it does but thinks we don't
            // (true: we offer no -PLUS mechanism). Both are fine.
            "n" | "y" => {}
            c if c.starts_with("p=") => return Err(ScramError::ChannelBindingUnsupported),
            _ => return Err(ScramError::Malformed { what: "bad channel binding flag" }),
        }
        let (authzid, bare) =
            rest.split_once(',').ok_or(ScramError::Malformed { what: "missing gs2 header" })?;
        if !authzid.is_empty() {
            return Err(ScramError::AuthzidUnsupported);
        }
        let gs2_header = format!("{cbind},,");
        // client-first-message-bare = [reserved-mext ","] username "," nonce ["," extensions]
        let mut attrs = bare.split(',');
        let user = attrs.next().unwrap_or_default();
        if user.starts_with("m=") {
            return Err(ScramError::Malformed { what: "mandatory extensions are not supported" });
        }
        // PostgreSQL ignores this user name (the startup packet's counts) and so do we; it may
        // be empty.
        if !user.starts_with("n=") {
            return Err(ScramError::Malformed { what: "missing n= user name" });
        }
        let client_nonce = attrs
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or(ScramError::Malformed { what: "missing r= nonce" })?;
        if client_nonce.is_empty() || !client_nonce.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(ScramError::Malformed { what: "nonce must be printable ASCII" });
        }
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credentials.salt),
            credentials.iterations
        );
        let exchange = ScramExchange {
            client_first_bare: bare.to_owned(),
            server_first: server_first.clone(),
            nonce,
            gs2_header,
        };
        Ok((exchange, server_first))
    }

    /// Verifies client-final and returns the server-final message.
    pub fn finish(
        &self,
        credentials: &ScramCredentials,
        client_final: &[u8],
    ) -> Result<String, ScramError> {
        let text = std::str::from_utf8(client_final)
            .map_err(|_| ScramError::Malformed { what: "client-final is not UTF-8" })?;
        let (without_proof, proof_b64) =
            text.rsplit_once(",p=").ok_or(ScramError::Malformed { what: "missing p= proof" })?;
        let mut attrs = without_proof.split(',');
        let binding = attrs
            .next()
            .and_then(|a| a.strip_prefix("c="))
            .ok_or(ScramError::Malformed { what: "missing c= channel binding" })?;
        let binding = BASE64
            .decode(binding)
            .map_err(|_| ScramError::Malformed { what: "c= is not base64" })?;
        if binding != self.gs2_header.as_bytes() {
            return Err(ScramError::ChannelBindingMismatch);
        }
        let nonce = attrs
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or(ScramError::Malformed { what: "missing r= nonce" })?;
        if !constant_time_eq(nonce.as_bytes(), self.nonce.as_bytes()) {
            return Err(ScramError::NonceMismatch);
        }
        let proof = BASE64
            .decode(proof_b64)
            .map_err(|_| ScramError::Malformed { what: "p= is not base64" })?;
        let proof = <[u8; 32]>::try_from(proof.as_slice())
            .map_err(|_| ScramError::Malformed { what: "p= is not 32 bytes" })?;

        let auth_message =
            format!("{},{},{}", self.client_first_bare, self.server_first, without_proof);
        let client_signature = hmac(&credentials.stored_key, auth_message.as_bytes());
        let mut client_key = [0u8; 32];
        for ((k, p), s) in client_key.iter_mut().zip(proof).zip(client_signature) {
            *k = p ^ s;
        }
        let stored_key: [u8; 32] = Sha256::digest(client_key).into();
        if !constant_time_eq(&stored_key, &credentials.stored_key) {
            return Err(ScramError::InvalidProof);
        }
        let server_signature = hmac(&credentials.server_key, auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 7677 section 3: user "user", password "pencil".
    const SALT_B64: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_credentials() -> ScramCredentials {
        let salt = BASE64.decode(SALT_B64).unwrap();
        ScramCredentials::from_password_with_salt("pencil", &salt, 4096).unwrap()
    }

    // Checks the whole exchange against RFC 7677's example, byte for byte.
    #[test]
    fn unit_rfc7677_vectors() {
        let creds = rfc_credentials();
        let (exchange, server_first) =
            ScramExchange::start(&creds, CLIENT_FIRST.as_bytes(), SERVER_NONCE).unwrap();
        assert_eq!(server_first, SERVER_FIRST);
        let server_final = exchange.finish(&creds, CLIENT_FINAL.as_bytes()).unwrap();
        assert_eq!(server_final, SERVER_FINAL);
    }

    // Checks that a proof computed from another password is refused.
    #[test]
    fn unit_wrong_password_is_invalid_proof() {
        let salt = BASE64.decode(SALT_B64).unwrap();
        let creds = ScramCredentials::from_password_with_salt("pen", &salt, 4096).unwrap();
        let (exchange, _) =
            ScramExchange::start(&creds, CLIENT_FIRST.as_bytes(), SERVER_NONCE).unwrap();
        assert_eq!(exchange.finish(&creds, CLIENT_FINAL.as_bytes()), Err(ScramError::InvalidProof));
    }

    // Checks that a flipped proof bit, a wrong nonce, a wrong binding echo and garbage are all
    // refused with their own error.
    #[test]
    fn unit_bad_client_final_is_refused() {
        let creds = rfc_credentials();
        let (exchange, _) =
            ScramExchange::start(&creds, CLIENT_FIRST.as_bytes(), SERVER_NONCE).unwrap();
        let flipped = CLIENT_FINAL.replace("p=dHzb", "p=dHzc");
        assert_eq!(exchange.finish(&creds, flipped.as_bytes()), Err(ScramError::InvalidProof));
        let other_nonce = CLIENT_FINAL.replace("k0,p=", "k1,p=");
        assert_eq!(exchange.finish(&creds, other_nonce.as_bytes()), Err(ScramError::NonceMismatch));
        let other_binding = CLIENT_FINAL.replace("c=biws", "c=eSws");
        assert_eq!(
            exchange.finish(&creds, other_binding.as_bytes()),
            Err(ScramError::ChannelBindingMismatch)
        );
        assert!(matches!(exchange.finish(&creds, b"garbage"), Err(ScramError::Malformed { .. })));
        let short_proof = format!("c=biws,r=rOprNGfwEbeRWgbNEkqO{SERVER_NONCE},p=AAAA");
        assert!(matches!(
            exchange.finish(&creds, short_proof.as_bytes()),
            Err(ScramError::Malformed { .. })
        ));
    }

    // Checks client-first parsing: channel binding and authzid are refused clearly.
    #[test]
    fn unit_client_first_variants() {
        let creds = rfc_credentials();
        let start = |m: &str| ScramExchange::start(&creds, m.as_bytes(), "xyz").map(|(_, s)| s);
        assert_eq!(
            start("p=tls-server-end-point,,n=,r=abc"),
            Err(ScramError::ChannelBindingUnsupported)
        );
        assert_eq!(start("n,a=admin,n=,r=abc"), Err(ScramError::AuthzidUnsupported));
        assert!(start("y,,n=,r=abc").unwrap().starts_with("r=abcxyz,s="));
        assert!(matches!(start("n,,r=abc"), Err(ScramError::Malformed { .. })));
        assert!(matches!(start("n,,n=,r="), Err(ScramError::Malformed { .. })));
        assert!(matches!(start("n,,m=x,n=,r=abc"), Err(ScramError::Malformed { .. })));
        assert!(matches!(start(""), Err(ScramError::Malformed { .. })));
    }

    // Checks that the PostgreSQL verifier format round-trips and rejects junk.
    #[test]
    fn unit_verifier_round_trip() {
        let creds = rfc_credentials();
        let text = creds.to_verifier();
        assert!(text.starts_with("SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$"));
        assert_eq!(ScramCredentials::parse_verifier(&text).unwrap(), creds);
        assert!(ScramCredentials::parse_verifier("md5abc").is_err());
        assert!(ScramCredentials::parse_verifier("SCRAM-SHA-256$0:AA==$AA==:AA==").is_err());
        let fresh = ScramCredentials::from_password("secret").unwrap();
        assert_ne!(fresh.salt, creds.salt);
        assert!(random_nonce().unwrap().len() >= SCRAM_NONCE_BYTES);
    }
}
