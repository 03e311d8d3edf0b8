use super::*;

fn split(chunks: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    let mut splitter = LineSplitter::default();
    for chunk in chunks {
        splitter.feed(chunk, &mut |l| lines.push(l.to_vec()));
    }
    splitter.finish(&mut |l| lines.push(l.to_vec()));
    lines
}

#[test]
fn splits_lines_across_chunks() {
    assert_eq!(
        split(&[b"a\nb", b"c\n", b"d"]),
        [b"a".to_vec(), b"bc".to_vec(), b"d".to_vec()]
    );
    assert_eq!(split(&[b"\n\n"]), [b"".to_vec(), b"".to_vec()]);
}

#[test]
fn long_lines_are_cut_once_with_a_marker() {
    let long = vec![b'x'; MAX_LINE_BYTES * 3];
    let lines = split(&[&long, b"\nnext\n"]);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].len(), MAX_LINE_BYTES + TRUNCATION_MARKER.len());
    assert!(lines[0].ends_with(TRUNCATION_MARKER));
    assert_eq!(lines[1], b"next");
    let exact = vec![b'y'; MAX_LINE_BYTES];
    let lines = split(&[&exact, b"\n"]);
    assert_eq!(lines, [exact]);
}

#[test]
fn human_lines_are_prefixed_and_json_lines_are_records() {
    let source = Source {
        app: "web".into(),
        slot: 2,
    };
    let human = render_line(
        &source,
        Stream::Stdout,
        b"hello",
        LogFormat::Human {
            colour: false,
            terminal: false,
        },
    );
    assert_eq!(human, b"web.2 | hello\n");
    let coloured = render_line(
        &source,
        Stream::Stdout,
        b"hello",
        LogFormat::Human {
            colour: true,
            terminal: true,
        },
    );
    assert!(coloured.starts_with(b"\x1b[3"));
    let json = render_line(&source, Stream::Stderr, b"oops \xff", LogFormat::Json);
    let record: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(record["event"], "output");
    assert_eq!(record["slot"], 2);
    assert_eq!(record["stream"], "stderr");
    assert_eq!(record["line"], "oops \u{fffd}");
}

#[test]
fn a_full_queue_drops_and_counts_instead_of_blocking() {
    struct Stuck;
    impl Write for Stuck {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            std::thread::sleep(Duration::from_secs(3600));
            Ok(0)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = LogSink::start(Stuck);
    let start = std::time::Instant::now();
    for _ in 0..LOG_QUEUE_LINES * 2 {
        sink.send(b"x\n".to_vec());
    }
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(sink.dropped() >= LOG_QUEUE_LINES as u64 - 1);
}

#[test]
fn the_note_of_dropped_lines_is_a_json_record_in_json_mode() {
    let note = drop_note(7, LogFormat::Json);
    let record: serde_json::Value = serde_json::from_slice(&note).unwrap();
    assert_eq!(record["event"], "output_dropped");
    assert_eq!(record["count"], 7);
    let human = String::from_utf8(drop_note(
        7,
        LogFormat::Human {
            colour: true,
            terminal: true,
        },
    ))
    .unwrap();
    assert_eq!(
        human,
        "supervise | 7 output lines dropped (the terminal is too slow or gone)\n"
    );
}

#[test]
fn a_broken_terminal_counts_lines_as_dropped() {
    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(libc::EPIPE))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = LogSink::start(Broken);
    sink.send(b"x\n".to_vec());
    sink.flush(Duration::from_secs(5));
    assert!(sink.dropped() >= 1);
}

#[test]
fn on_a_terminal_a_workers_control_characters_are_shown_as_question_marks() {
    let source = Source {
        app: "web".into(),
        slot: 0,
    };
    let hostile = b"\x1b]0;pwned\x07\x1b]52;c;eA==\x07\x1b[2J\rtab\there";
    let on = |colour, terminal| {
        render_line(
            &source,
            Stream::Stdout,
            hostile,
            LogFormat::Human { colour, terminal },
        )
    };
    assert_eq!(
        on(false, true),
        b"web.0 | ?]0;pwned??]52;c;eA==??[2J?tab\there\n"
    );
    // The colour of the prefix is ours; the line is as neutral.
    let coloured = on(true, true);
    assert!(coloured.ends_with(b"|\x1b[0m ?]0;pwned??]52;c;eA==??[2J?tab\there\n"));
    // Not a terminal (a pipe, a file): the bytes as printed.
    let mut kept = b"web.0 | ".to_vec();
    kept.extend_from_slice(hostile);
    kept.push(b'\n');
    assert_eq!(on(false, false), kept);
    let json = render_line(&source, Stream::Stdout, hostile, LogFormat::Json);
    let record: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(record["line"].as_str().unwrap().as_bytes(), hostile);
}
