//! Peer authentication: both sides of a peer connection prove they know the cluster secret
//! (`--cluster-secret-file`) with an HMAC-SHA-256 challenge-response over fresh nonces.
//!
//! ```text
//! dialer                                   listener
//!   Hello(d)                         ->
//!                                    <-    Challenge { nonce_l }        (after checking Hello)
//!   Proof { nonce_d, mac_d }         ->    mac_d = HMAC(secret, "dialer"   | cluster | nonce_l | nonce_d)
//!                                    <-    Proof { nonce_l, mac_l }     (or Refused)
//!                                    <-    Hello(l)                     mac_l = HMAC(secret, "listener" | cluster | nonce_l | nonce_d)
//! ```
//!
//! Each side's MAC covers both nonces, so a recorded exchange proves nothing later, and its
//! own label, so one side's proof cannot be reflected back as the other's. Comparison is
//! constant-time (`hmac`'s `verify_slice`). A listener with a secret sends `Challenge` where
//! it would send `Hello`; a dialer with a secret refuses a listener that answers `Hello`
//! directly (it did not authenticate), and a dialer without one refuses a `Challenge`; so a
//! node with a secret and one without never talk. Without a secret nothing changes (logged
//! once at WARN by the control plane).
//!
//! The secret is installed process-wide (`install`) by the control plane so every dial in the
//! process (raft, pings, joins, and the region's data connections) proves it without passing
//! it through each caller; `peer::PeerConn::dial_with` takes one explicitly (tests).

use std::path::Path;
use std::sync::{Arc, OnceLock};

use hmac::{KeyInit, Mac};
use sha2::Sha256;

/// Bytes of each side's nonce.
pub const NONCE_BYTES: usize = 32;
/// Bytes of a proof (HMAC-SHA-256).
pub const PROOF_BYTES: usize = 32;
/// Shortest secret accepted, in bytes (after trimming the trailing newline).
pub const SECRET_BYTES_MIN: usize = 16;
/// Longest secret file read, in bytes.
pub const SECRET_BYTES_MAX: usize = 4096;

type HmacSha256 = hmac::Hmac<Sha256>;

/// The shared cluster secret. Its `Debug` never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(Arc<[u8]>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterSecret({} bytes)", self.0.len())
    }
}

/// Why a secret file cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecretError {
    /// The file cannot be read.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// Other users may read the file.
    #[error("{path} is readable by other users (mode {mode:o}); chmod o-rwx it")]
    WorldReadable {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// The secret is too short or too long.
    #[error(
        "{path} holds {len} bytes; a cluster secret has {SECRET_BYTES_MIN} to {SECRET_BYTES_MAX}"
    )]
    Length {
        /// The file.
        path: String,
        /// Its length after trimming.
        len: usize,
    },
}

impl ClusterSecret {
    /// The secret in `bytes` (trailing whitespace trimmed), if its length is acceptable.
    pub fn from_bytes(bytes: &[u8]) -> Option<ClusterSecret> {
        let end = bytes.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(0, |i| i + 1);
        let secret = bytes.get(..end).unwrap_or(&[]);
        (SECRET_BYTES_MIN..=SECRET_BYTES_MAX)
            .contains(&secret.len())
            .then(|| ClusterSecret(Arc::from(secret)))
    }

    /// Reads a secret file, refusing one other users may read.
    pub fn read(path: &Path) -> Result<ClusterSecret, SecretError> {
        use std::os::unix::fs::PermissionsExt;
        let shown = path.display().to_string();
        let read_error =
            |e: std::io::Error| SecretError::Read { path: shown.clone(), reason: e.to_string() };
        let meta = std::fs::metadata(path).map_err(read_error)?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o007 != 0 {
            return Err(SecretError::WorldReadable { path: shown, mode });
        }
        if meta.len() > SECRET_BYTES_MAX as u64 + 1 {
            return Err(SecretError::Length {
                path: shown,
                len: usize::try_from(meta.len()).unwrap_or(usize::MAX),
            });
        }
        let bytes = std::fs::read(path).map_err(read_error)?;
        let len = bytes.trim_ascii_end().len();
        ClusterSecret::from_bytes(&bytes).ok_or(SecretError::Length { path: shown, len })
    }
}

/// Which side of the connection a proof is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The side that connected.
    Dialer,
    /// The side that accepted.
    Listener,
}

impl Side {
    fn label(self) -> &'static [u8] {
        match self {
            Side::Dialer => b"tessera peer auth v1 dialer",
            Side::Listener => b"tessera peer auth v1 listener",
        }
    }
}

fn mac(
    secret: &ClusterSecret,
    side: Side,
    cluster: &str,
    listener_nonce: &[u8],
    dialer_nonce: &[u8],
) -> Option<HmacSha256> {
    let mut mac = HmacSha256::new_from_slice(&secret.0).ok()?;
    for part in [side.label(), cluster.as_bytes(), listener_nonce, dialer_nonce] {
        // Length-prefixed, so no two different inputs concatenate alike.
        mac.update(&(part.len() as u64).to_le_bytes());
        mac.update(part);
    }
    Some(mac)
}

