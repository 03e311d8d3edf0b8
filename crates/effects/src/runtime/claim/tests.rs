use super::super::{ensure_runtime_dir, find_socket, identify, identify_absent};
use super::*;

/// A temp dir with a runtime dir `rt` in it and the path of a file
/// `name` there (written with no apps when `write`).
fn scene(name: &str, write: bool) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("rt");
    ensure_runtime_dir(&runtime).unwrap();
    let file = dir.path().join(name);
    if write {
        std::fs::write(&file, "apps: {}\n").unwrap();
    }
    (dir, runtime, file)
}

#[test]
fn one_claim_per_file_under_any_of_its_keys() {
    let (dir, runtime, file) = scene("ecosystem.yaml", true);
    let identity = identify(&file).unwrap();
    let mut claim = Claim::acquire(&runtime, &identity, "ecosystem.yaml", None).unwrap();
    match Claim::acquire(&runtime, &identity, "ecosystem.yaml", None) {
        Err(LockError::Held { pid, .. }) => assert_eq!(pid, std::process::id().to_string()),
        other => panic!("{other:?}"),
    }
    // Saved by rename: a new inode, the same place — still refused.
    std::fs::write(dir.path().join(".tmp"), "apps: {}\n").unwrap();
    std::fs::rename(dir.path().join(".tmp"), &file).unwrap();
    let saved = identify(&file).unwrap();
    assert!(matches!(
        Claim::acquire(&runtime, &saved, "ecosystem.yaml", None),
        Err(LockError::Held { .. })
    ));
    // Once the supervisor has followed the file, its new keys lead to it.
    claim.follow(&saved);
    std::os::unix::net::UnixListener::bind(claim.socket_path()).unwrap();
    assert_eq!(
        std::fs::canonicalize(find_socket(&runtime, &saved)).unwrap(),
        std::fs::canonicalize(claim.socket_path()).unwrap()
    );
    std::fs::remove_file(claim.socket_path()).unwrap();
    drop(claim);
    assert_eq!(entries(&runtime), Vec::<String>::new());
    Claim::acquire(&runtime, &saved, "ecosystem.yaml", None).unwrap();
}

