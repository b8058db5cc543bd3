//! The bootstrap token itself: `<id>.<secret>`, six and sixteen characters of `[a-z0-9]`.

use core::fmt;

use rand_core::TryCryptoRng;
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, Zeroizing};

/// Length of the public token id.
pub const TOKEN_ID_LEN: usize = 6;
/// Length of the token secret.
pub const TOKEN_SECRET_LEN: usize = 16;
/// The regular expression every bootstrap token matches (as upstream spells it).
pub const TOKEN_PATTERN: &str = r"\A([a-z0-9]{6})\.([a-z0-9]{16})\z";

/// The 36 characters tokens are drawn from.
const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
/// Largest multiple of 36 that fits in a byte: bytes at or above it are rejected so that every
/// character is equally likely (no modulo bias).
const REJECTION_LIMIT: u8 = 252;

/// Why a string is not a bootstrap token (or token id, or token secret).
///
/// Messages name the rule that was broken and never repeat the offending characters, which may
/// be secret material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseTokenError {
    /// No `.` separates the id from the secret.
    #[error(
        "a bootstrap token has the form <id>.<secret> ([a-z0-9]{{6}}.[a-z0-9]{{16}}), but it contains no '.'"
    )]
    MissingSeparator,
    /// The id part has the wrong length.
    #[error("the token id must be exactly 6 characters of [a-z0-9], found {found}")]
    IdLength {
        /// Number of characters found.
        found: usize,
    },
    /// The id part contains a character outside `[a-z0-9]`.
    #[error("the token id may contain only a-z and 0-9, but character {position} is neither")]
    IdCharacter {
        /// 1-based position of the first offending character within the id.
        position: usize,
    },
    /// The secret part has the wrong length.
    #[error("the token secret must be exactly 16 characters of [a-z0-9], found {found}")]
    SecretLength {
        /// Number of characters found.
        found: usize,
    },
    /// The secret part contains a character outside `[a-z0-9]`.
    #[error("the token secret may contain only a-z and 0-9, but character {position} is neither")]
    SecretCharacter {
        /// 1-based position of the first offending character within the secret.
        position: usize,
    },
}

/// Checks `part` against `[a-z0-9]{len}`; returns the 1-based position of the first bad
/// character, or the character count on a length mismatch.
fn check_part(part: &str, len: usize) -> Result<(), PartError> {
    let count = part.chars().count();
    if count != len {
        return Err(PartError::Length(count));
    }
    match part
        .chars()
        .position(|c| !(c.is_ascii_digit() || c.is_ascii_lowercase()))
    {
        Some(i) => Err(PartError::Character(i + 1)),
        None => Ok(()),
    }
}

enum PartError {
    Length(usize),
    Character(usize),
}

/// The public half of a bootstrap token, six characters of `[a-z0-9]`.
///
/// It names the token (the Secret is `bootstrap-token-<id>`, the user `system:bootstrap:<id>`) and is
/// safe to log.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenId([u8; TOKEN_ID_LEN]);

impl TokenId {
    /// Parses a token id; exact match of `[a-z0-9]{6}`, no trimming.
    pub fn parse(s: &str) -> Result<Self, ParseTokenError> {
        match check_part(s, TOKEN_ID_LEN) {
            Ok(()) => {
                let mut id = [0u8; TOKEN_ID_LEN];
                id.copy_from_slice(s.as_bytes());
                Ok(Self(id))
            }
            Err(PartError::Length(found)) => Err(ParseTokenError::IdLength { found }),
            Err(PartError::Character(position)) => Err(ParseTokenError::IdCharacter { position }),
        }
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored; the fallback is unreachable but keeps this panic-free.
        core::str::from_utf8(&self.0).unwrap_or("")
    }

    /// Name of the Secret that stores this token: `bootstrap-token-<id>`.
    pub fn secret_name(&self) -> String {
        format!("{}{}", crate::secret::SECRET_NAME_PREFIX, self.as_str())
    }