/// `side`'s proof that it knows `secret`, bound to the cluster and both nonces.
pub fn prove(
    secret: &ClusterSecret,
    side: Side,
    cluster: &str,
    listener_nonce: &[u8],
    dialer_nonce: &[u8],
) -> Vec<u8> {
    mac(secret, side, cluster, listener_nonce, dialer_nonce)
        .map(|m| m.finalize().into_bytes().to_vec())
        .unwrap_or_default()
}

/// Whether `proof` is `side`'s proof for these nonces (constant-time comparison).
pub fn verify(
    secret: &ClusterSecret,
    side: Side,
    cluster: &str,
    listener_nonce: &[u8],
    dialer_nonce: &[u8],
    proof: &[u8],
) -> bool {
    proof.len() == PROOF_BYTES
        && listener_nonce.len() == NONCE_BYTES
        && dialer_nonce.len() == NONCE_BYTES
        && mac(secret, side, cluster, listener_nonce, dialer_nonce)
            .is_some_and(|m| m.verify_slice(proof).is_ok())
}

/// A fresh random nonce.
pub fn nonce() -> Result<Vec<u8>, String> {
    let mut n = vec![0u8; NONCE_BYTES];
    getrandom::fill(&mut n).map_err(|e| format!("no randomness for a peer nonce: {e}"))?;
    Ok(n)
}

/// The process's secret, set once by the control plane (`None` inside: no authentication).
static SECRET: OnceLock<Option<ClusterSecret>> = OnceLock::new();

/// Installs the process's secret (first call wins; one node per process).
pub fn install(secret: Option<ClusterSecret>) {
    let _ = SECRET.set(secret);
}

/// The installed secret, if any.
pub fn installed() -> Option<&'static ClusterSecret> {
    SECRET.get().and_then(Option::as_ref)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> ClusterSecret {
        ClusterSecret::from_bytes(s.as_bytes()).expect("valid")
    }

    // Checks a proof verifies only with the same secret, side, cluster and nonces, and that
    // malformed proofs and nonces are refused.
    #[test]
    fn prove_verify_bad_input() {
        let s = secret("0123456789abcdef-secret");
        let (l, d) = (vec![1u8; NONCE_BYTES], vec![2u8; NONCE_BYTES]);
        let p = prove(&s, Side::Dialer, "c", &l, &d);
        assert_eq!(p.len(), PROOF_BYTES);
        assert!(verify(&s, Side::Dialer, "c", &l, &d, &p));
        assert!(!verify(&secret("another-secret-of-16"), Side::Dialer, "c", &l, &d, &p));
        assert!(!verify(&s, Side::Listener, "c", &l, &d, &p), "no reflection");
        assert!(!verify(&s, Side::Dialer, "c2", &l, &d, &p));
        assert!(!verify(&s, Side::Dialer, "c", &d, &l, &p), "nonces are ordered");
        assert!(!verify(&s, Side::Dialer, "c", &l, &d, &p[..31]));
        assert!(!verify(&s, Side::Dialer, "c", &l, &d, &[]));
        assert!(!verify(&s, Side::Dialer, "c", &l[..4], &d, &p));
        let mut flipped = p.clone();
        flipped[7] ^= 1;
        assert!(!verify(&s, Side::Dialer, "c", &l, &d, &flipped));
        assert_ne!(nonce().expect("nonce"), nonce().expect("nonce"));
    }

    // Checks the secret file rules: trailing newline trimmed, too short refused, other users'
    // access refused, a missing file named, and Debug never shows the bytes.
    #[test]
    fn secret_file_rules() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("tessera-auth-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("secret");
        let write = |bytes: &[u8], mode: u32| {
            std::fs::write(&file, bytes).expect("write");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
        };
        write(b"0123456789abcdef-secret\n", 0o600);
        let s = ClusterSecret::read(&file).expect("valid");
        assert_eq!(s, secret("0123456789abcdef-secret"));
        assert!(!format!("{s:?}").contains("0123"), "{s:?}");
        write(b"0123456789abcdef-secret\n", 0o644);
        assert!(matches!(
            ClusterSecret::read(&file),
            Err(SecretError::WorldReadable { mode: 0o644, .. })
        ));
        write(b"short\n", 0o640);
        assert!(matches!(ClusterSecret::read(&file), Err(SecretError::Length { len: 5, .. })));
        write(&[b'x'; SECRET_BYTES_MAX + 10], 0o600);
        assert!(matches!(ClusterSecret::read(&file), Err(SecretError::Length { .. })));
        let e = ClusterSecret::read(&dir.join("missing")).expect_err("missing");
        assert!(e.to_string().contains("missing"), "{e}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
