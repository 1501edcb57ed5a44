//! What the end-to-end tests of `pipeline serve` share: random-weight models of every head
//! written as fine-tune artifacts are, the binary started on port 0 and stopped by SIGTERM, a
//! plain HTTP/1.1 client (`Connection: close`, one request a connection), and `pipeline
//! predict --json` to compare with.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use burn::tensor::Device;
use pipeline_albert::{
    AlbertConfig, AlbertForMultipleChoice, AlbertForQuestionAnswering,
    AlbertForSequenceClassification, AlbertForTokenClassification, hf,
};
use serde_json::{Value, json};
use tempfile::TempDir;

/// One model of each kind, in a temporary directory.
pub struct Models {
    dir: TempDir,
}

impl Models {
    /// Builds the models of `kinds` (names as `/info` reports them).
    pub fn new(kinds: &[&str]) -> Models {
        let dir = tempfile::tempdir().unwrap();
        let vocab = vocab_stage(dir.path());
        for kind in kinds {
            let model = dir.path().join(kind);
            write_model(&model, kind, &vocab);
        }
        Models { dir }
    }

    pub fn path(&self, kind: &str) -> PathBuf {
        self.dir.path().join(kind)
    }
}

/// The vocab stage's artifact on the bundled fixture vocabulary: vocab.txt + tokenizer.json.
pub fn vocab_stage(root: &Path) -> PathBuf {
    let repo = env!("CARGO_MANIFEST_DIR");
    let yaml = format!(
        "stages:\n  vocab:\n    kind: vocab\n    inputs: [\"{repo}/datasets/fixtures/vocab/vocab.txt\"]\n    \
         params: {{source: file, file: \"{repo}/datasets/fixtures/vocab/vocab.txt\"}}\n"
    );
    std::fs::write(root.join("pipeline.yaml"), yaml).unwrap();
    let out = Command::new(crate::common::BIN)
        .arg("-f")
        .arg(root.join("pipeline.yaml"))
        .args(["run", "vocab", "--json"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    crate::common::artifact(&v, "vocab")
}

/// A random tiny ALBERT of `kind`'s head in `dir`, with the vocab stage's tokenizer files.
pub fn write_model(dir: &Path, kind: &str, vocab: &Path) {
    let d = Device::flex();
    let tokens = crate::common::read(vocab.join("vocab.txt")).lines().count();
    let mut c = AlbertConfig::named("tiny").unwrap();
    (c.vocab_size, c.embedding_size, c.hidden_size) = (tokens, 16, 32);
    (
        c.num_attention_heads,
        c.intermediate_size,
        c.num_hidden_layers,
    ) = (2, 64, 2);
    c.max_position_embeddings = 128;
    let labels = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let task = match kind {
        "pair" | "single" | "pair_regression" => {
            let names = match kind {
                "pair" => labels(&["0", "1"]),
                "single" => labels(&["negative", "positive"]),
                _ => labels(&["score"]),
            };
            let m = AlbertForSequenceClassification::new(&c, names.len(), 0.0, &d);
            hf::save_classifier(dir, &c, &m, &names).unwrap();
            [("pair", "lcqmc"), ("single", "chnsenticorp")]
                .iter()
                .find(|(k, _)| *k == kind)
                .map_or("sts_b", |(_, t)| t)
        }
        "tagging" => {
            let names = labels(&["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]);
            let m = AlbertForTokenClassification::new(&c, names.len(), 0.0, &d);
            hf::save_token_classifier(dir, &c, &m, &names).unwrap();
            "msra_ner"
        }
        "span" => {
            let m = AlbertForQuestionAnswering::new(&c, &d);
            hf::save_question_answering(dir, &c, &m).unwrap();
            "cmrc2018"
        }
        "reading_choice" | "choice" => {
            let m = AlbertForMultipleChoice::new(&c, 0.0, &d);
            hf::save_multiple_choice(dir, &c, &m).unwrap();
            if kind == "choice" { "choice" } else { "c3" }
        }
        other => panic!("no fixture for {other}"),
    };
    let path = dir.join("config.json");
    let mut config: Value = serde_json::from_str(&crate::common::read(&path)).unwrap();
    config["finetuning_task"] = json!(task);
    std::fs::write(&path, config.to_string()).unwrap();
    for file in ["vocab.txt", "tokenizer.json"] {
        std::fs::copy(vocab.join(file), dir.join(file)).unwrap();
    }
}

/// A running `pipeline serve`, killed if a test fails before stopping it.
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Server {
    /// Starts `pipeline serve --model MODEL --port 0 ARGS…` and waits for its address.
    pub fn start(model: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(crate::common::BIN)
            .args(["serve", "--device", "cpu", "--port", "0", "--model"])
            .arg(model)
            .args(args)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut server = Server {
            child: Some(child),
            addr: "127.0.0.1:1".parse().unwrap(),
            stderr: Some(stderr),
        };
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_default();
        let Some(addr) = line.trim().strip_prefix("listening on http://") else {
            let (status, stderr) = server.stop();
            panic!("serve printed {line:?} and exited {status:?}:\n{stderr}");
        };
        server.addr = addr.parse().unwrap();
        server
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    /// Sends SIGTERM and waits (up to 60 s) for the exit: its status and stderr.
    pub fn stop(&mut self) -> (ExitStatus, String) {
        // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        self.wait()
    }

    pub fn wait(&mut self) -> (ExitStatus, String) {
        let mut child = self.child.take().expect("stopped twice");
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                panic!("serve did not exit within 60 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stderr = self
            .stderr
            .take()
            .map(|t| t.join().unwrap())
            .unwrap_or_default();
        (status, stderr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Writes one HTTP/1.1 request (`Connection: close`) on a new connection.
pub fn send(addr: SocketAddr, method: &str, path: &str, body: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    stream
}

/// Reads the response to the end: its status and body.
pub fn receive(stream: TcpStream) -> (u16, String) {
    let (status, _, body) = exchange(stream);
    (status, body)
}

/// Reads the response to the end: its status, head (lower-cased) and body.
pub fn exchange(mut stream: TcpStream) -> (u16, String, String) {
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let head = head.to_ascii_lowercase();
    assert!(
        !head.contains("transfer-encoding"),
        "a chunked answer: {head}"
    );
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head, body.to_string())
}

pub fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    receive(send(addr, method, path, body))
}

/// POSTs `body` to `/predict`: the status and the JSON answer.
pub fn post(addr: SocketAddr, body: &Value) -> (u16, Value) {
    let (status, text) = http(addr, "POST", "/predict", &body.to_string());
    (status, serde_json::from_str(&text).unwrap())
}

/// What `pipeline predict --model MODEL --json ARGS…` prints.
pub fn predict_json(model: &Path, args: &[&str]) -> Value {
    let out = Command::new(crate::common::BIN)
        .args(["predict", "--device", "cpu", "--json", "--model"])
        .arg(model)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "predict {args:?}: {e}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `a` and `b` equal, numbers within `tol`.
pub fn same(a: &Value, b: &Value, tol: f64) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() <= tol
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y, tol))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same(v, w, tol)))
        }
        _ => a == b,
    }
}

/// The peak resident memory (VmHWM) of process `pid`, in bytes.
pub fn peak_rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb << 10
}

/// Streams up to `total` bytes of a chunked body to `/predict` until the server stops taking
/// them: the bytes written and the status answered, if one could be read.
pub fn stream_body(addr: SocketAddr, total: usize) -> (usize, Option<u16>) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = "POST /predict HTTP/1.1\r\nhost: test\r\ntransfer-encoding: chunked\r\n\r\n";
    stream.write_all(head.as_bytes()).unwrap();
    let chunk = [b' '; 16 << 10];
    let mut sent = 0;
    while sent < total {
        let framed = stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .and_then(|()| stream.write_all(&chunk))
            .and_then(|()| stream.write_all(b"\r\n"));
        if framed.is_err() {
            break;
        }
        sent += chunk.len();
    }
    let mut line = String::new();
    let answered = BufReader::new(stream)
        .read_line(&mut line)
        .ok()
        .and_then(|_| line.split_whitespace().nth(1)?.parse().ok());
    (sent, answered)
}
