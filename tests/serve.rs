//! `pipeline serve` end to end: the binary serves a model of every task kind on 127.0.0.1 (port
//! 0, the address read from its first stdout line), and a plain HTTP/1.1 client checks that
//! `/predict` answers what `pipeline predict --json` prints for the same input, every refusal
//! (400, 404, 405, 413) with its message, `/health`, `/info`, `/metrics`, and that SIGTERM with
//! requests in flight answers them all and exits 0.
//!
//! The models are random-weight tiny ALBERTs of each head, written as a fine-tune artifact is
//! (config.json with `finetuning_task`, model.safetensors, the vocab stage's vocab.txt and
//! tokenizer.json): what is compared is the serving, not what a model learned, and building
//! them costs milliseconds rather than a fine-tuning run per kind.

mod common;
#[path = "serve/support.rs"]
mod support;

use std::io::{BufRead, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Models, Server, exchange, http, peak_rss, post, predict_json, receive, same, send, stream_body,
};

/// One input per kind, as JSON and as `pipeline predict`'s arguments.
fn example(kind: &str) -> (Value, Vec<&'static str>) {
    let (c3, q3) = ("男：你去哪儿？女：去医院。", "女的去哪儿？");
    match kind {
        "pair" | "pair_regression" => (
            json!({"text_a": "我想买手机", "text_b": "我要买个手机"}),
            vec!["我想买手机", "我要买个手机"],
        ),
        "single" => (json!({"text": "这家酒店很好"}), vec!["这家酒店很好"]),
        "tagging" => (json!({"text": "周杰在北京工作"}), vec!["周杰在北京工作"]),
        "span" => (
            json!({"context": "2005年，周杰毕业于浙江大学。", "question": "周杰毕业于哪所大学？"}),
            vec![
                "--context",
                "2005年，周杰毕业于浙江大学。",
                "--question",
                "周杰毕业于哪所大学？",
            ],
        ),
        "reading_choice" => (
            json!({"context": c3, "question": q3, "choices": ["医院", "车站"]}),
            vec![
                "--context",
                c3,
                "--question",
                q3,
                "--choice",
                "医院",
                "--choice",
                "车站",
            ],
        ),
        _ => (
            json!({"question": "中国的首都是", "choices": ["北京", "上海", "广州"]}),
            vec![
                "--question",
                "中国的首都是",
                "--choice",
                "北京",
                "--choice",
                "上海",
                "--choice",
                "广州",
            ],
        ),
    }
}

const KINDS: [&str; 7] = [
    "pair",
    "single",
    "pair_regression",
    "tagging",
    "span",
    "reading_choice",
    "choice",
];

#[test]
fn every_kind_answers_what_predict_json_prints() {
    let models = Models::new(&KINDS);
    for kind in KINDS {
        let model = models.path(kind);
        let mut server = Server::start(&model, &[], &[]);
        let (input, args) = example(kind);
        let expected = predict_json(&model, &args);
        let (status, one) = post(server.addr, &input);
        assert_eq!(status, 200, "{kind}: {one}");
        assert!(
            same(&one, &expected, 1e-6),
            "{kind}: serve {one}\npredict {expected}"
        );

        // An array is answered in order, each as alone (up to the padding of a batch).
        let (status, many) = post(server.addr, &json!([input, input]));
        assert_eq!(status, 200, "{kind}: {many}");
        assert_eq!(many.as_array().map(Vec::len), Some(2), "{kind}: {many}");
        assert!(
            many.as_array()
                .unwrap()
                .iter()
                .all(|o| same(o, &expected, 1e-4)),
            "{kind}: {many}"
        );

        let (status, info) = http(server.addr, "GET", "/info", "");
        let info: Value = serde_json::from_str(&info).unwrap();
        assert_eq!(
            (status, info["model"]["task"].as_str()),
            (200, Some(kind)),
            "{info}"
        );
        let (status, _) = server.stop();
        assert!(status.success(), "{kind}: {status:?}");
    }
}

