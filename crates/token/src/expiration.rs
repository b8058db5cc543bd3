//! The `expiration` key: RFC 3339 as Go's `time.Parse(time.RFC3339, ...)` reads it.
//!
//! Upstream decides validity with Go's parser, so we accept exactly what it accepts (including
//! its leniencies: a one-digit hour, a `,` before fractional seconds, an offset hour of 24) and
//! nothing more; a string we refuse is one upstream treats as expired too.

use jiff::Timestamp;

/// Why an `expiration` value is not an RFC 3339 timestamp.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExpirationError {
    /// The text does not have the shape `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
    #[error("not an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)): {0}")]
    Syntax(&'static str),
    /// A field is outside its range.
    #[error("RFC 3339 {0} out of range")]
    Range(&'static str),
}

struct Cursor<'a> {
    s: &'a [u8],
}

impl Cursor<'_> {
    fn digits(
        &mut self,
        min_len: usize,
        max_len: usize,
        what: &'static str,
    ) -> Result<u32, ExpirationError> {
        let n = self
            .s
            .iter()
            .take(max_len)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if n < min_len {
            return Err(ExpirationError::Syntax(what));
        }
        let (digits, rest) = self
            .s
            .split_at_checked(n)
            .ok_or(ExpirationError::Syntax(what))?;
        let v = digits
            .iter()
            .fold(0u32, |acc, b| acc * 10 + u32::from(b - b'0'));
        self.s = rest;
        Ok(v)
    }

    fn literal(&mut self, c: u8, what: &'static str) -> Result<(), ExpirationError> {
        match self.s.split_first() {
            Some((&b, rest)) if b == c => {
                self.s = rest;
                Ok(())
            }
            _ => Err(ExpirationError::Syntax(what)),
        }
    }
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses an `expiration` value the way upstream does.
pub fn parse_expiration(s: &str) -> Result<Timestamp, ExpirationError> {
    use ExpirationError::{Range, Syntax};
    let mut c = Cursor { s: s.as_bytes() };
    let year = i64::from(c.digits(4, 4, "year must be 4 digits")?);
    c.literal(b'-', "expected '-' after the year")?;
    let month = c.digits(2, 2, "month must be 2 digits")?;
    c.literal(b'-', "expected '-' after the month")?;
    let day = c.digits(2, 2, "day must be 2 digits")?;
    c.literal(b'T', "expected 'T' between date and time")?;
    let hour = c.digits(1, 2, "hour must be 1 or 2 digits")?;
    c.literal(b':', "expected ':' after the hour")?;
    let minute = c.digits(2, 2, "minute must be 2 digits")?;
    c.literal(b':', "expected ':' after the minute")?;
    let second = c.digits(2, 2, "second must be 2 digits")?;
    let mut nanos = 0u32;
    if let [b'.' | b',', d, ..] = c.s
        && d.is_ascii_digit()
    {
        c.s = c.s.get(1..).unwrap_or_default();
        let n = c.s.iter().take_while(|b| b.is_ascii_digit()).count();
        // Go keeps the first nine digits and ignores the rest.
        for i in 0..9 {
            nanos = nanos * 10
                + c.s
                    .get(i)
                    .filter(|_| i < n)
                    .map_or(0, |b| u32::from(b - b'0'));
        }
        c.s = c.s.get(n..).unwrap_or_default();
    }
    let offset_seconds: i64 = match c.s {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2]
            if [h1, h2, m1, m2].iter().all(|b| b.is_ascii_digit()) =>
        {
            let oh = i64::from((h1 - b'0') * 10 + (h2 - b'0'));
            let om = i64::from((m1 - b'0') * 10 + (m2 - b'0'));
            if oh > 24 {
                return Err(Range("offset hour"));
            }
            if om > 60 {
                return Err(Range("offset minute"));
            }
            let off = (oh * 60 + om) * 60;
            if *sign == b'-' { -off } else { off }
        }
        [] => return Err(Syntax("missing time zone (Z or +HH:MM)")),
        _ => {
            return Err(Syntax(
                "time zone must be Z or +HH:MM / -HH:MM, with nothing after it",
            ));
        }
    };
    if !(1..=12).contains(&month) {
        return Err(Range("month"));
    }
    if hour > 23 {
        return Err(Range("hour"));
    }
    if minute > 59 {
        return Err(Range("minute"));
    }
    if second > 59 {
        return Err(Range("second"));
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err(Range("day"));
    }
    let secs = days_from_civil(year, month, day) * 86_400
        + i64::from(hour) * 3600
        + i64::from(minute) * 60
        + i64::from(second)
        - offset_seconds;
    let nanos = i32::try_from(nanos).map_err(|_| Range("fraction"))?;
    Timestamp::new(secs, nanos).map_err(|_| Range("timestamp"))
}

