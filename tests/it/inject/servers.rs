//! Real, unmodified servers — `python3 -m http.server` (with a rolling reload
//! that refuses nothing), a Node server as the tutorials write it, `php -S`,
//! a Java `com.sun.net.httpserver`, the `any-server` example — serve from
//! every instance on one port; a stopping one leaves the port to the others.

use super::*;

#[test]
fn python_http_server_serves_from_every_instance_and_reloads_refusing_nothing() {
    let port = free_port();
    let yaml = format!(
        "apps:\n  web:\n    command: [python3, -m, http.server, \"{port}\"]\n    instances: 3\n    listen: [{{address: \"127.0.0.1:{port}\", inject: true}}]\n    ready: {{delay: 500ms}}\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("index.html"), "hello\n").expect("write");
    });
    s.wait_count("ready", "web", 3);
    let first = spawned_pids(&s, "web", 1);
    assert_eq!(first.len(), 3, "{}", s.dump());
    // Who accepted each request, read from /proc (the server is not
    // asked): all three, within 200 requests.
    assert_eq!(
        servers(port, s.pid(), &first, 200),
        first,
        "200 requests were not served by the 3 instances"
    );

    // A rolling reload under load refuses no connection and fails no
    // request, and replaces every instance.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let client = {
        let (stop, done, supervisor) = (stop.clone(), done.clone(), s.pid());
        std::thread::spawn(move || load(port, supervisor, 300, &stop, &done))
    };
    assert!(
        eventually(WAIT, || done.load(Ordering::Relaxed) >= 50),
        "the load runs"
    );
    let reload = run_client(&s, &["reload", "web"]);
    assert!(
        reload.status.success(),
        "{}",
        String::from_utf8_lossy(&reload.stderr)
    );
    stop.store(true, Ordering::Relaxed);
    let tally = client.join().expect("the client ends");
    println!("{tally:?}");
    assert!(
        tally.refused == 0 && tally.failed.is_empty() && tally.ok >= 300,
        "the reload refused or failed requests: {tally:?}"
    );
    s.wait_count("spawned", "web", 6);
    let second = spawned_pids(&s, "web", 2);
    assert_eq!(second.len(), 3, "three new instances: {}", s.dump());
    assert!(second.is_disjoint(&first), "{first:?} {second:?}");
    assert!(
        first.iter().all(|pid| is_gone(*pid)),
        "every old instance stopped"
    );
    // http.server dies at once on SIGTERM (it sets no handler): a
    // connection it had accepted then is cut, reset or closed unanswered
    // (the manual says so). The client has one connection open at a time,
    // so each of the 3 stopped instances cut at most one, and none that
    // lives cut any.
    let cut: usize = tally.cut.values().sum();
    assert!(
        cut <= first.len()
            && tally
                .cut
                .iter()
                .all(|(pid, n)| pid.is_none_or(|pid| first.contains(&pid) && *n == 1)),
        "a request was cut other than by a stopping instance: {tally:?}"
    );
    assert_eq!(
        servers(port, s.pid(), &second, 200),
        second,
        "the new instances serve, all of them"
    );
    assert_every_instance_reported(&mut s, "web");
}

#[test]
fn a_node_server_written_as_the_tutorials_write_it_serves_from_two_pids() {
    let port = free_port();
    let yaml = format!(
        "apps:\n  app:\n    command: node app.js\n    instances: 2\n    listen: [{{address: \"0.0.0.0:{port}\", inject: true}}]\n"
    );
    // No cluster module, no fd 3: the port is written in the program.
    let app = format!(
        "const http = require('http');\nconst server = http.createServer((req, res) => {{\n  res.end(`pid ${{process.pid}}`);\n}});\nserver.listen({port}, () => console.log('listening on {port}'));\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("app.js"), app).expect("write");
    });
    s.wait_count("ready", "app", 2);
    let pids = serving_pids(port, 2);
    assert_eq!(pids.len(), 2, "{pids:?}");
}

