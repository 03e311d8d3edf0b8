//! The supervisor's own events, through `tracing`, into the output queue.
//!
//! Human format: `12:00:01.234 supervise | web.1 exited with code 1 after 0.4s;
//! restart 3 in 800ms`. JSON format (`--log-format json`): one object per line
//! with `timestamp`, `level`, `message` and the event's fields (`event`, `app`,
//! `slot`, `pid`, `generation`, …) at the top level — a stable interface that
//! tests and scripts rely on (the manual's event log, docs/src/events.md).

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Write};
use std::time::SystemTime;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

use super::output::terminal::{Tab, printable};
use super::output::{LogFormat, LogSink};

/// Hands tracing a buffer per event; the buffer is queued as one line when dropped.
struct SinkWriter(LogSink);

struct LineBuffer {
    sink: LogSink,
    buffer: Vec<u8>,
}

impl Write for LineBuffer {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LineBuffer {
    fn drop(&mut self) {
        if !self.buffer.is_empty() {
            self.sink.send(std::mem::take(&mut self.buffer));
        }
    }
}

impl<'a> MakeWriter<'a> for SinkWriter {
    type Writer = LineBuffer;
    fn make_writer(&'a self) -> LineBuffer {
        LineBuffer {
            sink: self.0.clone(),
            buffer: Vec::with_capacity(160),
        }
    }
}

/// `HH:MM:SS.mmm supervise | [warning: ]message`. On a terminal the
/// message is made printable: it may quote what a worker said (an HTTP
/// probe's answer, say), see [`super::output::terminal`].
struct HumanFormat {
    terminal: bool,
}

struct MessageOnly(String);

impl tracing::field::Visit for MessageOnly {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        }
    }
}

impl<S, N> FormatEvent<S, N> for HumanFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut message = MessageOnly(String::new());
        event.record(&mut message);
        let stamp = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let time = stamp.get(11..23).unwrap_or(&stamp);
        let line = human_line(time, *event.metadata().level(), &message.0, self.terminal);
        write!(writer, "{line}")
    }
}

/// One of the supervisor's own lines, in human form, with its newline.
fn human_line(time: &str, level: Level, message: &str, terminal: bool) -> String {
    let level = match level {
        Level::ERROR => "error: ",
        Level::WARN => "warning: ",
        Level::DEBUG => "debug: ",
        Level::TRACE => "trace: ",
        Level::INFO => "",
    };
    let message = if terminal {
        Cow::Owned(printable(message, usize::MAX, Tab::Keep))
    } else {
        Cow::Borrowed(message)
    };
    format!("{time} supervise | {level}{message}\n")
}

/// Install the global subscriber. `verbosity`: -1 quiet (warnings and errors),
/// 0 normal, 1+ debug. `RUST_LOG` overrides it.
///
/// The `notify` crate's own log lines are off unless asked for with `-vv`:
/// it warns when a watched directory disappears (a ConfigMap or release
/// swap deleting the old one), which is how watching a symlink chain works
/// here, not a problem; the watcher reports what matters itself.
pub fn init(sink: LogSink, format: LogFormat, verbosity: i8) {
    let default = match verbosity {
        i8::MIN..=-1 => "warn,notify=off",
        0 => "info,notify=off",
        1 => "debug,notify=off",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(SinkWriter(sink));
    let result = match format {
        LogFormat::Human { terminal, .. } => {
            builder.event_format(HumanFormat { terminal }).try_init()
        }
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    // A second init (tests calling run twice in one process) keeps the first.
    let _ = result;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_supervisors_own_lines_are_made_printable_on_a_terminal_only() {
        let message = "web.0 is not ready: HTTP \x1b]0;pwned\x07";
        assert_eq!(
            human_line("12:00:00.000", Level::WARN, message, true),
            "12:00:00.000 supervise | warning: web.0 is not ready: HTTP ?]0;pwned?\n"
        );
        assert_eq!(
            human_line("12:00:00.000", Level::INFO, message, false),
            format!("12:00:00.000 supervise | {message}\n")
        );
    }
}
