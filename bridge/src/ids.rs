//! Random identifiers and secrets: task ids, request ids, API keys, and hex helpers.

/// Fills `N` bytes from the operating system's CSPRNG.
///
/// Panics only if the OS has no usable random source, which the bridge cannot run without.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).expect("the operating system's random source is unavailable");
    buf
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
}

/// A new task id: `agt_` and 32 hex digits.
pub fn task_id() -> String {
    format!("agt_{}", hex(&random_bytes::<16>()))
}

/// A new plan id: `pln_` and 32 hex digits.
pub fn plan_id() -> String {
    format!("pln_{}", hex(&random_bytes::<16>()))
}

/// A new board token id (public, names the token): `btk_` and 12 hex digits.
pub fn board_token_id() -> String {
    format!("btk_{}", hex(&random_bytes::<6>()))
}

/// A new board login token: `abb_` and 64 hex digits (32 random bytes).
pub fn board_token_secret() -> String {
    format!("abb_{}", hex(&random_bytes::<32>()))
}

/// A new interaction (approval or question) id: `req_` and 24 hex digits.
pub fn request_id() -> String {
    format!("req_{}", hex(&random_bytes::<12>()))
}

/// A new API key id (public, names the key in lists): `key_` and 12 hex digits.
pub fn key_id() -> String {
    format!("key_{}", hex(&random_bytes::<6>()))
}

/// A new API key secret: `abk_` and 64 hex digits (32 random bytes).
pub fn api_key_secret() -> String {
    format!("abk_{}", hex(&random_bytes::<32>()))
}

/// Whether `s` has the shape of an id made by `prefix` functions above (used to refuse junk
/// before it reaches the store).
pub fn looks_like(s: &str, prefix: &str) -> bool {
    s.len() > prefix.len()
        && s.len() <= 64
        && s.starts_with(prefix)
        && s[prefix.len()..].bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_their_shapes() {
        let t = task_id();
        assert!(looks_like(&t, "agt_"), "{t}");
        assert_eq!(t.len(), 36);
        assert_ne!(task_id(), t);
        assert!(looks_like(&request_id(), "req_"));
        assert_eq!(api_key_secret().len(), 68);
        assert!(!looks_like("agt_", "agt_"));
        assert!(!looks_like("agt_xyz", "agt_"));
        assert_eq!(hex(&[0, 0xab, 0xff]), "00abff");
    }
}
