//! The last lines of every instance, kept for `supervise logs` in a
//! bounded ring per instance ([`RING_LINES`], [`RING_BYTES`]), and a feed of
//! new ones for `logs -f` (a follower that falls [`FOLLOW_QUEUE`] lines
//! behind misses some, and is told).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::broadcast;

/// Lines kept per instance for `supervise logs`.
pub(crate) const RING_LINES: usize = 1000;
/// Bytes kept per instance, whatever the line count.
pub(crate) const RING_BYTES: usize = 256 * 1024;
/// Lines a `logs -f` client may fall behind before it misses some.
pub(crate) const FOLLOW_QUEUE: usize = 4096;

/// The last lines of every instance, as an upgrade hands them over.
pub type RingsState = Vec<RingState>;

/// One instance's last lines.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RingState {
    pub(crate) app: String,
    pub(crate) slot: u32,
    pub lines: Vec<(SystemTime, String)>,
}

/// The last lines of every instance, and a feed of new ones.
pub struct LogHub {
    rings: Mutex<HashMap<(Arc<str>, u32), Ring>>,
    feed: broadcast::Sender<Line>,
    /// The apps of the file as applied, with their instance counts: what
    /// `logs` may name (`None` until the loop says, as in a hub alone).
    apps: Mutex<Option<HashMap<String, u32>>>,
}

/// A line an instance printed, and when it was read.
#[derive(Debug, Clone)]
pub struct Line {
    pub app: Arc<str>,
    pub slot: u32,
    pub at: SystemTime,
    pub text: String,
}

#[derive(Default)]
struct Ring {
    lines: VecDeque<(SystemTime, String)>,
    bytes: usize,
}

impl LogHub {
    pub fn new() -> Arc<LogHub> {
        Arc::new(LogHub {
            rings: Mutex::new(HashMap::new()),
            feed: broadcast::channel(FOLLOW_QUEUE).0,
            apps: Mutex::new(None),
        })
    }

    /// The apps of the file as applied now, `(name, instances)`: `logs`
    /// of another app, or of a slot beyond its count, is refused as every
    /// command refuses it.
    pub(crate) fn name_apps(&self, apps: impl IntoIterator<Item = (String, u32)>) {
        if let Ok(mut known) = self.apps.lock() {
            *known = Some(apps.into_iter().collect());
        }
    }

    /// Whether `logs` may name `app` (and `slot`): `Err` says why not, as
    /// every command says it. Before the loop named its apps, anything goes.
    pub fn check_target(&self, app: &str, slot: Option<u32>) -> Result<(), String> {
        let Ok(known) = self.apps.lock() else {
            return Ok(());
        };
        match known.as_ref() {
            Some(apps) => model::protocol::check_target(app, slot, apps.get(app).copied()),
            None => Ok(()),
        }
    }

    /// Keep a line an instance printed at `at` (bounded), and pass it to
    /// followers.
    pub fn push(&self, app: &Arc<str>, slot: u32, line: &[u8], at: SystemTime) {
        let text = String::from_utf8_lossy(line).into_owned();
        if let Ok(mut rings) = self.rings.lock() {
            let ring = rings.entry((app.clone(), slot)).or_default();
            ring.bytes += text.len();
            ring.lines.push_back((at, text.clone()));
            while ring.lines.len() > RING_LINES || ring.bytes > RING_BYTES {
                match ring.lines.pop_front() {
                    Some((_, old)) => ring.bytes -= old.len(),
                    None => break,
                }
            }
        }
        let _ = self.feed.send(Line {
            app: app.clone(),
            slot,
            at,
            text,
        });
    }

    /// Drop the rings of one slot of `app`, or of all its slots.
    pub(crate) fn forget(&self, app: &str, slot: Option<u32>) {
        if let Ok(mut rings) = self.rings.lock() {
            rings.retain(|(a, s), _| &**a != app || slot.is_some_and(|slot| *s != slot));
        }
    }

    /// Every ring, for an upgrade.
    pub fn export(&self) -> RingsState {
        let Ok(rings) = self.rings.lock() else {
            return Vec::new();
        };
        rings
            .iter()
            .map(|((app, slot), ring)| RingState {
                app: app.to_string(),
                slot: *slot,
                lines: ring.lines.iter().cloned().collect(),
            })
            .collect()
    }

