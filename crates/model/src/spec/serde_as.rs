//! What has no `serde` of its own, written as the text it is read from
//! (for the state a re-exec hands over).

/// A cron expression as its pattern, parsed again as the file's are.
pub mod cron {
    use croner::Cron;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(cron: &Cron, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(cron.pattern.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Cron, D::Error> {
        let pattern = std::borrow::Cow::<str>::deserialize(deserializer)?;
        super::super::cron_parser()
            .parse(&pattern)
            .map_err(|e| serde::de::Error::custom(format!("cron `{pattern}`: {e}")))
    }
}

/// A timezone as its IANA name (`Europe/Paris`).
pub mod timezone {
    use chrono_tz::Tz;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(tz: &Tz, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(tz.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Tz, D::Error> {
        let name = std::borrow::Cow::<str>::deserialize(deserializer)?;
        name.parse::<Tz>()
            .map_err(|_| serde::de::Error::custom(format!("unknown timezone `{name}`")))
    }
}