#[test]
fn php_built_in_server_serves_from_two_instances() {
    if Command::new("php").arg("--version").output().is_err() {
        panic!("php is missing: .ci/run installs php-cli");
    }
    let port = free_port();
    let yaml = format!(
        "apps:\n  php:\n    command: php -S 127.0.0.1:{port} -t public\n    instances: 2\n    listen: [{{address: \"127.0.0.1:{port}\", inject: true}}]\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::create_dir(dir.join("public")).expect("mkdir");
        std::fs::write(
            dir.join("public/index.php"),
            "pid <?php echo getmypid(); ?>",
        )
        .expect("write");
    });
    s.wait_count("ready", "php", 2);
    let pids = serving_pids(port, 2);
    assert_eq!(pids.len(), 2, "{pids:?}");
}

#[test]
fn a_java_httpserver_serves_from_two_instances() {
    if Command::new("java").arg("-version").output().is_err() {
        panic!("java is missing: the JDK is on these machines");
    }
    let port = free_port();
    let yaml = format!(
        "apps:\n  java:\n    command: java Server.java\n    instances: 2\n    listen: [{{address: \"0.0.0.0:{port}\", inject: true}}]\n    ready: {{delay: 3s}}\n"
    );
    let server = format!(
        r#"import com.sun.net.httpserver.HttpServer;
import java.net.InetSocketAddress;

public class Server {{
    public static void main(String[] args) throws Exception {{
        HttpServer server = HttpServer.create(new InetSocketAddress({port}), 0);
        server.createContext("/", exchange -> {{
            byte[] body = ("pid " + ProcessHandle.current().pid()).getBytes();
            exchange.sendResponseHeaders(200, body.length);
            exchange.getResponseBody().write(body);
            exchange.close();
        }});
        server.start();
    }}
}}
"#
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("Server.java"), server).expect("write");
    });
    s.wait_count("ready", "java", 2);
    let pids = serving_pids(port, 2);
    assert_eq!(pids.len(), 2, "{pids:?}");
}

#[test]
fn the_any_server_example_serves_an_unmodified_http_server_from_four_instances() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/any-server");
    let port = free_port();
    let yaml = std::fs::read_to_string(folder.join("ecosystem.yaml"))
        .expect("the example")
        .replace("8000", &port.to_string());
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::copy(folder.join("index.html"), dir.join("index.html")).expect("copy");
    });
    s.wait_count("ready", "web", 4);
    assert!(get(port).expect("served").contains("four instances"));
    let instances = spawned_pids(&s, "web", 1);
    assert_eq!(
        servers(port, s.pid(), &instances, 200),
        instances,
        "200 requests were not served by the 4 instances"
    );
}

#[test]
fn a_stopping_program_that_shuts_its_listener_down_leaves_the_port_to_the_others() {
    let port = free_port();
    // On SIGTERM it shuts its listening socket down, as some servers do to
    // wake their accept loop: the socket is every instance's.
    let program = format!(
        r#"import os, signal, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", {port}))
s.listen(16)
def stop(*_):
    s.shutdown(socket.SHUT_RDWR)
    s.close()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    conn, _ = s.accept()
    conn.recv(1024)
    conn.sendall(b"HTTP/1.0 200 OK\r\n\r\npid %d" % os.getpid())
    conn.close()
"#
    );
    let yaml = format!(
        "apps:\n  web:\n    command: [python3, server.py]\n    instances: 2\n    listen: [{{address: \"127.0.0.1:{port}\", inject: true}}]\n    ready: {{delay: 300ms}}\n"
    );
    let mut s = Supervised::start_with(&yaml, &[], |dir| {
        std::fs::write(dir.join("server.py"), program).expect("write");
    });
    s.wait_count("ready", "web", 2);
    let reload = run_client(&s, &["reload", "web"]);
    assert!(
        reload.status.success(),
        "{}",
        String::from_utf8_lossy(&reload.stderr)
    );
    s.wait_count("ready", "web", 4);
    let pids = serving_pids(port, 2);
    assert_eq!(pids.len(), 2, "the replacements serve: {pids:?}");
    assert_eq!(
        s.count("spawned", "web"),
        4,
        "the replacements never failed: {}",
        s.dump()
    );
}