    /// The hub with the rings the previous image kept.
    pub fn restore(state: RingsState) -> Arc<LogHub> {
        let hub = LogHub::new();
        if let Ok(mut rings) = hub.rings.lock() {
            for ring in state {
                let bytes = ring.lines.iter().map(|(_, text)| text.len()).sum();
                rings.insert(
                    (ring.app.as_str().into(), ring.slot),
                    Ring {
                        lines: ring.lines.into(),
                        bytes,
                    },
                );
            }
        }
        hub
    }

    /// New lines as they are kept (subscribe before taking the tail, so no
    /// line falls between the two).
    pub fn follow(&self) -> broadcast::Receiver<Line> {
        self.feed.subscribe()
    }

    /// How many rings are kept.
    #[cfg(test)]
    pub(crate) fn rings(&self) -> usize {
        self.rings.lock().map_or(0, |rings| rings.len())
    }

    /// Up to `count` last lines of each matching instance printed at
    /// `since` or later, oldest first (instance by instance).
    pub fn tail(
        &self,
        app: Option<&str>,
        slot: Option<u32>,
        count: usize,
        since: Option<SystemTime>,
    ) -> Vec<Line> {
        let Ok(rings) = self.rings.lock() else {
            return Vec::new();
        };
        let mut keys: Vec<&(Arc<str>, u32)> = rings
            .keys()
            .filter(|(a, s)| {
                app.is_none_or(|app| &**a == app) && slot.is_none_or(|slot| *s == slot)
            })
            .collect();
        keys.sort();
        let mut lines = Vec::new();
        for key in keys {
            let ring = &rings[key];
            // Lines are in the order they were read, so their times grow
            // (unless the wall clock was set back: then the cut is only
            // near): the first one at `since` or later is found by halving.
            let first = since.map_or(0, |since| ring.lines.partition_point(|(at, _)| *at < since));
            let skip = (ring.lines.len() - first).saturating_sub(count);
            lines.extend(ring.lines.iter().skip(first + skip).map(|(at, text)| Line {
                app: key.0.clone(),
                slot: key.1,
                at: *at,
                text: text.clone(),
            }));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rings_are_bounded_and_tail_in_order() {
        let hub = LogHub::new();
        let web: Arc<str> = "web".into();
        for i in 0..RING_LINES + 10 {
            hub.push(
                &web,
                0,
                format!("line {i}").as_bytes(),
                SystemTime::UNIX_EPOCH,
            );
        }
        hub.push(&web, 1, b"other slot", SystemTime::UNIX_EPOCH);
        let tail = hub.tail(Some("web"), Some(0), 3, None);
        let texts: Vec<&str> = tail.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                format!("line {}", RING_LINES + 7),
                format!("line {}", RING_LINES + 8),
                format!("line {}", RING_LINES + 9)
            ]
        );
        assert_eq!(
            hub.tail(Some("web"), None, 10_000, None).len(),
            RING_LINES + 1
        );
        let big = vec![b'x'; RING_BYTES / 2 + 1];
        hub.push(&web, 2, &big, SystemTime::UNIX_EPOCH);
        hub.push(&web, 2, &big, SystemTime::UNIX_EPOCH);
        assert_eq!(
            hub.tail(Some("web"), Some(2), 10, None).len(),
            1,
            "bounded in bytes too"
        );
        hub.forget("web", Some(2));
        assert_eq!(hub.rings(), 2);
        hub.push(&"api".into(), 0, b"x", SystemTime::UNIX_EPOCH);
        hub.forget("web", None);
        assert_eq!(hub.rings(), 1, "only api's ring is left");
    }

    #[test]
    fn since_keeps_the_lines_printed_from_then_on() {
        let hub = LogHub::new();
        let web: Arc<str> = "web".into();
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        for s in 0..10 {
            hub.push(&web, 0, format!("at {s}").as_bytes(), at(s));
        }
        hub.push(&web, 1, b"early", at(1));
        let since: Vec<String> = hub
            .tail(Some("web"), None, 100, Some(at(7)))
            .into_iter()
            .map(|l| l.text)
            .collect();
        assert_eq!(since, ["at 7", "at 8", "at 9"]);
        let last_two: Vec<String> = hub
            .tail(Some("web"), Some(0), 2, Some(at(3)))
            .into_iter()
            .map(|l| l.text)
            .collect();
        assert_eq!(
            last_two,
            ["at 8", "at 9"],
            "-n still bounds what is after --since"
        );
        assert!(hub.tail(None, None, 100, Some(at(11))).is_empty());
    }
}
