//! Instants of the audit trail as people write them: RFC 3339 in UTC to print
//! ([`rfc3339`]), and `--since` / `--until` to read ([`parse_instant`]): an RFC 3339
//! date-time, or a duration before now (`90s`, `30m`, `2h`, `7d`, `1h30m`).
//! Proleptic Gregorian calendar, from 1970 (RFC 3339, section 5.6); leap seconds are
//! not counted (Unix time).

use std::fmt;

const MS_PER_DAY: u64 = 86_400_000;

/// Why a time was not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeError(String);

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is no time: write an RFC 3339 date-time (2026-12-06T18:10:02Z, \
             2026-12-06T19:10:02+01:00) or a duration before now (90s, 30m, 2h, 7d, 1h30m)",
            self.0
        )
    }
}

impl std::error::Error for TimeError {}

/// `ms` (milliseconds since the Unix epoch) as `YYYY-MM-DDTHH:MM:SSZ`, the
/// milliseconds dropped.
pub fn rfc3339(ms: u64) -> String {
    let (days, in_day) = (ms / MS_PER_DAY, ms % MS_PER_DAY / 1000);
    let (year, month, day) = civil(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60
    )
}

/// `text` as milliseconds since the Unix epoch: an RFC 3339 date-time (`T`, `t` or a
/// space between date and time; `Z`, `z` or `±HH:MM`; a fraction of a second is
/// read to the millisecond), or a duration before `now`: one or more of a number and
/// `s`, `m` (or `min`), `h`, `d`, `w` (an instant before the epoch is the epoch).
/// Errors: anything else, a date that does not exist, one before 1970.
pub fn parse_instant(text: &str, now: u64) -> Result<u64, TimeError> {
    let error = || TimeError(text.to_owned());
    let text = text.trim();
    match duration(text) {
        Some(ms) => Ok(now.saturating_sub(ms)),
        None => date_time(text).ok_or_else(error),
    }
}

/// `2h`, `1h30m`, `90s`: milliseconds.
fn duration(text: &str) -> Option<u64> {
    let mut rest = text;
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let ms = match &rest[..unit] {
            "s" => 1_000,
            "m" | "min" => 60_000,
            "h" => 3_600_000,
            "d" => MS_PER_DAY,
            "w" => 7 * MS_PER_DAY,
            _ => return None,
        };
        rest = &rest[unit..];
        total = total.checked_add(n.checked_mul(ms)?)?;
    }
    (!text.is_empty()).then_some(total)
}