    /// The user a token authenticates as: `system:bootstrap:<id>`.
    pub fn user_name(&self) -> String {
        format!("system:bootstrap:{}", self.as_str())
    }

    /// The cluster-info ConfigMap key holding this token's signature: `jws-kubeconfig-<id>`.
    pub fn signature_key(&self) -> String {
        format!("{}{}", crate::signer::SIGNATURE_KEY_PREFIX, self.as_str())
    }
}

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenId({:?})", self.as_str())
    }
}

impl core::str::FromStr for TokenId {
    type Err = ParseTokenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// The secret half of a bootstrap token, sixteen characters of `[a-z0-9]`.
///
/// It is the HMAC key of the cluster-info signature and the password of the bootstrap user.
/// `Debug` redacts it, comparisons run in constant time, and it is zeroized on drop.
#[derive(Clone)]
pub struct TokenSecret([u8; TOKEN_SECRET_LEN]);

impl TokenSecret {
    /// Parses a token secret; exact match of `[a-z0-9]{16}`, no trimming.
    pub fn parse(s: &str) -> Result<Self, ParseTokenError> {
        match check_part(s, TOKEN_SECRET_LEN) {
            Ok(()) => {
                let mut secret = [0u8; TOKEN_SECRET_LEN];
                secret.copy_from_slice(s.as_bytes());
                Ok(Self(secret))
            }
            Err(PartError::Length(found)) => Err(ParseTokenError::SecretLength { found }),
            Err(PartError::Character(position)) => {
                Err(ParseTokenError::SecretCharacter { position })
            }
        }
    }

    /// The secret's bytes (ASCII), e.g. as the HMAC key. Handle with care.
    pub fn expose_bytes(&self) -> &[u8; TOKEN_SECRET_LEN] {
        &self.0
    }

    /// The secret as a string slice. Handle with care.
    pub fn expose_str(&self) -> &str {
        core::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl Drop for TokenSecret {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl ConstantTimeEq for TokenSecret {
    fn ct_eq(&self, other: &Self) -> subtle::Choice {
        self.0.ct_eq(&other.0)
    }
}

impl PartialEq for TokenSecret {
    fn eq(&self, other: &Self) -> bool {
        self.ct_eq(other).into()
    }
}

impl Eq for TokenSecret {}

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(<redacted>)")
    }
}

/// A bootstrap token `<id>.<secret>`.
///
/// There is deliberately no `Display`: the full token is only available through
/// [`BootstrapToken::expose`], so it cannot end up in a log line by accident.
///
/// ```
/// use nodeauth_token::BootstrapToken;
///
/// let token = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
/// assert_eq!(token.id().as_str(), "abcdef");
/// assert_eq!(format!("{token:?}"), r#"BootstrapToken { id: "abcdef", secret: <redacted> }"#);
/// assert_eq!(token.expose().as_str(), "abcdef.0123456789abcdef");
/// assert!(BootstrapToken::parse(" abcdef.0123456789abcdef").is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    id: TokenId,
    secret: TokenSecret,
}

impl BootstrapToken {
    /// Parses `[a-z0-9]{6}\.[a-z0-9]{16}` exactly: no trimming, no case folding.
    pub fn parse(s: &str) -> Result<Self, ParseTokenError> {
        let (id, secret) = s.split_once('.').ok_or(ParseTokenError::MissingSeparator)?;
        Ok(Self {
            id: TokenId::parse(id)?,
            secret: TokenSecret::parse(secret)?,
        })
    }

    /// Assembles a token from its parts.
    pub fn from_parts(id: TokenId, secret: TokenSecret) -> Self {
        Self { id, secret }
    }

    /// Generates a fresh token from the operating system's CSPRNG.
    pub fn generate() -> Result<Self, GenerateError> {
        Self::generate_with(&mut getrandom::SysRng).map_err(GenerateError)
    }

