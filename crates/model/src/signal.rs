//! The signals a file may name, as a plain value: the resolved spec and the
//! core speak of signals without linking the system's C library; the shell
//! turns one into the kernel's number when it sends it.
//!
//! The numbers are Linux's on every architecture supervise is built for
//! (x86_64, aarch64, arm, riscv64); a test in the effects crate checks each
//! against the C library's.

use std::fmt;
use std::str::FromStr;

macro_rules! signals {
    ($($name:ident = $number:literal,)*) => {
        /// A POSIX or Linux signal.
        #[allow(clippy::upper_case_acronyms)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Signal {
            $(#[doc = concat!("`", stringify!($name), "` (", stringify!($number), ").")] $name,)*
        }

        impl Signal {
            /// Every signal, in the order of their numbers.
            pub const ALL: &'static [Signal] = &[$(Signal::$name,)*];

            /// Its name, as the file writes it (`SIGTERM`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Signal::$name => stringify!($name),)*
                }
            }

            /// The kernel's number for it.
            pub fn number(self) -> i32 {
                match self {
                    $(Signal::$name => $number,)*
                }
            }

            /// The signal with this number, if it is one of these.
            pub fn from_number(number: i32) -> Option<Signal> {
                match number {
                    $($number => Some(Signal::$name),)*
                    _ => None,
                }
            }
        }
    };
}

signals! {
    SIGHUP = 1,
    SIGINT = 2,
    SIGQUIT = 3,
    SIGILL = 4,
    SIGTRAP = 5,
    SIGABRT = 6,
    SIGBUS = 7,
    SIGFPE = 8,
    SIGKILL = 9,
    SIGUSR1 = 10,
    SIGSEGV = 11,
    SIGUSR2 = 12,
    SIGPIPE = 13,
    SIGALRM = 14,
    SIGTERM = 15,
    SIGSTKFLT = 16,
    SIGCHLD = 17,
    SIGCONT = 18,
    SIGSTOP = 19,
    SIGTSTP = 20,
    SIGTTIN = 21,
    SIGTTOU = 22,
    SIGURG = 23,
    SIGXCPU = 24,
    SIGXFSZ = 25,
    SIGVTALRM = 26,
    SIGPROF = 27,
    SIGWINCH = 28,
    SIGIO = 29,
    SIGPWR = 30,
    SIGSYS = 31,
}

/// A name that is not a signal's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown signal `{0}`")]
pub struct UnknownSignal(pub String);

impl FromStr for Signal {
    type Err = UnknownSignal;

    /// The exact name (`SIGTERM`); see [`Signal::parse_loose`] for what the
    /// file accepts.
    fn from_str(name: &str) -> Result<Signal, UnknownSignal> {
        Signal::ALL
            .iter()
            .copied()
            .find(|signal| signal.as_str() == name)
            .ok_or_else(|| UnknownSignal(name.to_string()))
    }
}

impl Signal {
    /// A name as the file may write it: any case, with or without `SIG`
    /// (`term`, `SIGTERM`, `Term`).
    pub fn parse_loose(name: &str) -> Option<Signal> {
        let upper = name.trim().to_ascii_uppercase();
        let full = if upper.starts_with("SIG") {
            upper
        } else {
            format!("SIG{upper}")
        };
        full.parse().ok()
    }

    /// The name of signal `number`, or `signal N` when it has none here.
    pub fn describe(number: i32) -> String {
        Signal::from_number(number)
            .map_or_else(|| format!("signal {number}"), |s| s.as_str().into())
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Signal {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Signal {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Signal, D::Error> {
        let name = std::borrow::Cow::<str>::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_go_both_ways() {
        for signal in Signal::ALL {
            assert_eq!(Signal::from_number(signal.number()), Some(*signal));
            assert_eq!(signal.as_str().parse::<Signal>(), Ok(*signal));
        }
        assert_eq!(Signal::from_number(0), None);
        assert_eq!(Signal::from_number(64), None);
        assert_eq!(Signal::describe(64), "signal 64");
    }

    #[test]
    fn the_file_may_write_a_signal_loosely() {
        assert_eq!(Signal::parse_loose("SIGTERM"), Some(Signal::SIGTERM));
        assert_eq!(Signal::parse_loose("term"), Some(Signal::SIGTERM));
        assert_eq!(Signal::parse_loose(" Quit "), Some(Signal::SIGQUIT));
        assert_eq!(Signal::parse_loose("SIGTREM"), None);
        assert_eq!(Signal::parse_loose(""), None);
    }

    #[test]
    fn a_signal_serializes_as_its_name() {
        let text = serde_json::to_string(&Signal::SIGABRT).unwrap();
        assert_eq!(text, "\"SIGABRT\"");
        assert_eq!(
            serde_json::from_str::<Signal>(&text).unwrap(),
            Signal::SIGABRT
        );
        assert!(serde_json::from_str::<Signal>("\"SIGNOPE\"").is_err());
    }
}