/// `YYYY-MM-DDTHH:MM:SS[.fff…](Z|±HH:MM)`.
fn date_time(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20 || !b.is_ascii() {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<u64> {
        let digits = &text[range];
        digits
            .bytes()
            .all(|d| d.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if separators.iter().any(|&(i, c)| b[i] != c) || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if year < 1970
        || !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut rest = &text[19..];
    let mut ms = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(fraction.len());
        if digits == 0 {
            return None;
        }
        // The first three digits, as milliseconds (`.5` is 500).
        let first: String = fraction[..digits]
            .chars()
            .chain("00".chars())
            .take(3)
            .collect();
        ms = first.parse::<u64>().ok()?;
        rest = &fraction[digits..];
    }
    let local = (days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
        * 1000
        + ms;
    match rest.as_bytes() {
        [b'Z' | b'z'] => Some(local),
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let two = |a: u8, b: u8| -> Option<u64> {
                (a.is_ascii_digit() && b.is_ascii_digit())
                    .then(|| u64::from(a - b'0') * 10 + u64::from(b - b'0'))
            };
            let (h, m) = (two(*h1, *h2)?, two(*m1, *m2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let offset = (h * 60 + m) * 60_000;
            // Local time is UTC plus the offset.
            match sign {
                b'+' => local.checked_sub(offset),
                _ => Some(local + offset),
            }
        }
        _ => None,
    }
}

fn is_leap(year: u64) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to `year-month-day` (from 1970 on). Howard Hinnant's
/// `days_from_civil` (<https://howardhinnant.github.io/date_algorithms.html>) on
/// years counted from March, without the negative eras.
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let (era, yoe) = (y / 400, y % 400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date `days` after 1970-01-01: Hinnant's `civil_from_days`, from 1970 on.
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let (era, doe) = (z / 146_097, z % 146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DAY: u64 = MS_PER_DAY;

    #[test]
    fn instants_print_in_utc_to_the_second() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000_999), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(951_868_799_000), "2000-02-29T23:59:59Z");
        assert_eq!(rfc3339(4_107_542_400_000), "2100-03-01T00:00:00Z");
        assert_eq!(rfc3339(1_798_761_599_000), "2026-12-31T23:59:59Z");
        assert_eq!(rfc3339(1_798_761_600_000), "2027-01-01T00:00:00Z");
        assert_eq!(rfc3339(253_402_300_799_000), "9999-12-31T23:59:59Z");
    }

    #[test]
    fn an_rfc3339_date_time_is_read_with_its_offset_and_fraction() {
        let at = |text: &str| parse_instant(text, 0);
        assert_eq!(at("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(at("2023-11-14t22:13:20z"), Ok(1_700_000_000_000));
        assert_eq!(at(" 2023-11-14 22:13:20Z "), Ok(1_700_000_000_000));
        assert_eq!(at("2023-11-14T22:13:20.5Z"), Ok(1_700_000_000_500));
        assert_eq!(at("2023-11-14T22:13:20.123456Z"), Ok(1_700_000_000_123));
        assert_eq!(at("2023-11-14T22:13:20.07Z"), Ok(1_700_000_000_070));
        assert_eq!(at("2023-11-14T23:43:20+01:30"), Ok(1_700_000_000_000));
        assert_eq!(at("2023-11-14T20:13:20-02:00"), Ok(1_700_000_000_000));
        assert_eq!(at("2024-02-29T00:00:00Z"), Ok(1_709_164_800_000));
        assert_eq!(at("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(at("1970-01-01T00:00:00-00:01"), Ok(60_000));
        assert_eq!(at("2000-02-29T00:00:00Z"), Ok(951_782_400_000));
    }

    #[test]
    fn a_date_time_that_does_not_exist_or_is_malformed_is_refused() {
        for bad in [
            "",
            "2023-11-14",
            "2023-11-14T22:13:20",
            "2023-11-14T22:13:20+0100",
            "2023-11-14T22:13:20+01:0x",
            "2023-11-14T22:13:20+0::00",
            "2023-11-14T22:13:20+00:0:",
            "2023-11-14T22:13:20+24:00",
            "2023-11-14T22:13:20+01:60",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T22:13:20ZZ",
            "2023-11-14X22:13:20Z",
            "2023/11/14T22:13:20Z",
            "2023-11-14T22-13:20Z",
            "2023-11-14T22:13-20Z",
            "2023-11-1xT22:13:20Z",
            "2023-+1-14T22:13:20Z",
            "2023-00-14T22:13:20Z",
            "2023-13-14T22:13:20Z",
            "2023-11-00T22:13:20Z",
            "2023-11-31T22:13:20Z",
            "2023-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2023-11-14T24:00:00Z",
            "2023-11-14T22:60:00Z",
            "2023-11-14T22:13:60Z",
            "1969-12-31T23:59:59Z",
            "1970-01-01T00:30:00+01:00",
            "2023-11-14T22:13:20é",
            "2023-11-14T22:13:2éZ",
        ] {
            assert!(parse_instant(bad, 0).is_err(), "{bad:?}");
        }
        assert!(parse_instant("2023-11-30T22:13:20Z", 0).is_ok());
        assert!(parse_instant("2023-12-31T23:59:59Z", 0).is_ok());
        assert!(parse_instant("2023-11-14T23:59:59+23:59", 0).is_ok());
    }

    #[test]
    fn a_duration_is_that_long_before_now() {
        let now = 30 * DAY;
        let ago = |text: &str| parse_instant(text, now).map(|at| now - at);
        assert_eq!(ago("90s"), Ok(90_000));
        assert_eq!(ago("30m"), Ok(30 * 60_000));
        assert_eq!(ago("30min"), Ok(30 * 60_000));
        assert_eq!(ago("2h"), Ok(2 * 3_600_000));
        assert_eq!(ago("7d"), Ok(7 * DAY));
        assert_eq!(ago("2w"), Ok(14 * DAY));
        assert_eq!(ago("1h30m"), Ok(90 * 60_000));
        assert_eq!(ago("0s"), Ok(0));
        assert_eq!(parse_instant("9999w", now), Ok(0), "not before the epoch");
        for bad in ["h", "2", "2x", "2 h", "2hours", "-2h", "1h30", "h2"] {
            assert!(parse_instant(bad, now).is_err(), "{bad:?}");
        }
        assert!(parse_instant("99999999999999999999w", now).is_err());
        assert!(parse_instant("9999999999999999w", now).is_err());
        assert!(parse_instant("18446744073709551s18446744073709551s", now).is_err());
    }

    #[test]
    fn leap_years_follow_the_gregorian_rule() {
        assert!(is_leap(2024) && is_leap(2000) && is_leap(2400));
        assert!(!is_leap(2023) && !is_leap(2100) && !is_leap(1900));
        let days: Vec<u64> = (1..=12).map(|m| days_in_month(2023, m)).collect();
        assert_eq!(days, [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]);
        assert_eq!(days_in_month(2024, 2), 29);
    }

    #[test]
    fn the_error_quotes_what_was_written_and_what_is_read() {
        let e = parse_instant("yesterday", 0).unwrap_err().to_string();
        assert!(
            e.starts_with("\"yesterday\" is no time: write an RFC 3339"),
            "{e}"
        );
        assert!(e.contains("2h"), "{e}");
    }

    proptest! {
        #[test]
        fn a_printed_instant_reads_back_to_its_second(ms in 0u64..253_402_300_800_000) {
            prop_assert_eq!(parse_instant(&rfc3339(ms), 0), Ok(ms / 1000 * 1000));
        }

        #[test]
        fn days_count_from_the_epoch_one_after_another(days in 0u64..2_932_896) {
            let (y, m, d) = civil(days);
            prop_assert_eq!(days_from_civil(y, m, d), days);
            let next = civil(days + 1);
            let expected = if d < days_in_month(y, m) {
                (y, m, d + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
            prop_assert_eq!(next, expected);
        }
    }
}