/// Formats an expiration as upstream writes it: UTC, `YYYY-MM-DDTHH:MM:SSZ`. Fractional seconds
/// (which kubeadm never writes, but Go accepts) are kept when present, so that every parsed value
/// formats back to the same instant; truncate to whole seconds first for kubeadm's exact form.
pub fn format_expiration(at: Timestamp) -> String {
    let mut secs = at.as_second();
    let mut nanos = at.subsec_nanosecond();
    if nanos < 0 {
        secs -= 1;
        nanos += 1_000_000_000;
    }
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let mut out = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn accepts_what_go_accepts() {
        let cases = [
            ("2024-02-29T23:59:59Z", "2024-02-29T23:59:59Z"),
            ("2024-01-01T00:00:00+01:00", "2023-12-31T23:00:00Z"),
            ("2024-01-01T00:00:00-00:30", "2024-01-01T00:30:00Z"),
            ("2024-01-01T00:00:00.5Z", "2024-01-01T00:00:00.5Z"),
            ("2024-01-01T00:00:00,25Z", "2024-01-01T00:00:00.25Z"),
            (
                "2024-01-01T00:00:00.1234567891234Z",
                "2024-01-01T00:00:00.123456789Z",
            ),
            ("2024-01-01T5:00:00Z", "2024-01-01T05:00:00Z"),
            ("2024-01-01T00:00:00+24:00", "2023-12-31T00:00:00Z"),
            ("0000-01-01T00:00:00Z", "0000-01-01T00:00:00Z"),
        ];
        for (input, want) in cases {
            assert_eq!(parse_expiration(input), Ok(ts(want)), "{input}");
        }
    }

    #[test]
    fn refuses_what_go_refuses() {
        for input in [
            "",
            "2024-01-01",
            "2024-01-01 00:00:00Z",
            "2024-01-01t00:00:00Z",
            "2024-01-01T00:00:00z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00+0100",
            "2024-01-01T00:00:00Z ",
            " 2024-01-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-00-01T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:60:00Z",
            "2024-01-01T00:00:60Z",
            "2024-01-01T00:00:00+25:00",
            "2024-01-01T00:00:00.Z",
            "24-01-01T00:00:00Z",
            "+2024-01-01T00:00:00Z",
            "2024-1-01T00:00:00Z",
        ] {
            assert!(parse_expiration(input).is_err(), "{input:?}");
        }
    }

    #[test]
    fn formats_like_upstream() {
        assert_eq!(
            format_expiration(ts("2024-03-04T05:06:07Z")),
            "2024-03-04T05:06:07Z"
        );
        assert_eq!(
            format_expiration(ts("1960-12-31T23:59:59Z")),
            "1960-12-31T23:59:59Z"
        );
    }

    proptest! {
        #[test]
        fn never_panics(s in any::<String>()) {
            let _ = parse_expiration(&s);
        }

        #[test]
        fn format_parse_round_trip(secs in -62_135_596_800i64..253_402_300_799i64, nanos in 0i32..1_000_000_000) {
            let t = Timestamp::new(secs, nanos).unwrap();
            prop_assert_eq!(parse_expiration(&format_expiration(t)), Ok(t));
            prop_assert_eq!(format_expiration(t), t.to_string());
        }
    }
}
