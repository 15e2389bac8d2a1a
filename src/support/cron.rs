//! Cron expressions and their next due time, at a fixed offset from UTC. Five fields (minute,
//! hour, day of month, month, day of week) or six (seconds first). Each field is `*`, a number, a
//! range `a-b`, any of those with a step `/n`, or a comma list of them; day of week is 0–7 (0 and
//! 7 are Sunday). As in cron, when both day fields are restricted a day matching either is due.

use time::{OffsetDateTime, UtcOffset};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    /// Bit i set: value i is due (seconds, minutes 0–59; hours 0–23; days 1–31; months 1–12;
    /// weekdays 0–6 from Sunday).
    seconds: u64,
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    day_star: bool,
    weekday_star: bool,
}

/// One field: its bits, and whether it was `*` (unrestricted).
fn field(text: &str, min: u32, max: u32) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                s.parse::<u32>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or(format!("{s:?} is not a step"))?,
            ),
            None => (part, 1),
        };
        let num = |s: &str| {
            s.parse::<u32>()
                .ok()
                .filter(|n| (min..=max).contains(n))
                .ok_or(format!("{s:?} is not a number in {min}–{max}"))
        };
        let (lo, hi) = match range {
            "*" => (min, max),
            r => match r.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None if step > 1 => (num(r)?, max),
                None => (num(r)?, num(r)?),
            },
        };
        if lo > hi {
            return Err(format!("{range:?} runs backwards"));
        }
        for v in (lo..=hi).step_by(step as usize) {
            bits |= 1 << v;
        }
    }
    Ok((bits, text == "*"))
}

impl Cron {
    pub fn parse(text: &str) -> Result<Cron, String> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        let (sec, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            n => {
                return Err(format!(
                    "has {n} fields, not 5 (minute hour day month weekday) or 6 (seconds first)"
                ));
            }
        };
        let at = |i: usize, f: &str| format!("field {} ({f})", i + usize::from(fields.len() == 6) + 1);
        let (seconds, _) = field(sec, 0, 59).map_err(|e| format!("seconds: {e}"))?;
        let (minutes, _) = field(rest[0], 0, 59).map_err(|e| format!("{}: {e}", at(0, "minute")))?;
        let (hours, _) = field(rest[1], 0, 23).map_err(|e| format!("{}: {e}", at(1, "hour")))?;
        let (days, day_star) = field(rest[2], 1, 31).map_err(|e| format!("{}: {e}", at(2, "day")))?;
        let (months, _) = field(rest[3], 1, 12).map_err(|e| format!("{}: {e}", at(3, "month")))?;
        let (mut weekdays, weekday_star) = field(rest[4], 0, 7).map_err(|e| format!("{}: {e}", at(4, "weekday")))?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & !(1 << 7);
        }
        Ok(Cron {
            seconds,
            minutes,
            hours,
            days,
            months,
            weekdays,
            day_star,
            weekday_star,
        })
    }

    fn day_due(&self, t: &OffsetDateTime) -> bool {
        let dom = self.days & (1 << t.day()) != 0;
        let dow = self.weekdays & (1 << t.weekday().number_days_from_sunday()) != 0;
        match (self.day_star, self.weekday_star) {
            (false, false) => dom || dow,
            _ => dom && dow,
        }
    }

    /// The first due time strictly after `after` (Unix seconds), read at `offset`; `None` when
    /// none falls within about four years (`0 0 30 2 *`).
    pub fn next_after(&self, after: i64, offset: UtcOffset) -> Option<i64> {
        let start = after.checked_add(1)?;
        // Minute by minute (a few hundred thousand steps at most), then the second within it.
        let mut minute = start - start.rem_euclid(60);
        let end = start + 4 * 366 * 24 * 3600;
        while minute < end {
            let t = OffsetDateTime::from_unix_timestamp(minute).ok()?.to_offset(offset);
            let hour_due = self.hours & (1 << t.hour()) != 0;
            if self.months & (1 << u8::from(t.month())) == 0 || !self.day_due(&t) || !hour_due {
                // Skip to the next hour boundary.
                minute += 60 * (60 - i64::from(t.minute()));
                continue;
            }
            if self.minutes & (1 << t.minute()) != 0 {
                let first = if minute < start { start - minute } else { 0 };
                if let Some(s) = (first..60).find(|s| self.seconds & (1 << s) != 0) {
                    return Some(minute + s);
                }
            }
            minute += 60;
        }
        None
    }
}

