//! Rotation: by size under a 50 MB flood with every line whole or counted,
//! at most `keep` old files, and SIGUSR1 after an external rename.

use super::*;

#[test]
fn a_flood_of_50_mb_rotates_at_max_size_and_every_line_is_whole_or_counted() {
    // 50 MB in lines of 1,000 bytes: long enough lines that a debug build
    // takes them in seconds.
    const LINES: usize = 50_000;
    const LENGTH: usize = 1000;
    const MAX_SIZE: u64 = 4_000_000;
    let mut s = Supervised::start_dropping_output(
        &flood_app(
            LINES,
            LENGTH,
            "{file: \"logs/{app}.log\", max_size: 4MB, keep: 20}",
        ),
        make_logs,
    );
    s.wait_event("exited", "flood");
    stop(&mut s);

    let files = rotated_files(&s.path("logs/flood.log"));
    assert!(files.len() > 10, "50 MB in 4 MB files: {files:?}");
    let mut numbers = Vec::with_capacity(LINES);
    let mut longest_line = 0;
    for (i, file) in files.iter().enumerate() {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(text.ends_with('\n'), "{file:?} ends with a whole line");
        let size = text.len() as u64;
        for raw in text.lines() {
            longest_line = longest_line.max(raw.len() as u64 + 1);
            let line = parse_text_line(raw);
            assert_eq!(
                (line.source.as_str(), line.stream.as_str()),
                ("flood.0", "stdout")
            );
            let (number, pad) = line.line.split_once(' ').expect("a numbered line");
            assert_eq!(pad.len(), LENGTH - 10, "a whole line: {raw}");
            numbers.push(number.parse::<usize>().unwrap());
        }
        assert!(size <= MAX_SIZE, "{file:?} is {size} bytes");
        let last = i + 1 == files.len();
        if !last {
            assert!(
                size + longest_line > MAX_SIZE,
                "{file:?} was rotated only when the next line would not fit ({size} bytes)"
            );
        }
    }
    assert!(
        numbers.windows(2).all(|w| w[0] < w[1]),
        "lines in the order printed, none twice"
    );
    let lost = dropped(&s, "flood");
    assert_eq!(
        numbers.len() as u64 + lost,
        LINES as u64,
        "lines written + lines reported dropped = lines printed"
    );
}

#[test]
fn rotation_keeps_at_most_keep_old_files_and_the_newest_lines() {
    const LINES: usize = 20_000;
    let mut s = Supervised::start_dropping_output(
        &flood_app(
            LINES,
            100,
            "{file: \"logs/{app}.log\", max_size: 100kB, keep: 2}",
        ),
        |dir| {
            make_logs(dir);
            // A rotated file beyond `keep`, as a higher `keep` before would leave.
            std::fs::write(dir.join("logs/flood.log.3"), "old\n").unwrap();
        },
    );
    s.wait_event("exited", "flood");
    stop(&mut s);

    let mut names: Vec<String> = std::fs::read_dir(s.path("logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["flood.log", "flood.log.1", "flood.log.2"]);
    let mut numbers = Vec::new();
    for file in rotated_files(&s.path("logs/flood.log")) {
        for raw in std::fs::read_to_string(file).unwrap().lines() {
            let line = parse_text_line(raw);
            numbers.push(line.line[..8].parse::<usize>().unwrap());
        }
    }
    if dropped(&s, "flood") == 0 {
        assert_eq!(
            numbers.last(),
            Some(&(LINES - 1)),
            "the newest line is kept"
        );
        assert!(
            numbers.windows(2).all(|w| w[1] == w[0] + 1),
            "what is kept is the end, without a gap"
        );
    }
}

#[test]
fn sigusr1_after_a_rename_writes_new_lines_to_a_new_file() {
    let mut s = Supervised::start_dropping_output(
        r#"apps:
  ticker:
    command: ["python3", "-u", "-c", "import time\ni = 0\nwhile True:\n    print(i)\n    i += 1\n    time.sleep(0.02)"]
    log: {file: logs/ticker.log}
"#,
        make_logs,
    );
    let file = s.path("logs/ticker.log");
    let lines_in = |path: &Path| {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| parse_text_line(l).line.parse::<u64>().unwrap())
            .collect::<Vec<u64>>()
    };
    assert!(
        eventually(WAIT, || lines_in(&file).len() >= 5),
        "the ticker's lines reach its file\n{}",
        s.dump()
    );
    let moved = s.path("logs/ticker.log.moved");
    std::fs::rename(&file, &moved).unwrap();
    s.signal(libc::SIGUSR1);
    s.wait_for("the reopen", |e| e["event"] == "log_reopened");
    assert!(
        eventually(WAIT, || lines_in(&file).len() >= 3),
        "new lines go to a new file at the configured path"
    );
    stop(&mut s);
    let (old, new) = (lines_in(&moved), lines_in(&file));
    assert!(old.last() < new.first(), "{old:?} then {new:?}");
    let all: Vec<u64> = old.iter().chain(&new).copied().collect();
    assert_eq!(all[0], 0);
    assert!(
        all.windows(2).all(|w| w[1] == w[0] + 1),
        "no line lost or doubled across the reopen"
    );
}
