//! Hostile and many clients: garbage requests get an error status, silent
//! clients hold neither the endpoint nor the loop, and two hundred scrapes at
//! once all get metrics.

use super::*;

#[test]
fn garbage_requests_get_an_error_status_and_break_nothing() {
    let mut s = Supervised::start(&ecosystem("127.0.0.1:0"));
    let address = metrics_address(&mut s);
    let too_long = format!(
        "GET /metrics HTTP/1.1\r\nX-Padding: {}\r\n\r\n",
        "a".repeat(MAX_REQUEST_BYTES * 2)
    );
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"GET / HTTP/1.1\r\n\r\n".to_vec(), 404),
        (b"GET /metrics/../etc/passwd HTTP/1.1\r\n\r\n".to_vec(), 404),
        (
            b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc".to_vec(),
            405,
        ),
        (b"DELETE /metrics HTTP/1.1\r\n\r\n".to_vec(), 405),
        (b"GARBAGE\r\n\r\n".to_vec(), 400),
        (
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec(),
            400,
        ),
        (b"GET /metrics HTTP/9.9\r\n\r\n".to_vec(), 400),
        (vec![0u8; 64].into_iter().chain(*b"\r\n\r\n").collect(), 400),
        (too_long.into_bytes(), 431),
    ];
    for (request, expected) in cases {
        let reply = exchange(address, &request)
            .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(&request)));
        assert_eq!(
            reply.status,
            expected,
            "{}: {reply:?}",
            String::from_utf8_lossy(&request)
        );
    }
    // A half request and a hang-up: nothing to answer, nothing broken.
    let mut half = TcpStream::connect(address).expect("connects");
    half.write_all(b"GET /metr").expect("sends");
    drop(half);
    // A request line without end, longer than any head may be.
    let mut endless = TcpStream::connect(address).expect("connects");
    endless.set_read_timeout(Some(HTTP_TIMEOUT)).unwrap();
    let _ = endless.write_all(&vec![b'x'; MAX_REQUEST_BYTES * 4]);
    let mut bytes = Vec::new();
    let _ = endless.read_to_end(&mut bytes);
    let reply = Reply::parse(&bytes).expect("a reply");
    assert_eq!(reply.status, 431);
    scrape(address);
    let status = status_json(&s);
    assert_eq!(app_status(&status, "web")["running"], 2, "{status}");
}

#[test]
fn silent_clients_hold_neither_the_endpoint_nor_the_loop() {
    let mut s = Supervised::start(&ecosystem("127.0.0.1:0"));
    let address = metrics_address(&mut s);
    // Every connection slot but one taken by a client that never speaks.
    let silent: Vec<TcpStream> = (0..MAX_CONNECTIONS - 1)
        .map(|_| TcpStream::connect(address).expect("connects"))
        .collect();
    let started = Instant::now();
    scrape(address);
    let status = status_json(&s);
    assert_eq!(app_status(&status, "web")["running"], 2, "{status}");
    // Before any silent client's time is up: nothing waited for a slot.
    assert!(
        started.elapsed() < REQUEST_TIMEOUT,
        "a scrape and a status took {:?} beside silent clients",
        started.elapsed()
    );
    // Each silent client is told off once its time to speak is up.
    let mut one = silent.into_iter().next().expect("a silent client");
    one.set_read_timeout(Some(HTTP_TIMEOUT)).unwrap();
    let mut bytes = Vec::new();
    one.read_to_end(&mut bytes)
        .expect("the endpoint answers and closes");
    assert_eq!(Reply::parse(&bytes).expect("a reply").status, 408);
}

#[test]
fn two_hundred_scrapes_at_once_all_get_metrics() {
    let mut s = Supervised::start(&ecosystem("127.0.0.1:0"));
    let address = metrics_address(&mut s);
    s.wait_for("web.1 spawned", |e| {
        e["event"] == "spawned" && e["slot"] == 1
    });
    let started = Instant::now();
    let scrapers: Vec<_> = (0..200)
        .map(|_| std::thread::spawn(move || get(address, "/metrics", None)))
        .collect();
    for scraper in scrapers {
        let reply = scraper.join().expect("a scraper thread");
        assert_eq!(reply.status, 200, "{reply:?}");
        assert!(
            reply
                .body
                .contains("supervise_instance_up{app=\"web\",slot=\"1\"} 1")
        );
    }
    let took = started.elapsed();
    eprintln!("200 concurrent scrapes took {took:?}");
    assert!(took < Duration::from_secs(15), "200 scrapes took {took:?}");
    let status = status_json(&s);
    assert_eq!(app_status(&status, "web")["running"], 2, "{status}");
}
