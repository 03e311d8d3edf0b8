//! `logs -f` followers: places of their own, so every command still answers
//! while they are all taken; a storm of them while stopping; and a stopped
//! supervisor times out clients but not followers.

use super::*;

/// `count` clients running `supervise logs quiet -n 1 -f`. Returns them once
/// `served` of them have printed the tail line — so the supervisor is past
/// the tail and follows for each of those — or fails the test after [`WAIT`].
fn followers(s: &Supervised, count: usize, served: usize) -> Vec<Child> {
    let (printed, lines) = channel();
    let mut children = Vec::new();
    for _ in 0..count {
        let mut child = std::process::Command::new(binary())
            .current_dir(s.dir.path())
            .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
            .args(["logs", "quiet", "-n", "1", "-f"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("a follower starts");
        let stdout = child.stdout.take().expect("stdout");
        let printed = printed.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            let mut reader = BufReader::new(stdout);
            if reader.read_line(&mut line).is_ok() {
                let _ = printed.send(line);
            }
            // Reading on: a follow whose reader leaves ends.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        children.push(child);
    }
    let deadline = Instant::now() + WAIT;
    for _ in 0..served {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines.recv_timeout(left);
        assert_eq!(
            line.as_deref().ok(),
            Some("quiet.0 | up\n"),
            "every follower served prints the tail"
        );
    }
    children
}

/// How long a command may take while every follower's place is taken: far
/// under the client's [`REPLY_TIMEOUT`], which is what a command waiting
/// behind the followers ran into.
const ANSWERED_AT_ONCE: Duration = Duration::from_secs(3);

/// Run the command `args` and check that it succeeds within [`ANSWERED_AT_ONCE`].
fn answers_at_once(s: &Supervised, args: &[&str]) {
    let asked = Instant::now();
    let output = client(s, args);
    let took = asked.elapsed();
    assert!(output.status.success(), "{args:?}: {output:?}");
    assert!(
        took < ANSWERED_AT_ONCE,
        "{args:?} took {took:?} with every follower's place taken"
    );
}

#[test]
fn followers_have_their_own_places_and_every_command_still_answers() {
    let s = quiet();
    let baseline = held_fds(s.pid());
    let children = followers(&s, MAX_FOLLOWERS, MAX_FOLLOWERS);
    let during = held_fds(s.pid());
    assert!(
        during >= baseline + MAX_FOLLOWERS,
        "{during} fds with {MAX_FOLLOWERS} followers served ({baseline} before)"
    );
    // Every command answers at once, though each follower holds its place.
    answers_at_once(&s, &["status", "--json"]);
    answers_at_once(&s, &["reload", "quiet"]);
    answers_at_once(&s, &["stop", "quiet"]);
    answers_at_once(&s, &["start", "quiet"]);
    // One follower more is refused at once, saying why, not left waiting.
    let asked = Instant::now();
    let refused = client(&s, &["logs", "quiet", "-f"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        stderr.contains(&format!("{MAX_FOLLOWERS} `logs -f` followers")),
        "{stderr}"
    );
    assert!(asked.elapsed() < ANSWERED_AT_ONCE, "{:?}", asked.elapsed());
    // The app prints nothing more: only the closed connections can tell the
    // supervisor that the followers are gone, and free their places.
    terminate(children);
    assert!(
        eventually(WAIT, || held_fds(s.pid()) <= baseline),
        "{} fds after the followers left ({baseline} before)\n{}",
        held_fds(s.pid()),
        s.dump()
    );
    let again = followers(&s, MAX_FOLLOWERS, MAX_FOLLOWERS);
    answers_at_once(&s, &["status"]);
    terminate(again);
}

/// More followers than the supervisor takes, all at once, while it is
/// told to stop an app and then to exit: the commands answer, the
/// supervisor exits, and every follower ends — served ones quietly when
/// the supervisor is gone, the others refused, saying why.
#[test]
fn a_follower_storm_while_stopping_locks_nothing_out_and_every_follower_ends() {
    const STORM: usize = MAX_FOLLOWERS * 2 + 10;
    let mut s = quiet();
    let storm: Vec<Child> = (0..STORM)
        .map(|_| {
            std::process::Command::new(binary())
                .current_dir(s.dir.path())
                .env("XDG_RUNTIME_DIR", runtime_dir(s.dir.path()))
                .args(["logs", "quiet", "-f"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("a follower starts")
        })
        .collect();
    answers_at_once(&s, &["stop", "quiet"]);
    answers_at_once(&s, &["status"]);
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(WAIT).success(), "{}", s.dump());
    let deadline = Instant::now() + WAIT;
    let mut refused = 0;
    for mut child in storm {
        let ended = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                _ if Instant::now() >= deadline => break None,
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        let Some(status) = ended else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a follower went on after the supervisor exited");
        };
        let mut stderr = String::new();
        let _ = child
            .stderr
            .take()
            .map(|mut e| e.read_to_string(&mut stderr));
        match status.code() {
            Some(0) => {}
            Some(1) if stderr.contains("`logs -f` followers") => refused += 1,
            // Came after the supervisor had gone, or while it was exiting
            // with the request unread: there is none to follow.
            Some(3) if stderr.contains("no supervisor is running") => {}
            _ => panic!("a follower ended with {status:?}: {stderr}"),
        }
    }
    println!("{refused} of {STORM} followers were refused");
}

#[test]
fn a_stopped_supervisor_times_out_clients_but_not_followers() {
    let s = quiet();
    let mut follower = followers(&s, 1, 1);
    s.signal(libc::SIGSTOP);
    let asked = Instant::now();
    let output = client(&s, &["status"]);
    let took = asked.elapsed();
    // Still following, though the supervisor has said nothing for longer
    // than the timeout: a follow waits as long as the stream is open.
    let still_following = follower[0].try_wait().is_ok_and(|exit| exit.is_none());
    s.signal(libc::SIGCONT);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    assert!(
        stderr.contains("did not answer") && stderr.contains(".sock"),
        "names the socket and says why: {stderr}"
    );
    assert!(
        took >= REPLY_TIMEOUT && took < REPLY_TIMEOUT + Duration::from_secs(5),
        "gave up after {took:?} (the timeout is {REPLY_TIMEOUT:?})"
    );
    assert!(still_following, "the follower gave up");
    terminate(follower);
    assert!(client(&s, &["status"]).status.success());
}
