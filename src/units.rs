//! Flag values with units, as the benchmarks take them: sizes (`4M`, `1G`)
//! and durations (`10s`, `500ms`). The daemons' durations go through
//! `mon_cmd::parse_duration`, which also takes hours and bare seconds; the
//! two stay apart so that each flag keeps the values and errors it has.

use std::time::Duration;

/// `1G`, `512M`, `64K`, or bytes.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let (digits, unit) = text.trim().split_at(
        text.trim()
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.trim().len()),
    );
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 1G or 512M"))?;
    let scale = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => return Err(format!("{text:?}: unknown unit {unit:?}")),
    };
    value
        .checked_mul(scale)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("{text:?} is out of range"))
}

/// `10s`, `500ms`, `2m`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = || format!("{text:?} is not a duration like 10s, 500ms, 2m, 1h or 7d");
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?);
    let value: u64 = digits.parse().map_err(|_| bad())?;
    match unit {
        "ms" => Ok(Duration::from_millis(value)),
        "s" => Ok(Duration::from_secs(value)),
        "m" => Ok(Duration::from_secs(value * 60)),
        "h" => Ok(Duration::from_secs(value * 3600)),
        "d" => Ok(Duration::from_secs(value * 86_400)),
        _ => Err(bad()),
    }
}
