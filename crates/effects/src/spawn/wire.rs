//! How a [`Launch`] travels to the spawner process: one datagram of
//! length-prefixed byte strings and integers (its fds travel beside it, as
//! SCM_RIGHTS). Decoding is total: a malformed request is an error, never a
//! panic.

use super::Launch;

/// The largest request: a worker's argv and environment together — above
/// what `execve` takes with the usual 8 MiB stack limit (a quarter of it),
/// so the kernel, not this format, says what is too big.
pub(crate) const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// Requests up to this size travel in the datagram itself; larger ones in
/// a memfd passed with it (a datagram is bounded by the socket's buffer).
pub(crate) const INLINE_REQUEST_BYTES: usize = 64 * 1024;
/// The datagram that says "the request is in the first fd" (a request
/// itself starts with its version, never with this).
pub(crate) const IN_MEMFD: &[u8; 8] = b"memfd\0\0\0";
/// The version of this format (the spawner is our own binary, but a
/// package upgrade can replace it under a running supervisor).
const VERSION: u32 = 2;

struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn bytes(&mut self, value: &[u8]) {
        self.u32(value.len() as u32);
        self.0.extend_from_slice(value);
    }
    fn list(&mut self, values: &[Vec<u8>]) {
        self.u32(values.len() as u32);
        for value in values {
            self.bytes(value);
        }
    }
}

/// What comes with a request besides the launch: how many listening
/// sockets, and whether a cgroup directory fd is among the fds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extras {
    pub(crate) listen: usize,
    pub(crate) cgroup: bool,
}

/// Encode `launch`; `None` when too large.
pub(crate) fn encode(launch: &Launch, extras: Extras) -> Option<Vec<u8>> {
    let mut out = Writer(Vec::with_capacity(1024));
    out.u32(VERSION);
    out.bytes(&launch.program);
    out.bytes(&launch.cwd);
    out.list(&launch.argv);
    out.list(&launch.env);
    out.list(&launch.pid_variables);
    match &launch.identity {
        Some((uid, gid, groups)) => {
            out.u32(1);
            out.u32(*uid);
            out.u32(*gid);
            out.u32(groups.len() as u32);
            for group in groups {
                out.u32(*group);
            }
        }
        None => out.u32(0),
    }
    out.u64(launch.nofile_soft);
    out.u32(u32::from(launch.die_with_parent));
    out.u32(extras.listen as u32);
    out.u32(u32::from(extras.cgroup));
    (out.0.len() <= MAX_REQUEST_BYTES).then_some(out.0)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let len = self.u32()? as usize;
        Some(self.take(len)?.to_vec())
    }
    fn list(&mut self) -> Option<Vec<Vec<u8>>> {
        let count = self.u32()? as usize;
        // Every entry takes at least its 4-byte length: bound the allocation.
        if count > self.0.len() / 4 {
            return None;
        }
        (0..count).map(|_| self.bytes()).collect()
    }
}

/// Decode a request: the launch and what comes with it.
pub(crate) fn decode(bytes: &[u8]) -> Option<(Launch, Extras)> {
    let mut input = Reader(bytes);
    if input.u32()? != VERSION {
        return None;
    }
    let program = input.bytes()?;
    let cwd = input.bytes()?;
    let argv = input.list()?;
    let env = input.list()?;
    let pid_variables = input.list()?;
    let identity = match input.u32()? {
        0 => None,
        _ => {
            let uid = input.u32()?;
            let gid = input.u32()?;
            let count = input.u32()? as usize;
            if count > input.0.len() / 4 {
                return None;
            }
            let groups = (0..count)
                .map(|_| input.u32())
                .collect::<Option<Vec<u32>>>()?;
            Some((uid, gid, groups))
        }
    };
    let nofile_soft = input.u64()?;
    let die_with_parent = input.u32()? != 0;
    let listen = input.u32()? as usize;
    let cgroup = input.u32()? != 0;
    input.0.is_empty().then_some((
        Launch {
            program,
            cwd,
            argv,
            env,
            pid_variables,
            identity,
            nofile_soft,
            die_with_parent,
        },
        Extras { listen, cgroup },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch() -> Launch {
        Launch {
            program: b"/usr/bin/sleep".to_vec(),
            cwd: b"/srv".to_vec(),
            argv: vec![b"sleep".to_vec(), b"1000".to_vec()],
            env: vec![b"A=1".to_vec(), vec![0xff, b'=', 0xfe]],
            pid_variables: vec![b"LISTEN_PID".to_vec(), b"WATCHDOG_PID".to_vec()],
            identity: Some((33, 33, vec![33, 27])),
            nofile_soft: 1024,
            die_with_parent: true,
        }
    }

    const TWO: Extras = Extras {
        listen: 2,
        cgroup: true,
    };
    const NONE: Extras = Extras {
        listen: 0,
        cgroup: false,
    };

    #[test]
    fn round_trips() {
        let bytes = encode(&launch(), TWO).unwrap();
        assert_eq!(decode(&bytes), Some((launch(), TWO)));
        let mut plain = launch();
        plain.identity = None;
        assert_eq!(decode(&encode(&plain, NONE).unwrap()), Some((plain, NONE)));
    }

    #[test]
    fn every_truncation_and_garbage_is_refused_without_a_panic() {
        let bytes = encode(&launch(), TWO).unwrap();
        for end in 0..bytes.len() {
            assert_eq!(decode(&bytes[..end]), None, "truncated at {end}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&longer), None);
        assert_eq!(decode(&[0xff; 64]), None);
    }

    #[test]
    fn too_large_a_request_is_not_encoded() {
        let mut big = launch();
        big.env = vec![vec![b'x'; MAX_REQUEST_BYTES]];
        assert_eq!(encode(&big, NONE), None);
    }
}