#[test]
fn refusals_have_their_status_and_name_the_problem() {
    let models = Models::new(&["pair"]);
    let model = models.path("pair");
    let limits = ["--max-body-bytes", "2048", "--max-inputs", "2"];
    let mut server = Server::start(&model, &limits, &[]);
    let addr = server.addr;
    let refused = |body: &str, status: u16| {
        let (got, text) = http(addr, "POST", "/predict", body);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(got, status, "{body}: {v}");
        v["error"].as_str().unwrap().to_string()
    };
    let msg = refused(r#"{"text": "只有一句"}"#, 400);
    assert!(msg.contains("`text_a`") || msg.contains("`text`"), "{msg}");
    let msg = refused(r#"{"text_a": 1, "text_b": "b"}"#, 400);
    assert_eq!(msg, "text_a: invalid type: integer `1`, expected a string");
    let long = json!({"text_a": "长".repeat(300), "text_b": "短"}).to_string();
    assert!(refused(&long, 400).contains("at most"));
    assert!(refused(r#"[{"text_a": "a", "text_b": " "}]"#, 400).starts_with("[0]: "));
    assert!(refused("{not json", 400).starts_with("the body is not valid JSON"));
    let pair = json!({"text_a": "a", "text_b": "b"});
    let three = json!([pair, pair, pair]).to_string();
    assert_eq!(
        refused(&three, 413),
        "3 inputs in one request; this server takes at most 2"
    );
    let big = json!({"text_a": "a".repeat(3000), "text_b": "b"}).to_string();
    assert!(refused(&big, 413).contains("2048 bytes"));
    assert_eq!(http(addr, "GET", "/predict", "").0, 405);
    assert_eq!(http(addr, "GET", "/nope", "").0, 404);
    assert_eq!(
        http(addr, "GET", "/health", ""),
        (200, r#"{"status":"ok"}"#.into())
    );

    let (_, metrics) = http(addr, "GET", "/metrics", "");
    for line in [
        r#"pipeline_serve_requests_total{endpoint="predict",status="400"} 5"#,
        r#"pipeline_serve_requests_total{endpoint="predict",status="413"} 2"#,
        r#"pipeline_serve_requests_total{endpoint="predict",status="405"} 1"#,
        "pipeline_serve_batch_inputs_count 0",
    ] {
        assert!(metrics.contains(line), "no {line} in\n{metrics}");
    }
    let (status, _) = server.stop();
    assert!(status.success());
}

#[test]
fn a_full_queue_is_a_503_with_retry_after() {
    let models = Models::new(&["single"]);
    // Room for one request of two inputs, and batches of one input: while the model predicts
    // one, the other waits in the queue and a concurrent request finds no room.
    let limits = [
        "--max-queue",
        "2",
        "--max-inputs",
        "2",
        "--max-batch-tokens",
        "1",
    ];
    let mut server = Server::start(&models.path("single"), &limits, &[]);
    let addr = server.addr;
    let body = json!([{"text": "这家酒店很好，房间很干净"}, {"text": "太差了"}]).to_string();
    let clients: Vec<_> = (0..32)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || exchange(send(addr, "POST", "/predict", &body)))
        })
        .collect();
    let answers: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let full: Vec<_> = answers.iter().filter(|a| a.0 == 503).collect();
    assert!(
        !full.is_empty(),
        "32 concurrent requests and never a full queue"
    );
    for (status, head, body) in &answers {
        assert!(*status == 200 || *status == 503, "{status}: {body}");
        if *status == 503 {
            assert!(head.contains("\r\nretry-after: 1\r\n"), "{head}");
            assert!(body.contains("the queue is full"), "{body}");
        }
    }
    let (_, metrics) = http(addr, "GET", "/metrics", "");
    let line = format!(
        r#"pipeline_serve_requests_total{{endpoint="predict",status="503"}} {}"#,
        full.len()
    );
    assert!(metrics.contains(&line), "no {line} in\n{metrics}");
    assert!(server.stop().0.success());
}

#[test]
fn a_flood_of_oversized_bodies_leaves_the_servers_memory_flat() {
    let models = Models::new(&["single"]);
    let limits = ["--max-body-bytes", "65536", "--max-concurrency", "8"];
    let mut server = Server::start(&models.path("single"), &limits, &[]);
    let (addr, pid) = (server.addr, server.pid());
    let before = peak_rss(pid);
    // A gigabyte declared and not sent: refused by its Content-Length alone.
    let head = "POST /predict HTTP/1.1\r\nhost: test\r\ncontent-length: 1073741824\r\n\r\n";
    for _ in 0..50 {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(head.as_bytes()).unwrap();
        assert_eq!(exchange_head(stream), 413);
    }
    // 16 clients streaming 64 MiB each, chunked (no length to refuse them by).
    let clients: Vec<_> = (0..16)
        .map(|_| std::thread::spawn(move || stream_body(addr, 64 << 20)))
        .collect();
    let streamed: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let growth = peak_rss(pid).saturating_sub(before);
    eprintln!(
        "streamed {streamed:?}; the server's peak RSS grew by {} KiB",
        growth >> 10
    );
    for (sent, answered) in &streamed {
        assert_eq!(*answered, Some(413), "{streamed:?}");
        // Cut off at the limit: what got written is the kernel's socket buffers.
        assert!(*sent < 16 << 20, "{streamed:?}");
    }
    assert!(
        growth < 32 << 20,
        "the server's peak RSS grew by {growth} bytes"
    );
    assert_eq!(http(addr, "GET", "/health", "").0, 200);
    assert!(server.stop().0.success());
}

/// The status of the response on `stream`, read from its first line only.
fn exchange_head(stream: TcpStream) -> u16 {
    let mut line = String::new();
    std::io::BufReader::new(stream)
        .read_line(&mut line)
        .unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn bad_flags_and_a_taken_port_are_errors_before_serving() {
    let models = Models::new(&["single"]);
    let model = models.path("single");
    let run = |args: &[&str]| {
        let out = Command::new(common::BIN)
            .args(["serve", "--device", "cpu", "--model"])
            .arg(&model)
            .args(args)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&["--max-inputs", "10", "--max-queue", "5"]);
    assert_eq!(code, Some(2), "a mistake on the command line: {stderr}");
    assert!(stderr.contains("could never be queued"), "{stderr}");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let (code, stderr) = run(&["--port", &port]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("could not listen on 127.0.0.1:{port}")),
        "{stderr}"
    );
    let help = Command::new(common::BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("curl -s localhost:8080/predict"), "{help}");
}

#[test]
fn sigterm_answers_the_requests_in_flight_then_exits_0() {
    let models = Models::new(&["pair"]);
    let model = models.path("pair");
    // While a request is still arriving, a batch waits for it up to 5 s: the requests are
    // surely received and waiting when the signal comes.
    let args = ["--max-wait-ms", "5000", "--max-batch-tokens", "100000"];
    let debug = [("RUST_LOG", "pipeline_serve=debug")];
    let mut server = Server::start(&model, &args, &debug);
    let addr = server.addr;
    let (input, _) = example("pair");
    let body = json!([input, input]).to_string();

    // One client sends half its body and stops: its request is arriving.
    let (head, tail) = body.as_bytes().split_at(body.len() / 2);
    let mut uploading = send_head(addr, body.len());
    uploading.write_all(head).unwrap();
    wait_for_metric(addr, "pipeline_serve_connections 2\n");
    std::thread::sleep(Duration::from_millis(50));
    let in_flight: Vec<_> = (0..4)
        .map(|_| send(addr, "POST", "/predict", &body))
        .collect();
    wait_for_metric(addr, "pipeline_serve_queue_depth 8\n");

    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    unsafe { libc::kill(server.pid(), libc::SIGTERM) };
    let refused = Instant::now();
    while TcpStream::connect(addr).is_ok() {
        let waited = refused.elapsed();
        assert!(
            waited < Duration::from_secs(5),
            "still accepting after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The upload finishes after the signal: it is answered too.
    uploading.write_all(tail).unwrap();
    for stream in in_flight.into_iter().chain([uploading]) {
        let (status, text) = receive(stream);
        assert_eq!(status, 200, "{text}");
        let outputs: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(outputs.as_array().map(Vec::len), Some(2), "{outputs}");
    }
    let (status, stderr) = server.wait();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("stopped (Terminate)"), "{stderr}");
    // The debug line of each request.
    let logged = stderr.lines().filter(|l| {
        l.contains("path=/predict") && l.contains("status=200") && l.contains("inputs=2")
    });
    assert_eq!(logged.count(), 5, "{stderr}");
}

/// A `/predict` request's head, declaring a body of `length` bytes, on a new connection.
fn send_head(addr: SocketAddr, length: usize) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let head = format!(
        "POST /predict HTTP/1.1\r\nhost: test\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

/// Polls `/metrics` (up to 4 s) until it has `line`.
fn wait_for_metric(addr: SocketAddr, line: &str) {
    let start = Instant::now();
    loop {
        let (_, metrics) = http(addr, "GET", "/metrics", "");
        if metrics.contains(line) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "no {line:?} in\n{metrics}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_directory_that_is_no_model_is_a_mistake_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    for command in [&["serve", "--port", "0"][..], &["predict", "一句话"][..]] {
        let out = Command::new(common::BIN)
            .args(command)
            .arg("--model")
            .arg(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
        assert!(stderr.contains("has no config.json"), "{stderr}");
    }
}