    /// Generates a token from `rng`, each character uniform over `[a-z0-9]` (rejection sampling).
    pub fn generate_with<R: TryCryptoRng + ?Sized>(rng: &mut R) -> Result<Self, R::Error> {
        let mut chars = Zeroizing::new([0u8; TOKEN_ID_LEN + TOKEN_SECRET_LEN]);
        let mut pool = Zeroizing::new([0u8; 64]);
        let mut filled = 0;
        while filled < chars.len() {
            rng.try_fill_bytes(pool.as_mut_slice())?;
            for &b in pool.iter() {
                if b >= REJECTION_LIMIT {
                    continue;
                }
                if let (Some(slot), Some(&c)) =
                    (chars.get_mut(filled), ALPHABET.get(usize::from(b % 36)))
                {
                    *slot = c;
                    filled += 1;
                }
            }
        }
        let (id_chars, secret_chars) = chars.split_at(TOKEN_ID_LEN);
        let mut id = [0u8; TOKEN_ID_LEN];
        id.copy_from_slice(id_chars);
        let mut secret = [0u8; TOKEN_SECRET_LEN];
        secret.copy_from_slice(secret_chars);
        let token = Self {
            id: TokenId(id),
            secret: TokenSecret(secret),
        };
        secret.zeroize();
        Ok(token)
    }

    /// The public id.
    pub fn id(&self) -> &TokenId {
        &self.id
    }

    /// The secret.
    pub fn secret(&self) -> &TokenSecret {
        &self.secret
    }

    /// The full token `<id>.<secret>`, for showing to a user who asked for it.
    pub fn expose(&self) -> Zeroizing<String> {
        let mut s = String::with_capacity(TOKEN_ID_LEN + 1 + TOKEN_SECRET_LEN);
        s.push_str(self.id.as_str());
        s.push('.');
        s.push_str(self.secret.expose_str());
        Zeroizing::new(s)
    }
}

impl fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "BootstrapToken {{ id: {:?}, secret: <redacted> }}",
            self.id.as_str()
        )
    }
}

impl core::str::FromStr for BootstrapToken {
    type Err = ParseTokenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Either a token id or a full token, as `token delete` accepts.
///
/// A full token is reduced to its id at once; the secret is dropped (and zeroized).
pub fn parse_id_or_token(s: &str) -> Result<TokenId, ParseTokenError> {
    if s.contains('.') {
        BootstrapToken::parse(s).map(|t| t.id)
    } else {
        TokenId::parse(s)
    }
}

/// The operating system's random number generator failed.
#[derive(Debug, thiserror::Error)]
#[error("the operating system's random number generator failed: {0}")]
pub struct GenerateError(getrandom::Error);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_valid_token() {
        let t = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        assert_eq!(t.id().as_str(), "abcdef");
        assert_eq!(t.secret().expose_str(), "0123456789abcdef");
        assert_eq!(t.id().secret_name(), "bootstrap-token-abcdef");
        assert_eq!(t.id().user_name(), "system:bootstrap:abcdef");
    }

    #[test]
    fn rejects_with_precise_reasons() {
        use ParseTokenError::*;
        let cases: &[(&str, ParseTokenError)] = &[
            ("", MissingSeparator),
            ("abcdef0123456789abcdef", MissingSeparator),
            ("abcde.0123456789abcdef", IdLength { found: 5 }),
            ("abcdefg.0123456789abcdef", IdLength { found: 7 }),
            ("abcdeF.0123456789abcdef", IdCharacter { position: 6 }),
            ("ab-def.0123456789abcdef", IdCharacter { position: 3 }),
            ("abcdef.0123456789abcde", SecretLength { found: 15 }),
            ("abcdef.0123456789abcdef0", SecretLength { found: 17 }),
            ("abcdef.0123456789abcdeF", SecretCharacter { position: 16 }),
            ("abcdef.0123456789abc.ef", SecretCharacter { position: 14 }),
            (" abcdef.0123456789abcdef", IdLength { found: 7 }),
            ("abcdef.0123456789abcdef\n", SecretLength { found: 17 }),
            ("abcdéf.0123456789abcdef", IdCharacter { position: 5 }),
        ];
        for (input, want) in cases {
            assert_eq!(
                BootstrapToken::parse(input).unwrap_err(),
                *want,
                "{input:?}"
            );
        }
    }

