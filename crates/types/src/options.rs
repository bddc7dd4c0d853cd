//! Cluster-wide settings an operator changes at run time (`cairn config
//! set NAME VALUE`), like Ceph's `ceph config set`. The monitor validates
//! and keeps them; daemons apply them live. This table is the one place
//! that names each setting, its bounds, its default and what it does.

use std::collections::BTreeMap;

/// The kind and bounds of a setting's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An integer in `min..=max`; accepts `K`, `M`, `G` suffixes (powers of
    /// 1024) when `bytes`.
    Integer {
        min: u64,
        max: u64,
        bytes: bool,
    },
    Bool,
}

/// One setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionSpec {
    pub name: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    pub help: &'static str,
}

const fn int(min: u64, max: u64) -> Kind {
    Kind::Integer {
        min,
        max,
        bytes: false,
    }
}

/// Every setting, by name.
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "mon_osd_down_out_interval",
        kind: int(1, 30 * 86_400),
        default: "600",
        help: "seconds a down OSD stays in before it is marked out and its data re-replicated \
               (overrides `cairn mon --down-out`)",
    },
    OptionSpec {
        name: "osd_recovery_max_active",
        kind: int(1, 256),
        default: "4",
        help: "recovery and backfill pushes in flight per OSD (degraded PGs get slots before \
               merely misplaced ones)",
    },
    OptionSpec {
        name: "osd_recovery_max_active_idle",
        kind: int(1, 256),
        default: "16",
        help: "recovery and backfill pushes in flight per OSD while it served no client I/O in \
               the last second (recovery takes the disk when clients leave it idle)",
    },
    OptionSpec {
        name: "osd_recovery_max_bytes_per_sec",
        kind: Kind::Integer {
            min: 0,
            max: u64::MAX >> 1,
            bytes: true,
        },
        default: "0",
        help: "recovery and backfill bytes an OSD sends per second (0: unlimited)",
    },
    OptionSpec {
        name: "osd_scrub_interval",
        kind: int(60, 365 * 86_400),
        default: "86400",
        help: "seconds between light scrubs of a PG",
    },
    OptionSpec {
        name: "osd_deep_scrub_interval",
        kind: int(60, 365 * 86_400),
        default: "604800",
        help: "seconds between deep scrubs (every byte read and checksummed) of a PG",
    },
    OptionSpec {
        name: "osd_scrub_auto_repair",
        kind: Kind::Bool,
        default: "true",
        help: "repair inconsistencies a scheduled scrub finds from healthy copies",
    },
    OptionSpec {
        name: "osd_scrub_chunk_max",
        kind: int(1, 1024),
        default: "32",
        help: "objects a scrub compares at a time (writes to them wait meanwhile)",
    },
    OptionSpec {
        name: "osd_max_scrubs",
        kind: int(1, 64),
        default: "1",
        help: "scheduled scrubs an OSD runs at once as primary",
    },
];

/// The setting called `name`.
#[must_use]
pub fn find(name: &str) -> Option<&'static OptionSpec> {
    OPTIONS.iter().find(|o| o.name == name)
}

/// `value` checked against the setting and normalized (plain integer,
/// `true`/`false`).
///
/// # Errors
/// An unknown name or a value out of bounds, said plainly.
pub fn validate(name: &str, value: &str) -> Result<String, String> {
    let spec = find(name)
        .ok_or_else(|| format!("unknown setting {name:?} (`cairn config ls` lists them)"))?;
    match spec.kind {
        Kind::Bool => match value.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok("true".into()),
            "false" | "0" | "no" | "off" => Ok("false".into()),
            _ => Err(format!("{name} takes true or false, not {value:?}")),
        },
        Kind::Integer { min, max, bytes } => {
            let parsed = parse_integer(value, bytes)
                .ok_or_else(|| format!("{name} takes an integer, not {value:?}"))?;
            if parsed < min || parsed > max {
                return Err(format!("{name} must be within {min}..={max}, not {parsed}"));
            }
            Ok(parsed.to_string())
        }
    }
}

fn parse_integer(text: &str, bytes: bool) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let value: u64 = digits.parse().ok()?;
    let scale: u64 = match (unit.to_ascii_uppercase().as_str(), bytes) {
        ("", _) => 1,
        ("K" | "KB" | "KIB", true) => 1 << 10,
        ("M" | "MB" | "MIB", true) => 1 << 20,
        ("G" | "GB" | "GIB", true) => 1 << 30,
        _ => return None,
    };
    value.checked_mul(scale)
}

/// The settings as set, with defaults for the rest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    set: BTreeMap<String, String>,
}

impl Settings {
    /// Settings from stored `name -> value` pairs; entries that no longer
    /// validate (an older or newer build's) are skipped.
    #[must_use]
    pub fn new(entries: impl IntoIterator<Item = (String, String)>) -> Settings {
        let set = entries
            .into_iter()
            .filter_map(|(name, value)| validate(&name, &value).ok().map(|v| (name, v)))
            .collect();
        Settings { set }
    }

    /// The value of `name`, as set or its default.
    ///
    /// # Panics
    /// If `name` is not in [`OPTIONS`]: a bug of the caller.
    #[must_use]
    pub fn get(&self, name: &str) -> &str {
        match self.set.get(name) {
            Some(value) => value,
            None => {
                find(name)
                    .unwrap_or_else(|| panic!("no setting {name}"))
                    .default
            }
        }
    }

    /// An integer setting.
    #[must_use]
    pub fn u64(&self, name: &str) -> u64 {
        // Values are validated on the way in; the default parses too.
        self.get(name).parse().unwrap_or(0)
    }

    #[must_use]
    pub fn bool(&self, name: &str) -> bool {
        self.get(name) == "true"
    }

    /// The values set explicitly.
    #[must_use]
    pub fn explicit(&self) -> &BTreeMap<String, String> {
        &self.set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        for spec in OPTIONS {
            assert_eq!(
                validate(spec.name, spec.default).as_deref(),
                Ok(spec.default),
                "{}",
                spec.name
            );
        }
    }

    #[test]
    fn values_are_checked_and_normalized() {
        assert_eq!(
            validate("osd_recovery_max_bytes_per_sec", "100M").as_deref(),
            Ok("104857600")
        );
        assert!(validate("osd_recovery_max_active", "0").is_err());
        assert!(validate("osd_recovery_max_active", "4M").is_err());
        assert!(validate("osd_recovery_max_active", "-1").is_err());
        assert!(validate("osd_scrub_auto_repair", "maybe").is_err());
        assert_eq!(
            validate("osd_scrub_auto_repair", "OFF").as_deref(),
            Ok("false")
        );
        assert!(
            validate("no_such_thing", "1")
                .expect_err("unknown names are refused")
                .contains("unknown")
        );
        assert!(validate("osd_recovery_max_bytes_per_sec", "99999999999999999999G").is_err());
    }

    #[test]
    fn settings_fall_back_to_defaults_and_skip_junk() {
        let s = Settings::new([
            ("osd_recovery_max_active".to_owned(), "9".to_owned()),
            ("bogus".to_owned(), "1".to_owned()),
        ]);
        assert_eq!(s.u64("osd_recovery_max_active"), 9);
        assert_eq!(s.u64("osd_max_scrubs"), 1);
        assert!(s.bool("osd_scrub_auto_repair"));
        assert_eq!(s.explicit().len(), 1);
    }
}