/// `"UTC"` or `"+02:00"` / `"-05:30"`: a fixed offset (no daylight-saving rules).
pub fn parse_offset(text: &str) -> Result<UtcOffset, String> {
    if text == "UTC" || text == "Z" {
        return Ok(UtcOffset::UTC);
    }
    let bad = || format!("{text:?} is not UTC or an offset like +02:00");
    let (sign, rest) = match text.as_bytes().first() {
        Some(b'+') => (1i8, &text[1..]),
        Some(b'-') => (-1i8, &text[1..]),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').ok_or_else(bad)?;
    let (h, m) = (h.parse::<i8>().map_err(|_| bad())?, m.parse::<i8>().map_err(|_| bad())?);
    if (0..=14).contains(&h) && (0..60).contains(&m) {
        UtcOffset::from_hms(sign * h, sign * m, 0).map_err(|_| bad())
    } else {
        Err(bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `YYYY-MM-DDTHH:MM:SSZ` as Unix seconds.
    fn at(s: &str) -> i64 {
        let n = |r: std::ops::Range<usize>| s[r].parse::<i32>().unwrap();
        let month = time::Month::try_from(n(5..7) as u8).unwrap();
        let date = time::Date::from_calendar_date(n(0..4), month, n(8..10) as u8).unwrap();
        let t = time::Time::from_hms(n(11..13) as u8, n(14..16) as u8, n(17..19) as u8).unwrap();
        OffsetDateTime::new_utc(date, t).unix_timestamp()
    }

    #[test]
    fn next_due_times_in_utc_and_at_an_offset() {
        let nightly = Cron::parse("0 3 * * *").unwrap();
        let utc = UtcOffset::UTC;
        assert_eq!(
            nightly.next_after(at("2026-12-04T10:00:00Z"), utc),
            Some(at("2026-12-05T03:00:00Z"))
        );
        assert_eq!(
            nightly.next_after(at("2026-12-04T02:59:59Z"), utc),
            Some(at("2026-12-04T03:00:00Z"))
        );
        // Strictly after: a time that is due is not its own next.
        assert_eq!(
            nightly.next_after(at("2026-12-04T03:00:00Z"), utc),
            Some(at("2026-12-05T03:00:00Z"))
        );
        let plus2 = parse_offset("+02:00").unwrap();
        assert_eq!(
            nightly.next_after(at("2026-12-04T10:00:00Z"), plus2),
            Some(at("2026-12-05T01:00:00Z"))
        );
        let weekdays = Cron::parse("*/15 9-17 * * 1-5").unwrap();
        // Friday 17:50 → Monday 09:00.
        assert_eq!(
            weekdays.next_after(at("2026-12-04T17:50:00Z"), utc),
            Some(at("2026-12-07T09:00:00Z"))
        );
        let seconds = Cron::parse("30 5 12 4 12 *").unwrap();
        assert_eq!(
            seconds.next_after(at("2026-12-04T12:05:00Z"), utc),
            Some(at("2026-12-04T12:05:30Z"))
        );
        let sunday = Cron::parse("0 0 * * 7").unwrap();
        assert_eq!(
            sunday.next_after(at("2026-12-04T00:00:00Z"), utc),
            Some(at("2026-12-06T00:00:00Z"))
        );
        assert_eq!(Cron::parse("0 0 30 2 *").unwrap().next_after(0, utc), None);
    }

    #[test]
    fn malformed_expressions_and_offsets_are_refused_with_the_field() {
        for (bad, why) in [
            ("0 3 * *", "has 4 fields"),
            ("60 3 * * *", "minute"),
            ("0 24 * * *", "hour"),
            ("0 3 0 * *", "day"),
            ("0 3 * 13 *", "month"),
            ("0 3 * * 8", "weekday"),
            ("0 3-1 * * *", "backwards"),
            ("*/0 * * * *", "not a step"),
        ] {
            let e = Cron::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert_eq!(parse_offset("UTC"), Ok(UtcOffset::UTC));
        assert!(parse_offset("-05:30").is_ok());
        for bad in ["Europe/Paris", "+2", "+15:00", "02:00"] {
            assert!(parse_offset(bad).is_err(), "{bad}");
        }
    }
}
