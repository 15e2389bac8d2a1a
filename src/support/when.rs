//! A moment as people read it in the CLI's lists and the portal: UTC, to the minute. Its own
//! file in `support` so that the pages (`web/`) and the CLI share it without one importing the
//! other (the pages' use of the CLI's copy closed an import loop through `cli`, `front`,
//! `pipeline` and `web`).

/// UTC, to the minute.
pub(crate) fn when(unix: i64) -> String {
    match time::OffsetDateTime::from_unix_timestamp(unix) {
        Ok(t) => format!(
            "{}-{:02}-{:02} {:02}:{:02}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute()
        ),
        Err(_) => unix.to_string(),
    }
}