    #[test]
    fn error_messages_never_echo_the_secret() {
        let err = BootstrapToken::parse("abcdef.0123456789abcdeX").unwrap_err();
        assert!(!err.to_string().contains("0123456789"));
    }

    #[test]
    fn debug_redacts() {
        let t = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        let dbg = format!("{t:?} {:?}", t.secret());
        assert!(!dbg.contains("0123456789abcdef"), "{dbg}");
    }

    #[test]
    fn equality() {
        let a = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        let b = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        let c = BootstrapToken::parse("abcdef.0123456789abcdee").unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn id_or_token() {
        assert_eq!(parse_id_or_token("abcdef").unwrap().as_str(), "abcdef");
        assert_eq!(
            parse_id_or_token("abcdef.0123456789abcdef")
                .unwrap()
                .as_str(),
            "abcdef"
        );
        assert!(parse_id_or_token("abcdef.").is_err());
    }

    #[test]
    fn generated_tokens_parse_and_differ() {
        let a = BootstrapToken::generate().unwrap();
        let b = BootstrapToken::generate().unwrap();
        assert_eq!(BootstrapToken::parse(&a.expose()).unwrap(), a);
        assert_ne!(a, b);
    }

    /// A deterministic "RNG" to check the rejection sampling maps bytes as intended.
    struct Counting(u8);
    impl rand_core::TryRng for Counting {
        type Error = core::convert::Infallible;
        fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
            Ok(0)
        }
        fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
            Ok(0)
        }
        fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
            for b in dst {
                *b = self.0;
                self.0 = self.0.wrapping_add(1);
            }
            Ok(())
        }
    }
    impl TryCryptoRng for Counting {}

    #[test]
    fn rejection_sampling_skips_biased_bytes() {
        // Start at 250: 250, 251 are accepted (250 % 36 = 34 'y', 251 % 36 = 35 'z'),
        // 252..=255 rejected, then 0, 1, 2, ...
        let t = BootstrapToken::generate_with(&mut Counting(250)).unwrap();
        assert_eq!(t.expose().as_str(), "yz0123.456789abcdefghij");
    }

    #[test]
    fn every_character_is_reachable_and_roughly_uniform() {
        let mut counts = [0u32; 36];
        for _ in 0..500 {
            let t = BootstrapToken::generate().unwrap();
            for b in t.expose().bytes().filter(|b| *b != b'.') {
                let i = ALPHABET.iter().position(|a| *a == b).unwrap();
                counts[i] += 1;
            }
        }
        // 11000 draws, 305.6 expected per character; a biased or broken generator falls far outside.
        for c in counts {
            assert!((200..420).contains(&c), "{counts:?}");
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in any::<String>()) {
            let _ = BootstrapToken::parse(&s);
            let _ = parse_id_or_token(&s);
        }

        #[test]
        fn parse_never_panics_on_near_tokens(s in "[a-z0-9.A-Z é-]{0,30}") {
            if let Ok(t) = BootstrapToken::parse(&s) {
                prop_assert_eq!(t.expose().to_string(), s.clone());
            }
        }

        #[test]
        fn valid_tokens_round_trip(s in "[a-z0-9]{6}\\.[a-z0-9]{16}") {
            let t = BootstrapToken::parse(&s).unwrap();
            prop_assert_eq!(t.expose().to_string(), s.clone());
        }
    }
}