/// The names in `runtime`, sorted.
fn entries(runtime: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(runtime)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn keys_of(claim: &Claim) -> BTreeSet<String> {
    claim.keys().map(str::to_string).collect()
}

#[test]
fn a_file_moved_away_and_copied_back_is_claimed_by_its_current_keys_only() {
    let (dir, runtime, file) = scene("eco.yaml", true);
    let before = identify(&file).unwrap();
    let mut claim = Claim::acquire(&runtime, &before, "eco.yaml", None).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(claim.socket_path()).unwrap();

    let backup = dir.path().join("backup.yaml");
    std::fs::rename(&file, &backup).unwrap();
    std::fs::copy(&backup, &file).unwrap();
    let now = identify(&file).unwrap();
    let moved = identify(&backup).unwrap();
    assert_eq!(
        moved.keys[0], before.keys[0],
        "the old inode went with the move"
    );
    assert_eq!(now.keys[1], before.keys[1], "the place stayed");
    claim.follow(&now);
    assert_eq!(keys_of(&claim), now.keys.iter().cloned().collect());

    // The moved file no longer leads here, and may be supervised itself.
    assert!(!find_socket(&runtime, &moved).exists());
    let other = Claim::acquire(&runtime, &moved, "backup.yaml", None).unwrap();
    assert_ne!(other.socket_path(), claim.socket_path());
    // The file in its place is still ours, and still finds us.
    match Claim::acquire(&runtime, &now, "eco.yaml", None) {
        Err(LockError::Held { pid, .. }) => assert_eq!(pid, std::process::id().to_string()),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::canonicalize(find_socket(&runtime, &now)).unwrap(),
        std::fs::canonicalize(claim.socket_path()).unwrap()
    );
    drop(other);
    std::fs::remove_file(claim.socket_path()).unwrap();
    drop(claim);
    assert_eq!(entries(&runtime), Vec::<String>::new());
}

#[test]
fn a_deleted_file_keeps_only_its_place() {
    let (_dir, runtime, file) = scene("eco.yaml", true);
    let identity = identify(&file).unwrap();
    let mut claim = Claim::acquire(&runtime, &identity, "eco.yaml", None).unwrap();
    std::fs::remove_file(&file).unwrap();
    let absent = identify_absent(&file).unwrap();
    assert_eq!(absent.keys, vec![identity.keys[1].clone()]);
    claim.follow(&absent);
    assert_eq!(keys_of(&claim), BTreeSet::from([identity.keys[1].clone()]));
    // Whatever file gets the freed inode is not kept out.
    let reused = FileIdentity {
        keys: vec![identity.keys[0].clone()],
    };
    drop(Claim::acquire(&runtime, &reused, "other.yaml", None).unwrap());
    // The file put back in its place is the same file: still ours.
    std::fs::write(&file, "apps: {}\n").unwrap();
    let back = identify(&file).unwrap();
    assert!(matches!(
        Claim::acquire(&runtime, &back, "eco.yaml", None),
        Err(LockError::Held { .. })
    ));
    claim.follow(&back);
    assert_eq!(keys_of(&claim), back.keys.iter().cloned().collect());
    assert_eq!(identify_absent(&file), None, "it is there");
    drop(claim);
    assert_eq!(entries(&runtime), Vec::<String>::new());
}

#[test]
fn clean_releases_and_refusals_leave_no_file() {
    let (dir, runtime, file) = scene("eco.yaml", false);
    for round in 0..3 {
        // An editor's save between runs: a new inode, a new first key.
        std::fs::write(dir.path().join(".tmp"), format!("# {round}\napps: {{}}\n")).unwrap();
        std::fs::rename(dir.path().join(".tmp"), &file).unwrap();
        let identity = identify(&file).unwrap();
        let claim = Claim::acquire(&runtime, &identity, "eco.yaml", None).unwrap();
        assert_eq!(entries(&runtime).len(), 4, "two locks, two socket links");
        drop(claim);
        assert_eq!(entries(&runtime), Vec::<String>::new(), "round {round}");
    }
    // Refused on its second key: the first one it had locked goes too.
    let identity = identify(&file).unwrap();
    let claim = Claim::acquire(&runtime, &identity, "eco.yaml", None).unwrap();
    let present = entries(&runtime);
    let elsewhere = FileIdentity {
        keys: vec![key_of("another inode"), identity.keys[1].clone()],
    };
    assert!(matches!(
        Claim::acquire(&runtime, &elsewhere, "eco.yaml", None),
        Err(LockError::Held { .. })
    ));
    assert_eq!(entries(&runtime), present);
    drop(claim);
    assert_eq!(entries(&runtime), Vec::<String>::new());
}

#[test]
fn the_locks_of_a_killed_supervisor_are_taken_over() {
    let (_dir, runtime, file) = scene("eco.yaml", true);
    let identity = identify(&file).unwrap();
    // What a SIGKILLed supervisor leaves: unlocked lock files (here two
    // separate ones, as after a swap) and dangling socket links.
    for key in &identity.keys {
        std::fs::write(runtime.join(format!("{key}.lock")), "4194304\n").unwrap();
        std::os::unix::fs::symlink(
            runtime.join("gone.sock"),
            runtime.join(format!("{key}.sock")),
        )
        .unwrap();
    }
    let claim = Claim::acquire(&runtime, &identity, "eco.yaml", None).unwrap();
    let locks: Vec<std::fs::Metadata> = identity
        .keys
        .iter()
        .map(|key| std::fs::metadata(runtime.join(format!("{key}.lock"))).unwrap())
        .collect();
    assert_eq!(
        locks[0].ino(),
        locks[1].ino(),
        "one lock file under both keys"
    );
    let pid = std::fs::read_to_string(runtime.join(format!("{}.lock", identity.keys[0])));
    assert_eq!(pid.unwrap().trim(), std::process::id().to_string());
    for key in &identity.keys {
        assert_eq!(
            std::fs::read_link(runtime.join(format!("{key}.sock"))).unwrap(),
            claim.socket_path()
        );
    }
    drop(claim);
    assert_eq!(entries(&runtime), Vec::<String>::new());
}

#[test]
fn one_holder_at_a_time_while_holders_come_and_go() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // flock belongs to an open file, so threads contend like processes.
    // A starter that locked a name its owner had just unlinked would hold
    // nothing — and overlap with the next holder. (Without the check
    // after locking, this fails most runs.)
    const THREADS: usize = 8;
    const ROUNDS: usize = 1000;
    let (_dir, runtime, file) = scene("eco.yaml", false);
    // One key (a file that is not there: its lock name alone decides),
    // then two (a file: the second is linked to the first's lock).
    let absent = identify_absent(&file).unwrap();
    std::fs::write(&file, "apps: {}\n").unwrap();
    for identity in [absent, identify(&file).unwrap()] {
        let holders = AtomicUsize::new(0);
        let overlaps = AtomicUsize::new(0);
        let wins = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    for _ in 0..ROUNDS {
                        match Claim::acquire(&runtime, &identity, "eco.yaml", None) {
                            Ok(claim) => {
                                if holders.fetch_add(1, Ordering::SeqCst) != 0 {
                                    overlaps.fetch_add(1, Ordering::SeqCst);
                                }
                                wins.fetch_add(1, Ordering::SeqCst);
                                std::thread::yield_now();
                                holders.fetch_sub(1, Ordering::SeqCst);
                                drop(claim);
                            }
                            Err(LockError::Held { .. }) => std::thread::yield_now(),
                            Err(error) => panic!("{error}"),
                        }
                    }
                });
            }
        });
        assert_eq!(overlaps.load(Ordering::SeqCst), 0, "{identity:?}");
        assert!(wins.load(Ordering::SeqCst) > 0);
        assert_eq!(entries(&runtime), Vec::<String>::new());
    }
}
